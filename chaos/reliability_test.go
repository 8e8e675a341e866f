package main

import (
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// The checkers of the failover, full-disk and long-transaction modes, fed clean and
// violating histories.

func testID(n byte) ulid.ULID { return ulid.ULID{15: n} }

func hasViolation(vs []string, inv, substr string) bool {
	for _, v := range vs {
		if strings.HasPrefix(v, inv+": ") && strings.Contains(v, substr) {
			return true
		}
	}
	return false
}

// TestLedgerLosses: an acknowledged commit missing from the database is a violation, or
// with an asynchronous failover the measured loss; two acknowledged completions of a job
// are a violation unless the first was lost (then it is the re-done figure); two that
// both survived are always one.
func TestLedgerLosses(t *testing.T) {
	a, b, c := testID(1), testID(2), testID(3)
	effects := map[[16]byte][]effectRow{
		a: {{run: 1, token: 10, outcome: "paused", counter: 1}, {run: 2, token: 11, outcome: "completed", counter: 1}},
		b: {{run: 2, token: 21, outcome: "completed"}},
		c: {{run: 1, token: 30, outcome: "completed"}},
	}
	clean := []ledgerEntry{{a, 1, 10, "paused"}, {a, 2, 11, "completed"}, {b, 2, 21, "completed"}}
	st, v := checkLedger(clean, effects, false)
	if len(v) != 0 || st.lost != 0 || st.completions != 2 || st.unrecorded != 1 {
		t.Fatalf("clean ledger: %+v %v (want 0 lost, 2 completions, c's effect unrecorded)", st, v)
	}

	// b's first completion (run 1, token 20) was acknowledged and lost; run 2 did it again.
	lostAndRedone := append(clean, ledgerEntry{b, 1, 20, "completed"})
	st, v = checkLedger(lostAndRedone, effects, false)
	if !hasViolation(v, invLedger, "token 20") || !hasViolation(v, invLedgerOnce, "2 acknowledged completions (1 in the database)") {
		t.Errorf("strict: a lost completion and its redo: %v", v)
	}
	st, v = checkLedger(lostAndRedone, effects, true)
	if len(v) != 0 || st.lost != 1 || st.lostDone != 1 || st.redone != 1 {
		t.Errorf("lossy: a lost completion and its redo is the figure, not a violation: %+v %v", st, v)
	}

	// A lost pause is a loss too.
	st, v = checkLedger(append(clean, ledgerEntry{a, 1, 9, "paused"}), effects, false)
	if !hasViolation(v, invLedger, "the paused of run 1 (token 9)") || st.lost != 1 || st.lostDone != 0 {
		t.Errorf("a lost pause: %+v %v", st, v)
	}

	// Two acknowledged completions that both survived: the job completed twice.
	twice := map[[16]byte][]effectRow{c: {{run: 1, token: 30, outcome: "completed"}, {run: 2, token: 31, outcome: "completed"}}}
	for _, lossy := range []bool{false, true} {
		_, v = checkLedger([]ledgerEntry{{c, 1, 30, "completed"}, {c, 2, 31, "completed"}}, twice, lossy)
		if !hasViolation(v, invLedgerOnce, "2 in the database") {
			t.Errorf("lossy=%v: two surviving completions: %v", lossy, v)
		}
	}
}

func TestParseLedger(t *testing.T) {
	a := testID(1)
	es, torn, err := parseLedger(fmt.Sprintf("%s 1 10 paused\n%s 2 11 completed\n%s 3 1", a, a, a))
	if err != nil || torn != 1 || len(es) != 2 || es[1] != (ledgerEntry{a, 2, 11, "completed"}) {
		t.Fatalf("parseLedger = %v, %d torn, %v", es, torn, err)
	}
	if _, _, err := parseLedger("garbage here\n"); err == nil {
		t.Error("a malformed line that is not the last one's torn end must be an error")
	}
}

// TestProducedLosses: the live producer's acknowledged enqueues must all exist (with an
// asynchronous failover, the missing ones are the figure); a failed enqueue that
// committed anyway is expected like any job; a failed enqueue whose error venturi does
// not call transient is a violation (the producer would drop the request).
func TestProducedLosses(t *testing.T) {
	at := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	acked := []producedJob{{id: testID(1), seq: 1, at: at}, {id: testID(2), seq: 2, at: at}}
	failed := []failedEnqueue{
		{seq: 3, at: at, err: "write: connection reset by peer", transient: true},
		{seq: 4, at: at, err: "failed to connect: connection refused", transient: true},
	}
	present := map[ulid.ULID]bool{testID(1): true, testID(2): true}
	committed := map[int64]ulid.ULID{3: testID(3)}
	res, v := classifyProduced(acked, failed, present, committed, false)
	if len(v) != 0 || len(res.lost) != 0 || res.committed != 1 || len(res.expects) != 3 {
		t.Fatalf("clean: %+v %v", res, v)
	}
	if res.errs["connection refused"] != 1 || res.errs["connection reset by peer"] != 1 {
		t.Errorf("error classes %v", res.errs)
	}

	delete(present, testID(2))
	res, v = classifyProduced(acked, failed, present, committed, false)
	if !hasViolation(v, invAckedEnq, testID(2).String()) || len(res.expects) != 2 {
		t.Errorf("strict: an acknowledged job missing: %v, %d expected", v, len(res.expects))
	}
	res, v = classifyProduced(acked, failed, present, committed, true)
	if len(v) != 0 || len(res.lost) != 1 || res.lost[0].id != testID(2) {
		t.Errorf("lossy: the missing job is the figure: %+v %v", res.lost, v)
	}

	refused := append(failed, failedEnqueue{seq: 5, at: at, err: "ERROR: value too long (SQLSTATE 22001)"})
	res, v = classifyProduced(acked, refused, map[ulid.ULID]bool{testID(1): true, testID(2): true}, committed, true)
	if !hasViolation(v, invEnqErrors, "SQLSTATE 22001") || res.nonTrans != 1 {
		t.Errorf("a refusal among the failed enqueues: %v", v)
	}
}

// TestZombieWrite: after an asynchronous failover, a row written after the kill by a run
// the new primary never heard of (no journal entry under its token) is a zombie's; any
// other row is held to the invariants.
func TestZombieWrite(t *testing.T) {
	base := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	kill := &faultRow{kind: "failover-async", at: base, until: base.Add(time.Second)}
	journal := []venturi.JournalEntry{{Event: venturi.EventAbandoned, Run: 1, Token: 7}, {Event: venturi.EventCompleted, Run: 2, Token: 9}}
	for _, c := range []struct {
		name  string
		token int64
		at    time.Time
		lossy *faultRow
		want  bool
	}{
		{"unknown token after the kill", 8, base.Add(2 * time.Second), kill, true},
		{"unknown token before the kill", 8, base.Add(-time.Millisecond), kill, false},
		{"a token the journal has", 9, base.Add(2 * time.Second), kill, false},
		{"no asynchronous failover", 8, base.Add(2 * time.Second), nil, false},
	} {
		if got := zombieWrite(c.token, c.at, journal, c.lossy); got != c.want {
			t.Errorf("%s: zombieWrite = %v, want %v", c.name, got, c.want)
		}
	}
	faults := []faultRow{{kind: "sigkill"}, {kind: "failover-sync"}}
	if lossyFailover(faults) != nil {
		t.Error("a synchronous failover is not lossy")
	}
	faults = append(faults, *kill)
	if f := lossyFailover(faults); f == nil || f.kind != "failover-async" {
		t.Errorf("lossyFailover = %v", f)
	}
}

// TestAttributeOutages: a failover or a full disk explains the runs it overlapped (to 2s
// after the database was back), on every worker; a long transaction explains nothing.
func TestAttributeOutages(t *testing.T) {
	base := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return base.Add(time.Duration(s * float64(time.Second))) }
	run := func(from, to float64) venturi.JournalEntry {
		return venturi.JournalEntry{Event: venturi.EventAbandoned, Worker: "chaos-worker-2-pid77", StartedAt: at(from), At: at(to)}
	}
	for _, kind := range []string{"failover-sync", "failover-async", "wal-full"} {
		faults := []faultRow{{kind: kind, at: at(10), until: at(12)}, {kind: "long-transaction", at: at(30), until: at(60)}}
		for _, c := range []struct {
			name string
			en   venturi.JournalEntry
			want int
		}{
			{"claimed before, rescued after", run(9, 13), 0},
			{"claimed 1.9s after the database was back", run(13.9, 16), 0},
			{"claimed 2.6s after", run(14.6, 17), -1},
			{"ended before the fault", run(5, 9.4), -1},
			{"during the long transaction", run(40, 45), -1},
		} {
			if got := attribute(c.en, faults, 2*time.Second); got != c.want {
				t.Errorf("%s, %s: attribute = %d, want %d", kind, c.name, got, c.want)
			}
		}
		if !backFromOutage(kind) {
			t.Errorf("claiming must resume after %s", kind)
		}
	}
	if backFromOutage("long-transaction") || backFromOutage("sigkill") {
		t.Error("only outages have a return to measure")
	}
}

// TestBackoff: the warning rate of a worker log inside the fault's window, and the
// bounds: a worker that spins (thousands of lines, a core) fails; one that backs off passes.
func TestBackoff(t *testing.T) {
	base := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	line := func(d time.Duration, level string) string {
		return fmt.Sprintf(`time=%s level=%s msg="venturi: claim failed" err="connection refused"`, base.Add(d).Format(time.RFC3339Nano), level)
	}
	var calm []string
	for i := range 20 {
		calm = append(calm, line(time.Duration(i)*500*time.Millisecond, "WARN"))
	}
	calm = append(calm, line(-time.Second, "WARN"), line(30*time.Second, "ERROR"), line(time.Second, "INFO"), "--- chaos: worker 1 started, pid 1")
	r := warnRate(strings.Join(calm, "\n"), base, base.Add(10*time.Second))
	if r.lines != 20 || r.peak != 2 || r.perSec != 2 {
		t.Fatalf("calm log: %+v", r)
	}
	var spin []string
	for i := range 5000 {
		spin = append(spin, line(time.Duration(i)*time.Millisecond, "ERROR"))
	}
	s := warnRate(strings.Join(spin, "\n"), base, base.Add(10*time.Second))
	if s.lines != 5000 || s.peak != 1000 {
		t.Fatalf("spinning log: %+v", s)
	}
	if v := backoffViolations(map[int]logRate{1: r}, map[int]float64{1: 0.03}); len(v) != 0 {
		t.Errorf("a worker that backs off: %v", v)
	}
	v := backoffViolations(map[int]logRate{1: r, 2: s}, map[int]float64{1: 0.03, 3: 0.97})
	if len(v) != 2 || !hasViolation(v, invBackoff, "worker 2 logged 5000") || !hasViolation(v, invBackoff, "worker 3 used 0.97 cores") {
		t.Errorf("a spinning worker and a busy one: %v", v)
	}
}

// TestHeldSnapshot: the long transaction must keep one backend_xmin whose age grows.
func TestHeldSnapshot(t *testing.T) {
	base := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	begin, end := base, base.Add(60*time.Second)
	samples := func(ages ...int64) []growthSample {
		var out []growthSample
		for i, a := range ages {
			out = append(out, growthSample{at: base.Add(time.Duration(10*i) * time.Second), xminAge: a})
		}
		return out
	}
	one := map[int64]bool{1234: true}
	if v := heldSnapshot(samples(0, 100, 900, 4000, 9000, 12000, 15000), one, begin, end); len(v) != 0 {
		t.Errorf("a held snapshot: %v", v)
	}
	for _, c := range []struct {
		name    string
		samples []growthSample
		xmins   map[int64]bool
		end     time.Time
		want    string
	}{
		{"its xmin moved", samples(0, 100, 900, 4000, 9000, 12000), map[int64]bool{1234: true, 1300: true}, end, "took 2 values"},
		{"no growth", samples(5, 5, 5, 5, 5, 5), one, end, "did not grow"},
		{"no snapshot in a sample", samples(0, 100, -1, 4000, 9000, 12000), one, end, "found no snapshot"},
		{"never ended", samples(0, 100, 900), one, time.Time{}, "did not run to its end"},
	} {
		if v := heldSnapshot(c.samples, c.xmins, begin, c.end); !hasViolation(v, invLongTx, c.want) {
			t.Errorf("%s: %v, want %q", c.name, v, c.want)
		}
	}
}

// TestDelayLink: the replication link delivers each direction's data in order, then its
// close (what was in flight arrives); closing the link (the primary's host gone) drops
// what is still in flight.
func TestDelayLink(t *testing.T) {
	t.Parallel()
	target, server := testServer(t)
	link, err := newDelayLink(target, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", link.addr())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"a", "b", "c"} {
		if _, err := c.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	_ = c.(*net.TCPConn).CloseWrite()
	s := <-server
	got, err := io.ReadAll(s)
	if err != nil || string(got) != "abc" {
		t.Fatalf("server read %q, %v; want abc, then the close", got, err)
	}
	if _, err := s.Write([]byte("reply")); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	got, err = io.ReadAll(c)
	if err != nil || string(got) != "reply" {
		t.Fatalf("client read %q, %v; want the reply sent before the server closed", got, err)
	}
	link.close()

	// Sever: the data is still in flight (an hour's latency) when the link closes.
	far, err := newDelayLink(target, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := net.Dial("tcp", far.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	s2 := <-server
	defer s2.Close()
	if _, err := c2.Write([]byte("lost")); err != nil {
		t.Fatal(err)
	}
	far.close()
	got, _ = io.ReadAll(s2)
	if len(got) != 0 {
		t.Fatalf("the server got %q through a severed link", got)
	}
}

package completer_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/internal/completer"
	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/jobrun"
	"github.com/venturi-dev/venturi/internal/journalenc"
	"github.com/venturi-dev/venturi/internal/testdb"
)

// within bounds every wait of these tests: the conditions they wait for come in
// milliseconds; the bound only keeps a broken completer from hanging the test.
const within = 30 * time.Second

// settled is one call of the completer's Publish.
type settled struct {
	end  *jobrun.End
	fate completer.Fate
}

// testBundle is a completer on a fresh, migrated schema, with what it reports.
type testBundle struct {
	pool    *pgxpool.Pool
	tracker *jobrun.Tracker
	c       *completer.Completer
	logs    *testdb.LogBuffer
	settled chan settled  // Publish's calls
	again   chan struct{} // Again's calls (capacity 1: whether it was called)
	// failSends, when positive, fails that many Sends with a transient error (a broken
	// connection, as the client sees it) before they reach the database.
	failSends int
	sends     int // Sends attempted, guarded by mu
	mu        sync.Mutex
	closed    sync.Once
}

var errBroken = errors.New("test: connection broken")

// setup returns a bundle whose completer has not started: ends submitted before start
// go in its first batch.
func setup(t *testing.T) *testBundle {
	t.Helper()
	pool := testdb.Pool(t, testdb.Schema(t), 4)
	if _, err := venturi.Migrate(context.Background(), pool); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	b := &testBundle{pool: pool, logs: &testdb.LogBuffer{}, settled: make(chan settled, 64), again: make(chan struct{}, 1)}
	log := slog.New(slog.NewTextHandler(b.logs, nil))
	b.tracker = jobrun.NewTracker(jobrun.TrackerConfig{
		Lease: time.Minute, Grace: time.Second, Logger: log,
		LeaseLost: errors.New("lease lost"), Stopped: errors.New("stopped"), TimedOut: errors.New("timed out"),
	})
	q := dbsqlc.New()
	b.c = completer.New(completer.Config{
		Writer: completer.Writer{
			Worker: "w1", Queries: q, Logger: log,
			Send: func(ctx context.Context, _ string, queue func(*pgx.Batch)) error {
				b.mu.Lock()
				b.sends++
				fail := b.failSends > 0
				if fail {
					b.failSends--
				}
				b.mu.Unlock()
				if fail {
					return errBroken
				}
				batch := &pgx.Batch{}
				dbsqlc.QueueSetLocalIndexScans(batch)
				queue(batch)
				return pool.SendBatch(ctx, batch).Close()
			},
			InTx: func(ctx context.Context, fn func(pgx.Tx) error) error { return pgx.BeginFunc(ctx, pool, fn) },
		},
		DB: pool, Tracker: b.tracker, Logger: log,
		Again: func() {
			select {
			case b.again <- struct{}{}:
			default:
			}
		},
		Publish:   func(e *jobrun.End, fate completer.Fate) { b.settled <- settled{e, fate} },
		CleanNote: func(s string) string { return strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "\uFFFD") },
	})
	return b
}

// start runs the completer until the test ends (then closes it).
func (b *testBundle) start(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	go b.c.Run(ctx)
	t.Cleanup(func() {
		b.close()
		cancel()
	})
}

// close closes the completer once: every submitted end is settled when it returns.
func (b *testBundle) close() {
	b.closed.Do(b.c.Close)
}

// claim inserts a running job of kind, as a claim would leave it, and returns it tracked.
func (b *testBundle) claim(t *testing.T, kind string) *jobrun.Job {
	t.Helper()
	j := &jobrun.Job{ID: ulid.Make(), Kind: kind, Queue: "default", Runs: 1, Sent: time.Now(), Stop: jobrun.NewStop()}
	err := b.pool.QueryRow(context.Background(), `INSERT INTO venturi_job (id, kind, queue, state, payload, run_at,
		runs, lease_token, lease_expires_at, worker_id, attempted_at)
		VALUES ($1, $2, 'default', 'running', '{}', now(), 1, nextval('venturi_lease_token_seq'),
		        now() + interval '1 minute', 'w1', now())
		RETURNING lease_token, attempted_at`,
		pgtype.UUID{Bytes: j.ID, Valid: true}, kind).Scan(&j.Token, &j.Started)
	if err != nil {
		t.Fatalf("insert %s: %v", kind, err)
	}
	j.Received = time.Now()
	b.tracker.Add([]*jobrun.Job{j})
	return j
}

// wait returns the next n ends settled, by job ID.
func (b *testBundle) wait(t *testing.T, n int) map[ulid.ULID]settled {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	got := map[ulid.ULID]settled{}
	for len(got) < n {
		select {
		case s := <-b.settled:
			if _, dup := got[s.end.Job.ID]; dup {
				t.Fatalf("job %s settled twice", s.end.Job.ID)
			}
			got[s.end.Job.ID] = s
		case <-deadline.C:
			t.Fatalf("%d of %d ends settled within %v; logs:\n%s", len(got), n, within, b.logs)
		}
	}
	return got
}

// row is a job's row as the tests check it.
type row struct {
	state    string
	token    *int64
	failures int
	carry    []byte
	journal  []venturi.JournalEntry
}

func (b *testBundle) row(t *testing.T, id ulid.ULID) row {
	t.Helper()
	var r row
	var journal []byte
	err := b.pool.QueryRow(context.Background(),
		`SELECT state::text, lease_token, failures, carry, journal FROM venturi_job_all WHERE id = $1`,
		pgtype.UUID{Bytes: id, Valid: true}).Scan(&r.state, &r.token, &r.failures, &r.carry, &journal)
	if err != nil {
		t.Fatalf("row %s: %v", id, err)
	}
	if err := json.Unmarshal(journal, &r.journal); err != nil {
		t.Fatalf("journal of %s: %v", id, err)
	}
	return r
}

// last returns the row's last journal entry, or fails the test.
func (r row) last(t *testing.T) venturi.JournalEntry {
	t.Helper()
	if len(r.journal) == 0 {
		t.Fatal("journal is empty")
	}
	return r.journal[len(r.journal)-1]
}

// TestCompleterWritesABatch: ends submitted together are written in one statement and
// settled: each published as written, the tracker emptied, and Again called because one
// of them (a retry) made its job pending again.
func TestCompleterWritesABatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	done, retry, paused := b.claim(t, "done"), b.claim(t, "retry"), b.claim(t, "paused")
	ends := []*jobrun.End{
		{Job: done, State: dbsqlc.VenturiJobStateCompleted, Ended: time.Now(),
			Entry: journalenc.Entry{Event: "completed", Note: "all good", Attachment: json.RawMessage(`{"n":1}`)}},
		{Job: retry, State: dbsqlc.VenturiJobStateScheduled, Delay: time.Hour, Failed: true, Ended: time.Now(),
			Entry: journalenc.Entry{Event: "failed", Note: "boom", ResumeIn: time.Hour}},
		{Job: paused, State: dbsqlc.VenturiJobStateAvailable, SetCarry: true, Carry: []byte(`{"step":3}`), Ended: time.Now(),
			Entry: journalenc.Entry{Event: "paused", Note: "checkpoint"}},
	}
	for _, e := range ends {
		b.tracker.Ended(e.Job)
		b.c.Submit(e) // before Run: one batch
	}
	b.start(t)
	got := b.wait(t, len(ends))
	b.close()
	for _, e := range ends {
		if s := got[e.Job.ID]; s.fate != completer.Written || s.end != e {
			t.Errorf("%s: settled %v (same end: %v), want written", e.Job.Kind, s.fate, s.end == e)
		}
		if b.tracker.Holds(e.Job) {
			t.Errorf("%s: still tracked after it settled", e.Job.Kind)
		}
	}
	if left := b.tracker.Leased(); len(left) != 0 {
		t.Errorf("%d runs left in the tracker", len(left))
	}
	select {
	case <-b.again:
	default:
		t.Error("Again not called after a retry made its job pending again")
	}
	if n := b.sendCount(); n != 1 {
		t.Errorf("%d statements sent for one batch of plain runs, want 1", n)
	}

	r := b.row(t, done.ID)
	e := r.last(t)
	if r.state != "completed" || r.token != nil || e.Event != venturi.EventCompleted || e.Note != "all good" ||
		string(e.Attachment) != `{"n": 1}` || e.Token != done.Token || e.Worker != "w1" || e.Run != 1 ||
		!e.StartedAt.Equal(done.Started) || e.At.Before(done.Started) {
		t.Errorf("completed row: %+v, entry %+v", r, e)
	}
	r = b.row(t, retry.ID)
	if e := r.last(t); r.state != "scheduled" || r.failures != 1 || e.Event != venturi.EventFailed || e.ResumeIn != time.Hour {
		t.Errorf("retried row: %+v, entry %+v", r, e)
	}
	r = b.row(t, paused.ID)
	if e := r.last(t); r.state != "available" || string(r.carry) != `{"step": 3}` || e.Event != venturi.EventPaused {
		t.Errorf("paused row: %+v (carry %s), entry %+v", r, r.carry, e)
	}
}

func (b *testBundle) sendCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sends
}

// TestCompleterDiscardsAStaleToken: the end of a run whose job was claimed again under a
// newer token (its lease was lost) writes nothing and is published as discarded, while
// the live end of the same batch lands.
func TestCompleterDiscardsAStaleToken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	live, stale := b.claim(t, "live"), b.claim(t, "stale")
	var newToken int64
	if err := b.pool.QueryRow(context.Background(),
		`UPDATE venturi_job SET lease_token = nextval('venturi_lease_token_seq') WHERE id = $1 RETURNING lease_token`,
		pgtype.UUID{Bytes: stale.ID, Valid: true}).Scan(&newToken); err != nil {
		t.Fatal(err)
	}
	for _, j := range []*jobrun.Job{live, stale} {
		b.c.Submit(&jobrun.End{Job: j, State: dbsqlc.VenturiJobStateCompleted, Ended: time.Now(),
			Entry: journalenc.Entry{Event: "completed"}})
	}
	b.start(t)
	got := b.wait(t, 2)
	b.close()
	if f := got[live.ID].fate; f != completer.Written {
		t.Errorf("live end settled %v, want written", f)
	}
	if f := got[stale.ID].fate; f != completer.Discarded {
		t.Errorf("stale end settled %v, want discarded", f)
	}
	if b.tracker.Holds(live) || b.tracker.Holds(stale) {
		t.Error("a settled run is still tracked")
	}
	if r := b.row(t, live.ID); r.state != "completed" {
		t.Errorf("live row %s, want completed", r.state)
	}
	r := b.row(t, stale.ID)
	if r.state != "running" || r.token == nil || *r.token != newToken || len(r.journal) != 0 {
		t.Errorf("stale row: %+v; want it running under token %d, untouched", r, newToken)
	}
	if !strings.Contains(b.logs.String(), "run result discarded: the run no longer holds its job (lease lost)") {
		t.Errorf("the discard was not logged:\n%s", b.logs)
	}
	select {
	case <-b.again:
		t.Error("Again called, but no job became pending")
	default:
	}
}

// TestCompleterStoresARefusedEndDegraded: a batch the database refuses (an attachment
// with \u0000, which jsonb cannot store) is split to find the end that poisons it; that
// end is stored without its carry and attachment, its note saying why, and the rest of
// the batch lands whole.
func TestCompleterStoresARefusedEndDegraded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first, poison, last := b.claim(t, "first"), b.claim(t, "poison"), b.claim(t, "last")
	end := func(j *jobrun.Job, attachment string) *jobrun.End {
		return &jobrun.End{Job: j, State: dbsqlc.VenturiJobStateAvailable, SetCarry: true, Carry: []byte(`{"step":7}`),
			Ended: time.Now(), Entry: journalenc.Entry{Event: "paused", Note: "checkpoint", Attachment: json.RawMessage(attachment)}}
	}
	ends := []*jobrun.End{end(first, `{"evidence":1}`), end(poison, `{"evidence":"nul \u0000"}`), end(last, `{"evidence":3}`)}
	for _, e := range ends {
		b.c.Submit(e)
	}
	b.start(t)
	got := b.wait(t, len(ends))
	b.close()
	for _, e := range ends {
		if f := got[e.Job.ID].fate; f != completer.Written {
			t.Errorf("%s settled %v, want written", e.Job.Kind, f)
		}
	}
	if !ends[1].Degraded || ends[0].Degraded || ends[2].Degraded {
		t.Errorf("degraded: %v %v %v, want only the poisoned end", ends[0].Degraded, ends[1].Degraded, ends[2].Degraded)
	}
	for _, j := range []*jobrun.Job{first, last} {
		r := b.row(t, j.ID)
		e := r.last(t)
		if r.state != "available" || string(r.carry) != `{"step": 7}` || len(e.Attachment) == 0 || e.Note != "checkpoint" {
			t.Errorf("%s: row %+v (carry %s), entry %+v; want it whole", j.Kind, r, r.carry, e)
		}
	}
	r := b.row(t, poison.ID)
	e := r.last(t)
	if r.state != "available" || r.carry != nil || len(e.Attachment) != 0 || e.Event != venturi.EventPaused ||
		!strings.HasPrefix(e.Note, "result could not be stored (") || !strings.HasSuffix(e.Note, "): checkpoint") {
		t.Errorf("poisoned row %+v (carry %s), entry %+v; want it stored without carry and attachment", r, r.carry, e)
	}
	if !strings.Contains(b.logs.String(), "run result refused by the database; storing it without carry and attachment") {
		t.Errorf("the refusal was not logged:\n%s", b.logs)
	}
}

// TestCompleterRetriesAFailedWrite: a write that fails without a verdict on the data (a
// broken connection) is retried with the same end until it lands.
func TestCompleterRetriesAFailedWrite(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.claim(t, "retried")
	b.failSends = 2
	e := &jobrun.End{Job: j, State: dbsqlc.VenturiJobStateCompleted, Ended: time.Now(),
		Entry: journalenc.Entry{Event: "completed", Attachment: json.RawMessage(`{"kept":true}`)}}
	b.c.Submit(e)
	b.start(t)
	if s := b.wait(t, 1)[j.ID]; s.fate != completer.Written {
		t.Fatalf("settled %v, want written", s.fate)
	}
	b.close()
	if n := b.sendCount(); n != 3 {
		t.Errorf("%d sends, want 3 (two failed, then the write)", n)
	}
	r := b.row(t, j.ID)
	if le := r.last(t); r.state != "completed" || string(le.Attachment) != `{"kept": true}` || e.Degraded {
		t.Errorf("row %+v, entry %+v (degraded %v); want the whole result", r, le, e.Degraded)
	}
}

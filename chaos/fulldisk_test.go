package main

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// The server log of a full-disk run from the fill to the start (chaos -fulldisk, PostgreSQL
// 15): the PANIC, crash recovery failing for want of room, the postmaster's exit, amid the
// clients it turned away. The first line is cut where the driver started reading.
const fullDiskStopLog = `ed to "off"
2026-12-03 19:08:19.473 UTC [13802] PANIC:  could not write to file "pg_wal/xlogtemp.13802": No space left on device
2026-12-03 19:08:19.473 UTC [13802] STATEMENT:  commit
2026-12-03 19:08:19.487 UTC [13575] LOG:  server process (PID 13802) was terminated by signal 6: Aborted
2026-12-03 19:08:19.487 UTC [13575] DETAIL:  Failed process was running: commit
2026-12-03 19:08:19.489 UTC [13575] LOG:  terminating any other active server processes
2026-12-03 19:08:19.695 UTC [14283] LOG:  PID 14279 in cancel request did not match any process
2026-12-03 19:08:19.730 UTC [13575] LOG:  all server processes terminated; reinitializing
2026-12-03 19:08:19.851 UTC [14285] LOG:  database system was interrupted; last known up at 2026-12-03 19:07:42 UTC
2026-12-03 19:08:19.875 UTC [14289] FATAL:  the database system is in recovery mode
2026-12-03 19:08:21.020 UTC [14378] FATAL:  the database system is not yet accepting connections
2026-12-03 19:08:21.020 UTC [14378] DETAIL:  Consistent recovery state has not been yet reached.
2026-12-03 19:08:22.742 UTC [14285] LOG:  database system was not properly shut down; automatic recovery in progress
2026-12-03 19:08:22.771 UTC [14285] LOG:  redo starts at 0/601170
2026-12-03 19:08:23.484 UTC [14285] LOG:  redo done at 0/1BFFFC0 system usage: CPU: user: 0.16 s, system: 0.04 s, elapsed: 0.71 s
2026-12-03 19:08:23.501 UTC [14380] FATAL:  the database system is in recovery mode
2026-12-03 19:08:23.522 UTC [14285] FATAL:  could not write to file "pg_wal/xlogtemp.14285": No space left on device
2026-12-03 19:08:23.587 UTC [13575] LOG:  startup process (PID 14285) exited with exit code 1
2026-12-03 19:08:23.587 UTC [13575] LOG:  terminating any other active server processes
2026-12-03 19:08:23.633 UTC [13575] LOG:  shutting down due to startup process failure
2026-12-03 19:08:23.640 UTC [14390] FATAL:  the database system is shutting down
2026-12-03 19:08:23.649 UTC [13575] LOG:  database system is shut down
`

// A start that failed: the port was taken while the server was down.
const portTakenLog = `2026-12-03 19:30:01.100 UTC [20001] LOG:  starting PostgreSQL 15.18 (Debian 15.18-0+deb12u1) on x86_64-pc-linux-gnu, compiled by gcc (Debian 12.2.0-14+deb12u1) 12.2.0, 64-bit
2026-12-03 19:30:01.101 UTC [20001] LOG:  could not bind IPv4 address "127.0.0.1": Address already in use
2026-12-03 19:30:01.101 UTC [20001] HINT:  Is another postmaster already running on port 54330? If not, wait a few seconds and retry.
2026-12-03 19:30:01.101 UTC [20001] WARNING:  could not create listen socket for "127.0.0.1"
2026-12-03 19:30:01.101 UTC [20001] FATAL:  could not create any TCP/IP sockets
2026-12-03 19:30:01.102 UTC [20001] LOG:  database system is shut down
`

// A start that failed because the old postmaster was still there.
const lockFileLog = `2026-12-03 19:31:00.000 UTC [20100] FATAL:  lock file "postmaster.pid" already exists
2026-12-03 19:31:00.000 UTC [20100] HINT:  Is another postmaster (PID 19999) running in data directory "/d"?
`

func TestServerSaidQuotesThePanicAndTheEnd(t *testing.T) {
	quote, panicked := serverSaid(fullDiskStopLog, 4)
	want := []string{
		`19:08:19.473 [13802] PANIC:  could not write to file "pg_wal/xlogtemp.13802": No space left on device | STATEMENT:  commit`,
		`19:08:23.522 [14285] FATAL:  could not write to file "pg_wal/xlogtemp.14285": No space left on device`,
		`… (7 more)`,
		`19:08:23.587 [13575] LOG:  startup process (PID 14285) exited with exit code 1`,
		`19:08:23.587 [13575] LOG:  terminating any other active server processes`,
		`19:08:23.633 [13575] LOG:  shutting down due to startup process failure`,
		`19:08:23.649 [13575] LOG:  database system is shut down`,
	}
	if !slices.Equal(quote, want) {
		t.Errorf("quote:\n%s\nwant:\n%s", strings.Join(quote, "\n"), strings.Join(want, "\n"))
	}
	if !panicked {
		t.Error("panicked = false, want true")
	}
}

func TestServerSaidQuotesAFailedStart(t *testing.T) {
	quote, panicked := serverSaid(portTakenLog, 8)
	want := []string{
		`19:30:01.100 [20001] LOG:  starting PostgreSQL 15.18 (Debian 15.18-0+deb12u1) on x86_64-pc-linux-gnu, compiled by gcc (Debian 12.2.0-14+deb12u1) 12.2.0, 64-bit`,
		`19:30:01.101 [20001] LOG:  could not bind IPv4 address "127.0.0.1": Address already in use | HINT:  Is another postmaster already running on port 54330? If not, wait a few seconds and retry.`,
		`19:30:01.101 [20001] WARNING:  could not create listen socket for "127.0.0.1"`,
		`19:30:01.101 [20001] FATAL:  could not create any TCP/IP sockets`,
		`19:30:01.102 [20001] LOG:  database system is shut down`,
	}
	if !slices.Equal(quote, want) || panicked {
		t.Errorf("quote (panicked %v):\n%s\nwant:\n%s", panicked, strings.Join(quote, "\n"), strings.Join(want, "\n"))
	}
}

func TestServerSaidOnlyNoise(t *testing.T) {
	log := `2026-12-03 19:06:32.359 UTC [10834] LOG:  checkpoint complete: wrote 2816 buffers (8.6%); 1 WAL file(s) added, 13 removed, 0 recycled
2026-12-03 19:06:33.000 UTC [10900] FATAL:  the database system is starting up
`
	quote, panicked := serverSaid(log, 4)
	if want := []string{"(nothing but client and checkpoint messages)"}; !slices.Equal(quote, want) || panicked {
		t.Errorf("quote %q (panicked %v), want %q", quote, panicked, want)
	}
	if quote, _ := serverSaid("", 4); len(quote) != 1 {
		t.Errorf("empty log: quote %q", quote)
	}
}

func TestParsePGLogContinuations(t *testing.T) {
	// A message over several lines, the DETAIL of another process (not attached), a zone
	// given as an offset.
	log := "2026-12-03 19:00:00.000 +03 [7] ERROR:  syntax error at or near \"x\"\n" +
		"2026-12-03 19:00:00.000 +03 [7] STATEMENT:  SELECT\n\tx y\n" +
		"2026-12-03 19:00:00.001 +03 [8] DETAIL:  orphan\n"
	got := parsePGLog(log)
	if len(got) != 2 {
		t.Fatalf("entries %d, want 2: %+v", len(got), got)
	}
	if s := got[0].String(); s != `19:00:00.000 [7] ERROR:  syntax error at or near "x" | STATEMENT:  SELECT | x y` {
		t.Errorf("first: %s", s)
	}
	if got[1].sev != "DETAIL" || got[1].pid != "8" {
		t.Errorf("second: %+v", got[1])
	}
}

func TestPgCtlWord(t *testing.T) {
	out := "pg.sh: port 54330 is taken by another program: users:((\"postgres\",pid=12,fd=6))\n" +
		"pg_ctl: PID file \"/d/postmaster.pid\" does not exist\nIs server running?\n" +
		"pg_ctl: could not start server\nExamine the log output.\n2026-12-03 ... FATAL: x\n"
	err := errors.New("exit status 1")
	want := `exit status 1: pg.sh: port 54330 is taken by another program: users:(("postgres",pid=12,fd=6)); pg_ctl: could not start server`
	if got := pgCtlWord(err, out); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := pgCtlWord(err, "signal: killed"); got != "exit status 1" {
		t.Errorf("without pg_ctl's line: %q", got)
	}
}

// A run whose PostgreSQL did not come back: the report quotes the server log for the stop
// and for the failed start, and the invariant fails with the start's reason.
func TestFullDiskReportQuotesTheServer(t *testing.T) {
	at := time.Date(2026, 12, 3, 19, 8, 14, 0, time.UTC)
	said, panicked := serverSaid(fullDiskStopLog, 4)
	quote, _ := serverSaid(portTakenLog, 8)
	// The same failure later: other times, other process ids.
	again, _ := serverSaid(strings.NewReplacer("19:30:01", "19:30:04", "[20001]", "[20007]").Replace(portTakenLog), 8)
	lock, _ := serverSaid(lockFileLog, 8)
	word := "exit status 1: pg_ctl: could not start server"
	fd := &fullDisk{dir: "/tmp/wal", hold: 20 * time.Second, filler: 106 << 20, topUp: 3 << 20,
		fillTook: 300 * time.Millisecond, downAt: at.Add(5 * time.Second), downErr: "connection refused",
		restarted: true, restartIn: time.Second, freedAt: at.Add(20 * time.Second),
		said: said, panicked: panicked, window: [2]time.Time{at, at.Add(110 * time.Second)},
		failed: []startFailure{{at: at.Add(21 * time.Second), err: word, quote: quote},
			{at: at.Add(23 * time.Second), err: word, quote: again}, {at: at.Add(25 * time.Second), err: word, quote: again},
			{at: at.Add(27 * time.Second), err: word, quote: lock}}}
	r := &report{}
	fd.report(r, t.TempDir())
	for _, w := range []string{
		"filler topped up by 3072 KiB during the hold",
		"PostgreSQL NOT back 1m30s after the filler was removed",
		"the server log from the fill to the first start:\n    19:08:19.473 [13802] PANIC:  could not write to file",
		"start at 19:08:35.000 failed (exit status 1: pg_ctl: could not start server); the server log since the attempt:\n",
		"    19:30:01.101 [20001] FATAL:  could not create any TCP/IP sockets\n    19:30:01.102 [20001] LOG:  database system is shut down\n" +
			"  2 more starts failed the same way, the last at 19:08:39.000\n" +
			"  start at 19:08:41.000 failed (exit status 1: pg_ctl: could not start server); the server log since the attempt:\n" +
			"    19:31:00.000 [20100] FATAL:  lock file \"postmaster.pid\" already exists | HINT:  Is another postmaster (PID 19999) running in data directory \"/d\"?\n",
		"4 start(s) failed",
	} {
		if !strings.Contains(r.extra, w) {
			t.Errorf("report lacks %q:\n%s", w, r.extra)
		}
	}
	var v string
	for _, x := range r.violations {
		if strings.HasPrefix(x, invBack+": ") {
			v = x
		}
	}
	if !strings.Contains(v, "4 start(s) failed, the last (exit status 1: pg_ctl: could not start server) with the server log saying: ") ||
		!strings.Contains(v, `FATAL:  lock file "postmaster.pid" already exists`) {
		t.Errorf("violation of %q: %q", invBack, v)
	}
}

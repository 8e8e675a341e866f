package venturi_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// pager pauses until it has run Runs times. Each run checks what History and
// EarlierHistory show it against what the earlier runs wrote.
type pager struct {
	Runs int `json:"runs"`
}

func (pager) Kind() string { return "pager" }

type pagerSeen struct {
	Recent   int   // len(History())
	FirstSeq int64 // History()[0].Seq
	LastSeq  int64 // History()[len-1].Seq
	All      int   // entries reachable through EarlierHistory plus History
	Ordered  bool  // Seq 1..All, runs in order
}

func (p pager) Handle(ctx context.Context, run *venturi.Run[struct{}], seen chan<- pagerSeen) (venturi.Outcome, error) {
	if run.RunCount() < p.Runs {
		return venturi.PauseInWith(0, fmt.Sprintf("page %d", run.RunCount())), nil
	}
	h := run.History()
	s := pagerSeen{Recent: len(h), Ordered: true}
	if len(h) > 0 {
		s.FirstSeq, s.LastSeq = h[0].Seq, h[len(h)-1].Seq
	}
	all := h
	for len(all) > 0 {
		older, err := run.EarlierHistory(ctx, all[0].Seq, 7) // a small page: many round trips
		if err != nil {
			return venturi.Outcome{}, err
		}
		if len(older) == 0 {
			break
		}
		all = append(older, all...)
	}
	s.All = len(all)
	for i, e := range all {
		if e.Seq != int64(i+1) || e.Run != i+1 || e.Event != venturi.EventPaused {
			s.Ordered = false
		}
	}
	seen <- s
	return venturi.Completed(), nil
}

// TestJournalStaysInBoundAcrossRuns: a job that pauses 100 times keeps at most
// JournalRecent entries in its row; the rest move to venturi_journal; the handler's
// History holds the recent ones and EarlierHistory pages back through all of them, in
// order; Queue.Journal does the same from outside; retention deletes the moved entries
// with the job.
func TestJournalStaysInBoundAcrossRuns(t *testing.T) {
	slow(t)
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	seen := make(chan pagerSeen, 1)
	startWorkerFor[pager](t, pool, (chan<- pagerSeen)(seen), fastConfig())
	const runs = 100
	r := enqueue(t, q, pager{Runs: runs})
	s := recv(t, seen, "the last run")
	// 99 earlier entries: moves happened at 33, 50, 67, 84 entries, leaving 16 + 15.
	if s.All != runs-1 || !s.Ordered || s.Recent > venturi.JournalRecent || s.Recent < venturi.JournalRecentAfterMove || s.LastSeq != runs-1 {
		t.Fatalf("the last run saw %+v; want all %d earlier entries in order, at most %d recent", s, runs-1, venturi.JournalRecent)
	}
	j := waitFinished(t, q, r.ID)
	if j.JournalLen != runs || len(j.Journal) > venturi.JournalRecent || j.Journal[len(j.Journal)-1].Seq != runs || j.JournalDropped != nil {
		t.Fatalf("Job: JournalLen %d, %d recent entries (last Seq %d), dropped %+v", j.JournalLen, len(j.Journal), j.Journal[len(j.Journal)-1].Seq, j.JournalDropped)
	}
	// The finished job's row in the history: the pending row's at most JournalRecent
	// entries, and the final one.
	if n := rowJournalLen(t, pool, r.ID); n > venturi.JournalRecent+1 {
		t.Fatalf("the row keeps %d entries, want at most %d", n, venturi.JournalRecent+1)
	}
	page, err := q.Journal(ctx, r.ID, 0, 10)
	if err != nil || len(page) != 10 || page[0].Seq != runs-9 || page[9].Seq != runs || page[9].Event != venturi.EventCompleted {
		t.Fatalf("Journal(0, 10) = %d entries %v, %v", len(page), seqs(page), err)
	}
	page, err = q.Journal(ctx, r.ID, 6, 10)
	if err != nil || len(page) != 5 || page[0].Seq != 1 || page[0].Note != "page 1" {
		t.Fatalf("Journal(6, 10) = %v, %v", seqs(page), err)
	}
	if moved := countRows(t, pool, "venturi_journal"); moved == 0 {
		t.Fatal("nothing moved to venturi_journal")
	}
	if res, err := q.DeleteJobs(ctx, venturi.JobFilter{IDs: []ulid.ULID{r.ID}}, venturi.BulkOptions{}); err != nil || res.Changed != 1 {
		t.Fatalf("DeleteJobs: %+v, %v", res, err)
	}
	if moved := countRows(t, pool, "venturi_journal"); moved != 0 {
		t.Fatalf("%d moved entries outlive their job", moved)
	}
}

// TestJournalBoundHoldsForAMergeBurst: 100,000 merged entries into one pending job (each
// appended by its own statement, as MergeInto appends them) leave a row of at most
// JournalRecent entries and JournalMovedKept moved ones, and a summary of the dropped
// rest, whose count adds up.
func TestJournalBoundHoldsForAMergeBurst(t *testing.T) {
	slow(t)
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	r := enqueue(t, q, noteTask{Msg: "target"})
	const merges = 100_000
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// One commit per merge; not waiting for each commit's flush keeps the test short.
	if _, err := conn.Exec(ctx, "SET synchronous_commit = off"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf(`DO $$
		BEGIN
			FOR i IN 1..%d LOOP
				UPDATE venturi_job SET journal = journal || jsonb_build_array(jsonb_build_object(
					'event', 'merged', 'merge', 'keep', 'note', 'merged enqueue ' || i, 'at', clock_timestamp()))
				WHERE id = '%s';
				COMMIT; -- each merge is its own transaction, as each enqueue is
			END LOOP;
		END $$`, merges, uuidString(r.ID))); err != nil {
		t.Fatal(err)
	}
	j := jobByID(t, q, r.ID)
	if j.JournalLen != merges || len(j.Journal) > venturi.JournalRecent || j.Journal[len(j.Journal)-1].Note != fmt.Sprintf("merged enqueue %d", merges) {
		t.Fatalf("JournalLen %d, %d recent entries", j.JournalLen, len(j.Journal))
	}
	moved := countRows(t, pool, "venturi_journal")
	if moved > venturi.JournalMovedKept {
		t.Fatalf("%d moved entries kept, want at most %d", moved, venturi.JournalMovedKept)
	}
	d := j.JournalDropped
	if d == nil || d.Entries != int64(merges-moved-len(j.Journal)) || d.Events[venturi.EventMerged] != d.Entries || d.FirstAt.IsZero() || d.LastAt.Before(d.FirstAt) {
		t.Fatalf("dropped summary %+v; want %d merged entries", d, merges-moved-len(j.Journal))
	}
	var rowBytes int
	if err := pool.QueryRow(ctx, "SELECT pg_column_size(j.*) FROM venturi_job_all j WHERE id = $1", r.ID[:]).Scan(&rowBytes); err != nil {
		t.Fatal(err)
	}
	if rowBytes > 8<<10 {
		t.Fatalf("the row is %d bytes after %d merges", rowBytes, merges)
	}
	// The oldest entry still kept is the first after the dropped ones.
	first, err := q.Journal(ctx, r.ID, d.Entries+2, 10)
	if err != nil || len(first) != 1 || first[0].Seq != d.Entries+1 {
		t.Fatalf("oldest kept entry: %v, %v", seqs(first), err)
	}
	// The job still runs, and its handler sees the recent entries.
	w := newWorker(t, pool, struct{}{}, fastConfig())
	venturi.MustRegister[noteTask](w)
	startWorker(t, w)
	waitFinished(t, q, r.ID)
}

// TestAttachmentBound: SetAttachment refuses an attachment over MaxAttachmentBytes and
// keeps the previous one.
func TestAttachmentBound(t *testing.T) {
	t.Parallel()
	var run venturi.Run[struct{}]
	if err := run.SetAttachment(map[string]string{"a": "b"}); err != nil {
		t.Fatal(err)
	}
	err := run.SetAttachment(strings.Repeat("x", venturi.MaxAttachmentBytes))
	if err == nil || !strings.Contains(err.Error(), "MaxAttachmentBytes") {
		t.Fatalf("oversized attachment: %v", err)
	}
}

// rowJournalLen is the number of entries in a job row's journal column.
func rowJournalLen(t *testing.T, pool *pgxpool.Pool, id ulid.ULID) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT jsonb_array_length(journal) FROM venturi_job_all WHERE id = $1", id[:]).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// countRows counts the rows of table.
func countRows(t *testing.T, pool *pgxpool.Pool, table string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// uuidString formats a ULID's bytes as PostgreSQL's uuid text.
func uuidString(id ulid.ULID) string {
	b := id[:]
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// seqs lists the entries' numbers, for failure messages.
func seqs(entries []venturi.JournalEntry) []int64 {
	out := make([]int64, len(entries))
	for i, e := range entries {
		out[i] = e.Seq
	}
	return out
}

// quietTask completes with no note and no attachment: its run's entry is derived.
type quietTask struct{ N int }

func (quietTask) Kind() string { return "quiet" }

func (quietTask) Handle(context.Context, *venturi.Run[struct{}], struct{}) (venturi.Outcome, error) {
	return venturi.Completed(), nil
}

// TestPlainCompletionEntryIsDerived: a run that completes its job with no note and no
// attachment stores no journal entry in the history row, only its token and duration;
// every read gets the entry back as the worker would have written it, and a bulk retry
// that moves the job back writes it into the journal it moves back.
func TestPlainCompletionEntryIsDerived(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	w := startWorkerFor[quietTask](t, pool, struct{}{}, fastConfig())
	r := enqueue(t, q, quietTask{N: 1})
	j := waitFinished(t, q, r.ID)

	var stored int
	var token *int64
	if err := pool.QueryRow(ctx, `SELECT jsonb_array_length(journal), derived_token FROM venturi_job_history WHERE id = $1`,
		r.ID[:]).Scan(&stored, &token); err != nil {
		t.Fatal(err)
	}
	if stored != 0 || token == nil {
		t.Fatalf("history row: %d stored entries, derived token %v; want none stored and the token kept", stored, token)
	}
	if len(j.Journal) != 1 || j.JournalLen != 1 {
		t.Fatalf("journal %+v (%d entries), want the derived one", j.Journal, j.JournalLen)
	}
	e := j.Journal[0]
	if e.Event != venturi.EventCompleted || e.Run != 1 || e.Token != *token || e.Worker != w.ID() || e.Note != "" ||
		!e.StartedAt.Equal(*j.AttemptedAt) || e.At.Before(e.StartedAt) || e.At.After(*j.FinishedAt) || e.Seq != 1 {
		t.Fatalf("derived entry %+v; job attempted %v, finished %v", e, j.AttemptedAt, j.FinishedAt)
	}
	if page, err := q.Journal(ctx, r.ID, 0, 10); err != nil || len(page) != 1 || page[0].Token != *token {
		t.Fatalf("Queue.Journal = %+v, %v", page, err)
	}

	if err := q.PauseQueue(ctx, venturi.DefaultQueue); err != nil { // the retried job stays as moved back
		t.Fatal(err)
	}
	if res, err := q.RetryJobs(ctx, mustFilter(t, "id:"+r.ID.String()), venturi.BulkOptions{Reason: "again"}); err != nil || res.Changed != 1 {
		t.Fatalf("RetryJobs = %+v, %v", res, err)
	}
	if n := rowJournalLen(t, pool, r.ID); n != 2 {
		t.Fatalf("the job moved back with %d stored entries, want 2 (completed, retried)", n)
	}
	back := jobByID(t, q, r.ID)
	if len(back.Journal) != 2 || back.Journal[0].Token != *token || !back.Journal[0].At.Equal(e.At) ||
		back.Journal[1].Event != venturi.EventRetried {
		t.Fatalf("journal after the retry: %+v", back.Journal)
	}
}

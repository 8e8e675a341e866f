package completer

import (
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/jobrun"
	"github.com/venturi-dev/venturi/internal/journalenc"
)

// Retention is how long a job that ended stays in venturi_job_history, by its state
// (cancelled jobs as completed ones); a negative one keeps nothing.
type Retention struct {
	Completed, Dead time.Duration
}

// Params builds one FinishRuns statement for the ends of runs, recording worker as the
// runs' worker and keeping the jobs that end for keep. Each journal entry is complete: the
// run's start is the claim's database time, and its end (the entry's At) that time plus
// the duration the worker measured from the claim's reply to the handler's return. A
// plain completion (see derived) sends no entry, only that duration: the database
// derives the entry from the job's row (venturi_completed_entry).
// The entries are written by hand into one buffer and sliced out of a single string, so
// a batch of hundreds of runs costs a handful of allocations instead of several per run.
// (One JSON parameter read with jsonb_to_recordset allocated even less, but cost the
// server a quarter more CPU per run than these arrays: bench/FINDINGS.md.)
func Params(worker string, keep Retention, ends []*jobrun.End) dbsqlc.FinishRunsParams {
	n := len(ends)
	p := dbsqlc.FinishRunsParams{
		Ids: make([]pgtype.UUID, n), Tokens: make([]int64, n), States: make([]string, n),
		DelaysUs: make([]int64, n), Failed: make([]bool, n), SetCarry: make([]bool, n),
		Carries: make([]string, n), Entries: make([]string, n), RanUs: make([]int64, n),
		RetainCompletedUs: dbsqlc.RetainUs(keep.Completed), RetainDeadUs: dbsqlc.RetainUs(keep.Dead),
	}
	var buf []byte
	stops := make([]int, n)
	for i, r := range ends {
		e := r.Entry
		e.Run, e.Token, e.Worker, e.StartedAt = r.Job.Runs, r.Job.Token, worker, r.Job.Started
		ran := r.Ended.Sub(r.Job.Received)
		if !r.Job.Started.IsZero() {
			e.At = r.Job.Started.Add(ran)
		}
		if derived(r, &e) {
			p.RanUs[i] = max(ran.Microseconds(), 0)
		} else {
			buf = append(buf, '[')
			buf = journalenc.Append(buf, &e)
			buf = append(buf, ']')
		}
		stops[i] = len(buf)
		p.Ids[i], p.Tokens[i], p.States[i] = uuidOf(r.Job.ID), r.Job.Token, string(r.State)
		p.DelaysUs[i], p.Failed[i], p.SetCarry[i] = delayOf(r.Delay), r.Failed, r.SetCarry
		p.Carries[i] = string(r.Carry)
	}
	all, start := string(buf), 0
	for i, end := range stops {
		p.Entries[i], start = all[start:end], end
	}
	return p
}

// derived reports whether r's entry e is a plain completion, which FinishRuns derives from
// the job's row: completed with its start known, nothing but the fields the row and the
// run's token and duration hold (no note, attachment, delay, merge or wait).
func derived(r *jobrun.End, e *journalenc.Entry) bool {
	return r.State == dbsqlc.VenturiJobStateCompleted && e.Event == string(dbsqlc.VenturiJobStateCompleted) && !e.StartedAt.IsZero() &&
		e.Note == "" && len(e.Attachment) == 0 && e.ResumeIn == 0 && e.Merge == "" && e.Due == "" &&
		e.DueBefore.IsZero() && e.DueAfter.IsZero() && len(e.Wait) == 0
}

// delayOf converts a duration into the microseconds the SQL layer takes.
func delayOf(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return d.Microseconds()
}

func uuidOf(id ulid.ULID) pgtype.UUID { return pgtype.UUID{Bytes: id, Valid: true} }

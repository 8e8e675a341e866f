package venturi

import (
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// finishParams builds one FinishRuns statement. Each journal entry is complete: the run's
// start is the claim's database time, and its end (JournalEntry.At) that time plus the
// duration the worker measured from the claim's reply to the handler's return.
// The entries are written by hand into one buffer and sliced out of a single string, so
// a batch of hundreds of runs costs a handful of allocations instead of several per run.
// (One JSON parameter read with jsonb_to_recordset allocated even less, but cost the
// server a quarter more CPU per run than these arrays: bench/FINDINGS.md.)
func finishParams(worker string, reqs []*finishReq) dbsqlc.FinishRunsParams {
	n := len(reqs)
	p := dbsqlc.FinishRunsParams{
		Ids: make([]pgtype.UUID, n), Tokens: make([]int64, n), States: make([]string, n),
		DelaysUs: make([]int64, n), Failed: make([]bool, n), SetCarry: make([]bool, n),
		Carries: make([]string, n), Entries: make([]string, n),
	}
	var buf []byte
	ends := make([]int, n)
	for i, r := range reqs {
		e := r.entry
		e.Run, e.Token, e.Worker, e.StartedAt = r.job.runs, r.job.token, worker, r.job.started
		if !r.job.started.IsZero() {
			e.At = r.job.started.Add(r.ended.Sub(r.job.received))
		}
		buf = append(buf, '[')
		buf = appendEntry(buf, &e)
		buf = append(buf, ']')
		ends[i] = len(buf)
		p.Ids[i], p.Tokens[i], p.States[i] = uuidOf(r.job.id), r.job.token, string(r.state)
		p.DelaysUs[i], p.Failed[i], p.SetCarry[i] = delayOf(r.delay), r.failed, r.setCarry
		p.Carries[i] = string(r.carry)
	}
	all, start := string(buf), 0
	for i, end := range ends {
		p.Entries[i], start = all[start:end], end
	}
	return p
}

package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi"
)

// Chunks, checked from the database: each call of the chunked kind's handler recorded,
// before it gave its items their outcomes, what it gave each one (chaos_chunk_item) and
// whether it panicked; each item is a job of its own, with its own journal entry for each
// run. Its limit (a kind concurrency) is one of the gates (flowcheck.go).

const invChunk = "I9 chunks: items end as given; a panic fails unset ones"

// chunkItemRow is a chaos_chunk_item row: one item of one call.
type chunkItemRow struct {
	call  string
	job   [16]byte
	run   int
	token int64
	size  int
	set   string
	panic bool
}

// chunkStats is what the report shows of the chunks.
type chunkStats struct {
	jobs, calls, items, maxSize int
	panics                      int // calls that panicked
	panicFailed                 int // unset items failed by their call's panic
	unsetDone                   int // unset items completed by their call's nil
}

func loadChunkItems(ctx context.Context, pool *pgxpool.Pool) ([]chunkItemRow, error) {
	rows, err := pool.Query(ctx, `SELECT call, job_id, run, token, size, set, panic FROM chaos_chunk_item`)
	if err != nil {
		return nil, err
	}
	var out []chunkItemRow
	for rows.Next() {
		var id pgtype.UUID
		var x chunkItemRow
		if err := rows.Scan(&x.call, &id, &x.run, &x.token, &x.size, &x.set, &x.panic); err != nil {
			return nil, err
		}
		x.job = id.Bytes
		out = append(out, x)
	}
	return out, rows.Err()
}

// checkChunks checks invChunk on the run's records.
func (r *report) checkChunks(d *runRecords) {
	var jobs []*jobRow
	for id, e := range d.expects {
		if e.scenario == scChunk && d.jobs[id] != nil {
			jobs = append(jobs, d.jobs[id])
		}
	}
	st, bad := chunkViolations(d.chunks, jobs, d.effects, d.lossy != nil)
	r.chunk = st
	for _, v := range bad {
		r.fail(invChunk, "%s", v)
	}
}

// chunkViolations holds the chunk jobs' runs to their calls' records: every run that ended
// as a handler's result (not cut by a fault) was an item of exactly one recorded call, and
// ended as that call gave it: ok completed (with its effect), fail dead, transient failed,
// unset completed (with no effect) when the call returned nil and failed with the panic
// when it panicked. A recorded item's run ended (lossy: an asynchronous failover may have
// lost that run's claim, so this is not checked). No call held more items than the
// kind's limit.
func chunkViolations(items []chunkItemRow, jobs []*jobRow, effects map[[16]byte][]effectRow, lossy bool) (chunkStats, []string) {
	var st chunkStats
	var bad []string
	type key struct {
		job   [16]byte
		run   int
		token int64
	}
	byRun := map[key]chunkItemRow{}
	calls := map[string]chunkItemRow{}
	for _, x := range items {
		k := key{x.job, x.run, x.token}
		if prev, ok := byRun[k]; ok {
			bad = append(bad, fmt.Sprintf("job %s run %d is an item of two calls (%s, %s)", ulidStr(x.job), x.run, prev.call, x.call))
		}
		byRun[k] = x
		st.items++
		if _, ok := calls[x.call]; !ok {
			calls[x.call] = x
			st.calls++
			st.maxSize = max(st.maxSize, x.size)
			if x.panic {
				st.panics++
			}
			if x.size > chunkSize || x.size > chunkConcurrency {
				bad = append(bad, fmt.Sprintf("call %s held %d items (Size %d, the kind's concurrency %d)", x.call, x.size, chunkSize, chunkConcurrency))
			}
		}
	}
	ended := map[key]bool{}
	for _, j := range jobs {
		st.jobs++
		for _, en := range j.journal {
			if !endEvents[en.Event] || en.Run == 0 {
				continue
			}
			k := key{j.id, en.Run, en.Token}
			ended[k] = true
			x, ok := byRun[k]
			scripted := en.Event == venturi.EventCompleted ||
				en.Event == venturi.EventDead && en.Note == permanentNote ||
				en.Event == venturi.EventFailed && (en.Note == transientNote || strings.HasPrefix(en.Note, chunkPanicNote))
			switch {
			case !ok && scripted:
				bad = append(bad, fmt.Sprintf("job %s run %d ended %s (%q) but no call recorded it", ulidStr(j.id), en.Run, en.Event, trunc(en.Note, 60)))
				continue
			case !ok || !scripted:
				continue // cut by a fault: the disturbed runs' check explains it
			}
			var want venturi.Event
			wantNote := ""
			switch {
			case x.set == chunkOK:
				want = venturi.EventCompleted
			case x.set == chunkFail:
				want, wantNote = venturi.EventDead, permanentNote
			case x.set == chunkTransient:
				want, wantNote = venturi.EventFailed, transientNote
			case x.set == chunkUnset && x.panic:
				want, wantNote = venturi.EventFailed, chunkPanicNote
				if en.Event == want {
					st.panicFailed++
				}
			default:
				want = venturi.EventCompleted
				if en.Event == want {
					st.unsetDone++
				}
			}
			if en.Event != want || !strings.HasPrefix(en.Note, wantNote) {
				bad = append(bad, fmt.Sprintf("job %s run %d, given %q by call %s (panic %v), ended %s (%q)",
					ulidStr(j.id), en.Run, x.set, x.call, x.panic, en.Event, trunc(en.Note, 60)))
			}
			if en.Event == venturi.EventCompleted {
				effs := 0
				for _, ef := range effects[j.id] {
					effs += b2i(ef.outcome == "completed" && ef.token == en.Token)
				}
				if wantEffs := b2i(x.set == chunkOK); effs != wantEffs {
					bad = append(bad, fmt.Sprintf("job %s run %d (given %q) completed with %d completion effects, want %d", ulidStr(j.id), en.Run, x.set, effs, wantEffs))
				}
			}
		}
	}
	if !lossy {
		for _, x := range items {
			if !ended[key{x.job, x.run, x.token}] {
				bad = append(bad, fmt.Sprintf("job %s run %d (token %d), an item of call %s, has no end in its journal", ulidStr(x.job), x.run, x.token, x.call))
			}
		}
	}
	return st, bad
}

// printChunks writes the chunks' line of the summary.
func (r *report) printChunks(w io.Writer) {
	c := r.chunk
	if c.jobs == 0 {
		return
	}
	fmt.Fprintf(w, "  chunks: %d jobs, %d calls of %d items (at most %d in one); %d calls panicked, failing %d unset items; %d unset items completed by their call's nil\n",
		c.jobs, c.calls, c.items, c.maxSize, c.panics, c.panicFailed, c.unsetDone)
}

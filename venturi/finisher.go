package venturi

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// finisher writes the ends of runs in batches: whatever has queued up while the previous
// batch was in flight goes in the next FinishRuns statement, so a busy worker writes
// many results per round trip and an idle one adds no delay. A result counts as reported
// once its batch has committed.
type finisher struct {
	in      chan *finishReq
	closing chan struct{}
	loops   sync.WaitGroup
	write   func(ctx context.Context, reqs []*finishReq) ([]pgtype.UUID, error)
	untrack func(j *claimed)
	expired func(j *claimed) bool
	poke    func()
	log     *slog.Logger
}

const maxFinishBatch = 1000

func newFinisher[S any](w *Worker[S]) *finisher {
	return &finisher{
		in:      make(chan *finishReq, max(maxFinishBatch, 4*w.cfg.Concurrency)),
		closing: make(chan struct{}),
		write: func(ctx context.Context, reqs []*finishReq) ([]pgtype.UUID, error) {
			return w.q.FinishRuns(ctx, w.ctl, finishParams(w.cfg.ID, reqs))
		},
		untrack: w.untrack,
		expired: func(j *claimed) bool {
			w.mu.Lock()
			defer w.mu.Unlock()
			a := w.active[j.id]
			return a == nil || a.job != j || time.Now().After(a.deadline)
		},
		poke: w.poke,
		log:  w.log,
	}
}

func (f *finisher) submit(r *finishReq) {
	select {
	case f.in <- r:
	case <-f.closing:
		// Shutdown already released this run; its result is discarded by the fence.
		f.untrack(r.job)
	}
}

// close flushes what was submitted and stops the loop.
func (f *finisher) close() {
	close(f.closing)
	f.loops.Wait()
}

func (f *finisher) start(ctx context.Context) {
	f.loops.Add(1)
	go func() {
		defer f.loops.Done()
		f.run(ctx)
	}()
}

// run writes results one FinishRuns at a time: while a statement is in flight, results
// queue in f.in, and the next statement takes all of them. An idle worker writes each
// result at once; a busy one writes hundreds per statement. One statement in flight
// measured best: parallel FinishRuns statements on neighbouring rows contend for the same
// heap and index pages, and cost more server CPU per row than their overlap saves
// (bench/FINDINGS.md).
func (f *finisher) run(ctx context.Context) {
	for {
		select {
		case r := <-f.in:
			f.flush(ctx, f.drain([]*finishReq{r}))
		case <-f.closing:
			for batch := f.drain(nil); len(batch) > 0; batch = f.drain(nil) {
				f.flush(ctx, batch)
			}
			return
		}
	}
}

func (f *finisher) drain(batch []*finishReq) []*finishReq {
	for len(batch) < maxFinishBatch {
		select {
		case r := <-f.in:
			batch = append(batch, r)
		default:
			return batch
		}
	}
	return batch
}

// flush writes one batch, retrying transient errors until the runs' leases would have
// expired; after that the rescuer owns them, and the fence rejects a late write anyway.
func (f *finisher) flush(ctx context.Context, batch []*finishReq) {
	slices.SortFunc(batch, func(a, b *finishReq) int { return a.job.id.Compare(b.job.id) }) // lock order
	delay := 20 * time.Millisecond
	for {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		ids, err := f.write(wctx, batch)
		cancel()
		if err == nil {
			ok := make(map[ulid.ULID]bool, len(ids))
			for _, u := range ids {
				ok[ulid.ULID(u.Bytes)] = true
			}
			again := false
			for _, r := range batch {
				again = again || r.state == dbsqlc.VenturiJobStateAvailable
				if !ok[r.job.id] {
					f.log.Warn("venturi: run result discarded: the run no longer holds its job (lease lost)",
						"job", r.job.id, "kind", r.job.kind, "token", r.job.token)
				}
				f.untrack(r.job)
			}
			if again {
				f.poke() // a pause or retry with no delay is due now: look for it at once
			}
			return
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code != "40P01" && pgErr.Code != "40001" {
			// The server refused the statement itself, not the connection: find the row
			// that poisons the batch so that the others still land.
			if len(batch) > 1 {
				for _, r := range batch {
					f.flush(ctx, []*finishReq{r})
				}
				return
			}
			if r := batch[0]; !r.degraded {
				f.log.Error("venturi: run result refused by the database; storing it without carry and attachment",
					"job", r.job.id, "kind", r.job.kind, "err", err)
				r.entry.Attachment = nil
				r.entry.Note = cleanNote("result could not be stored (" + err.Error() + "): " + r.entry.Note)
				r.setCarry, r.carry, r.degraded = false, nil, true
				continue
			}
		}
		live := batch[:0]
		for _, r := range batch {
			if f.expired(r.job) {
				f.log.Warn("venturi: gave up writing a run result; the lease expired and the job will be rescued",
					"job", r.job.id, "kind", r.job.kind, "err", err)
				f.untrack(r.job)
				continue
			}
			live = append(live, r)
		}
		if len(live) == 0 {
			return
		}
		batch = live
		f.log.Warn("venturi: writing run results failed; retrying", "err", err, "runs", len(batch))
		time.Sleep(delay)
		delay = min(delay*2, time.Second)
	}
}

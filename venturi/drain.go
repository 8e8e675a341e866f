package venturi

import (
	"context"
	"errors"
	"fmt"

	"github.com/venturi-dev/venturi/internal/fetcher"
	"github.com/venturi-dev/venturi/internal/jobrun"
	"github.com/venturi-dev/venturi/internal/testhook"
)

func init() {
	testhook.Drain = func(ctx context.Context, worker any, kinds []string, maxRuns int) ([]testhook.Drained, error) {
		d, ok := worker.(drainer)
		if !ok {
			return nil, fmt.Errorf("venturi: Drain needs a *venturi.Worker, got %T", worker)
		}
		return d.drain(ctx, kinds, maxRuns)
	}
}

type drainer interface {
	drain(ctx context.Context, kinds []string, maxRuns int) ([]testhook.Drained, error)
}

// drain claims and runs available jobs of kinds one at a time in the caller's goroutine,
// through the same claim, executor and FinishRuns as a started worker, until none is
// available (venturitest.Drain). Leases are not extended: handlers under test are short.
func (w *Worker[S]) drain(ctx context.Context, kinds []string, maxRuns int) ([]testhook.Drained, error) {
	w.mu.Lock()
	started := w.started
	w.mu.Unlock()
	if started {
		return nil, errors.New("venturi: Drain on a started worker (it would compete with its own fetcher)")
	}
	if len(kinds) == 0 {
		kinds = w.kinds
	}
	for _, k := range kinds {
		if w.reg[k] == nil {
			return nil, fmt.Errorf("venturi: Drain of kind %q, which the worker did not register", k)
		}
	}
	if err := ensureHistory(ctx, w.cfg, w.log, w.pool, w.q); err != nil {
		return nil, err
	}
	tracker := newTracker(w.cfg, w.log)
	writer := newWriter(w.cfg, w.channel, w.pool, w.q, w.log)
	exec := &runner{cfg: w.cfg, q: w.q, reg: w.reg, tracker: tracker, shutdown: make(chan struct{}), channel: w.channel}
	exec.useDB(w.pool)
	var fetchers []*fetcher.Fetcher
	for _, wq := range w.cfg.Queues {
		f := newFetcher(w.cfg.forQueue(wq), w.pool, kinds, nil, tracker, ctx, w.channel, w.log)
		fetchers = append(fetchers, f)
	}
	var out []testhook.Drained
	for {
		// One job at a time, from the first queue that has one. A claim may return a
		// gated and a plain job: the second goes back.
		var (
			jobs []*jobrun.Job
			f    *fetcher.Fetcher
		)
		for _, f = range fetchers {
			r := f.Claim(1, false)
			if r.Err != nil {
				return out, r.Err
			}
			if jobs = r.Jobs; len(jobs) > 0 {
				break
			}
		}
		if len(jobs) == 0 {
			return out, nil
		}
		if len(out) >= maxRuns {
			f.Release(jobs)
			return out, fmt.Errorf("venturi: Drain stopped after %d runs with jobs still available", maxRuns)
		}
		j := jobs[0]
		f.Release(jobs[1:])
		rctx, cancel := context.WithCancelCause(ctx)
		tracker.Begin(j, cancel)
		req := w.reg[j.Kind].run(rctx, exec, j)
		cancel(nil)
		tracker.Remove(j)
		if !req.Finalized && !req.Lost {
			if _, err := writer.Write(ctx, []*jobrun.End{req}, true); err != nil {
				return out, err
			}
		}
		row, err := getJob(ctx, w.q, w.pool, j.ID)
		if err != nil {
			return out, err
		}
		d := testhook.Drained{ID: j.ID, Kind: j.Kind, State: string(row.State)}
		if job, err := jobFromRow(row); err == nil && len(job.Journal) > 0 {
			d.Entry = job.Journal[len(job.Journal)-1]
		}
		out = append(out, d)
	}
}

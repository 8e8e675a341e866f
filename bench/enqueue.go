package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/venturi-dev/venturi"
)

// producers is what the enqueue scenarios drive: one library's client on its own pool
// (graphile-worker's: none, its SQL API on the pool, whose search_path is its schema).
type producers struct {
	lib   string
	pool  *pgxpool.Pool
	q     *venturi.Queue
	river *river.Client[pgx.Tx]
}

// producerPoolConns sizes the producers' pools alike for both libraries, so 8 producers
// never wait for a connection.
const producerPoolConns = 16

func (b *bencher) openProducers(ctx context.Context, lib string) (*producers, error) {
	p := &producers{lib: lib}
	var err error
	switch lib {
	case libVenturi, libVenturiSQL:
		if p.pool, err = poolFor(ctx, b.o.url, venturiSchema, producerPoolConns); err != nil {
			return nil, err
		}
		p.q = venturi.NewQueue(p.pool, venturi.QueueConfig{})
	case libGraphile:
		if p.pool, err = poolFor(ctx, b.o.url, graphileSchema, producerPoolConns); err != nil {
			return nil, err
		}
	default:
		if p.pool, err = poolFor(ctx, b.o.url, riverSchema, producerPoolConns); err != nil {
			return nil, err
		}
		if p.river, err = newRiverInsertClient(p.pool); err != nil {
			p.pool.Close()
			return nil, err
		}
	}
	// Open the connections before the clock starts.
	var wg sync.WaitGroup
	for range producerPoolConns {
		wg.Add(1)
		go func() { defer wg.Done(); _ = p.pool.Ping(ctx) }()
	}
	wg.Wait()
	return p, nil
}

func (p *producers) close() { p.pool.Close() }

// drive runs n producers that call fn until d has elapsed; it returns the number of calls,
// each call's latency and the elapsed time.
func drive(ctx context.Context, n int, d time.Duration, fn func(ctx context.Context, i int) error) (int, []time.Duration, time.Duration, error) {
	var (
		next    atomic.Int64
		mu      sync.Mutex
		all     []time.Duration
		firstEr error
		wg      sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(d)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lats := make([]time.Duration, 0, 4096)
			for time.Now().Before(deadline) && ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				t := time.Now()
				if err := fn(ctx, i); err != nil {
					mu.Lock()
					if firstEr == nil {
						firstEr = err
					}
					mu.Unlock()
					return
				}
				lats = append(lats, time.Since(t))
			}
			mu.Lock()
			all = append(all, lats...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return len(all), all, time.Since(start), firstEr
}

func pct(lats []time.Duration, p float64) float64 {
	if len(lats) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), lats...)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p)
	return float64(s[i]) / 1e6
}

// scenario 1: one job per transaction; venturi's also from SQL (venturi_enqueue, the
// rows "… from SQL", measured against the same River runs).
func (b *bencher) scenarioEnqueue(ctx context.Context) error {
	for _, n := range []int{1, 8} {
		name := fmt.Sprintf("1. enqueue, 1 job/tx, %d producer(s)", n)
		err := b.driveProducers(ctx, name, "jobs/s", n, 1.3, []string{libVenturi, libVenturiSQL, libRiver}, func(p *producers, _ string) (func(context.Context, int) error, func() string) {
			return func(ctx context.Context, i int) error {
				switch p.lib {
				case libVenturi:
					_, err := p.q.Enqueue(ctx, NoopTask{N: i})
					return err
				case libVenturiSQL:
					_, err := p.pool.Exec(ctx, `SELECT venturi_enqueue($1, jsonb_build_object('n', $2::int))`, kindNoop, i)
					return err
				}
				_, err := p.river.Insert(ctx, NoopArgs{N: i}, nil)
				return err
			}, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// dedupKey makes half the enqueues collide: calls 2k and 2k+1 share a key, and the first
// of the pair is still pending when the second arrives (no worker runs).
func dedupKey(run string, i int) string { return fmt.Sprintf("%s-%d", run, i/2) }

func (p *producers) dedupEnqueue(ctx context.Context, key string) (collided bool, err error) {
	if p.lib == libVenturi {
		r, err := p.q.Enqueue(ctx, DedupTask{Key: key})
		return err == nil && r.Action != venturi.ActionInserted, err
	}
	r, err := p.river.Insert(ctx, DedupArgs{Key: key}, nil)
	return err == nil && r.UniqueSkippedAsDuplicate, err
}

// scenario 2: dedup enqueue, half colliding.
func (b *bencher) scenarioDedup(ctx context.Context) error {
	for _, n := range []int{1, 8} {
		name := fmt.Sprintf("2. dedup enqueue, half colliding, %d producer(s)", n)
		err := b.driveProducers(ctx, name, "enqueues/s", n, 1.0, []string{libVenturi, libRiver}, func(p *producers, run string) (func(context.Context, int) error, func() string) {
			var collided, calls atomic.Int64
			call := func(ctx context.Context, i int) error {
				c, err := p.dedupEnqueue(ctx, dedupKey(run, i))
				calls.Add(1)
				if c {
					collided.Add(1)
				}
				return err
			}
			return call, func() string { return fmt.Sprintf(", %d of %d collided", collided.Load(), calls.Load()) }
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// driveProducers measures one single-job call from n producers, venturi and River
// alternated rep by rep, each run on an empty table: throughput (unit; the target is
// venturi at least atLeast times River) and p50/p99 call latency. prepare returns the call
// for a run (named by run, unique per rep and library) and, optionally, a note for its
// log line. libs are venturi and River, and libVenturiSQL when prepare's call knows it
// (scenario 1): venturi's SQL API then runs too, into rows of its own ("… from SQL",
// venturi's column, against the same River runs, with no target).
func (b *bencher) driveProducers(ctx context.Context, name, unit string, n int, atLeast float64, libs []string,
	prepare func(p *producers, run string) (call func(context.Context, int) error, note func() string)) error {
	withSQL := slices.Contains(libs, libVenturiSQL)
	fromSQL := func(metric string) string { return metric + " from SQL (venturi_enqueue)" }
	for rep := range b.o.reps {
		for _, lib := range b.order(rep, libs...) {
			if err := resetJobs(ctx, b.admin); err != nil {
				return err
			}
			p, err := b.openProducers(ctx, lib)
			if err != nil {
				return err
			}
			call, note := prepare(p, fmt.Sprintf("r%d%s", rep, lib))
			count, lats, el, err := drive(ctx, n, b.o.sz.enqueueDur, call)
			p.close()
			if err != nil {
				return fmt.Errorf("%s: %w", lib, err)
			}
			per := float64(count) / el.Seconds()
			extra := ""
			if note != nil {
				extra = note()
			}
			logf("  %s %s rep %d: %.0f %s p50 %.2fms p99 %.2fms%s", name, lib, rep, per, unit, pct(lats, .5), pct(lats, .99), extra)
			if withSQL && lib != libVenturi {
				col := map[string]string{libVenturiSQL: libVenturi, libRiver: libRiver}[lib]
				for _, m := range []struct {
					metric string
					higher bool
					v      float64
				}{{unit, true, per}, {"p50 latency (ms)", false, pct(lats, .5)}, {"p99 latency (ms)", false, pct(lats, .99)}} {
					x := b.rep.add(name, fromSQL(m.metric), m.higher, col, m.v)
					x.ratioOf, x.ratioTo = libVenturi, []string{libRiver}
				}
				if lib == libVenturiSQL {
					continue
				}
			}
			x := b.rep.add(name, unit, true, lib, per)
			x.ratioOf, x.ratioTo, x.target, x.check = libVenturi, []string{libRiver}, fmt.Sprintf("≥ %.1f×", atLeast), ratioAtLeast(atLeast)
			y := b.rep.add(name, "p50 latency (ms)", false, lib, pct(lats, .5))
			y.ratioOf, y.ratioTo = libVenturi, []string{libRiver}
			z := b.rep.add(name, "p99 latency (ms)", false, lib, pct(lats, .99))
			z.ratioOf, z.ratioTo = libVenturi, []string{libRiver}
		}
	}
	return nil
}

// enqueueBatch enqueues n no-op jobs numbered from first in one call.
func (p *producers) enqueueBatch(ctx context.Context, first, n int) error {
	return p.enqueueBatchOf(ctx, first, n, noopTask, noopArgs)
}

// noopTask and noopArgs make the i-th no-op job of venturi and River.
func noopTask(i int) venturi.Task  { return NoopTask{N: i} }
func noopArgs(i int) river.JobArgs { return NoopArgs{N: i} }

// enqueueBatchOf enqueues jobs first … first+n-1 in one batch call, made by task (venturi)
// or args (River).
func (p *producers) enqueueBatchOf(ctx context.Context, first, n int, task func(int) venturi.Task, args func(int) river.JobArgs) error {
	if p.lib == libVenturi {
		tasks := make([]venturi.Task, n)
		for i := range tasks {
			tasks[i] = task(first + i)
		}
		_, err := p.q.EnqueueMany(ctx, tasks)
		return err
	}
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i] = river.InsertManyParams{Args: args(first + i)}
	}
	_, err := p.river.InsertMany(ctx, params)
	return err
}

// scenario 3: batches of 1,000.
func (b *bencher) scenarioBatch(ctx context.Context) error {
	const batch = 1000
	name := "3. batch enqueue, 1,000 jobs/call"
	for rep := range b.o.reps {
		for _, lib := range b.order(rep, libVenturi, libRiver) {
			if err := resetJobs(ctx, b.admin); err != nil {
				return err
			}
			p, err := b.openProducers(ctx, lib)
			if err != nil {
				return err
			}
			if err := p.enqueueBatch(ctx, 0, batch); err != nil { // warm-up, not timed
				p.close()
				return err
			}
			var lats []time.Duration
			start := time.Now()
			for c := range b.o.sz.batchCalls {
				t := time.Now()
				if err := p.enqueueBatch(ctx, (c+1)*batch, batch); err != nil {
					p.close()
					return fmt.Errorf("%s: %w", lib, err)
				}
				lats = append(lats, time.Since(t))
			}
			el := time.Since(start)
			p.close()
			jps := float64(b.o.sz.batchCalls*batch) / el.Seconds()
			logf("  %s %s rep %d: %.0f jobs/s, p50 call %.1fms", name, lib, rep, jps, pct(lats, .5))
			x := b.rep.add(name, "jobs/s", true, lib, jps)
			x.ratioOf, x.ratioTo, x.target, x.check = libVenturi, []string{libRiver}, "≥ 1.0×", ratioAtLeast(1.0)
			y := b.rep.add(name, "p50 call latency (ms)", false, lib, pct(lats, .5))
			y.ratioOf, y.ratioTo = libVenturi, []string{libRiver}
		}
	}
	return nil
}

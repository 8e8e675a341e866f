package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// loadBacklog bulk-inserts n available venturi jobs of kind with plain SQL (bench code,
// not venturi's enqueue path), in chunks so that one statement stays moderate. The rows
// look like jobs enqueued one after another: ULID-shaped IDs (millisecond time prefix,
// then a counter) and increasing due times, so heap order follows claim order as it does
// for real enqueues. Random UUIDs would scatter the oldest jobs over every heap page.
func loadBacklog(ctx context.Context, admin *pgxpool.Pool, kind string, n int) error {
	return loadBacklogIn(ctx, admin, kind, "default", n)
}

// loadBacklogIn is loadBacklog into the named queue.
func loadBacklogIn(ctx context.Context, admin *pgxpool.Pool, kind, queue string, n int) error {
	const chunk = 250_000
	for done := 0; done < n; done += chunk {
		k := min(chunk, n-done)
		_, err := admin.Exec(ctx, `INSERT INTO `+venturiSchema+`.venturi_job (id, kind, queue, state, priority, payload, run_at)
			SELECT (lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
			        || lpad(to_hex($3::bigint + g), 20, '0'))::uuid,
			       $1, $4, 'available', 0, jsonb_build_object('n', g),
			       now() - interval '1 microsecond' * ($2::int - g)
			FROM generate_series(1, $2::int) g`, kind, k, done, queue)
		if err != nil {
			return err
		}
	}
	return nil
}

func (b *bencher) vacuumSettle(ctx context.Context) error {
	if _, err := b.admin.Exec(ctx, "VACUUM ANALYZE "+jobTable(libVenturi)); err != nil {
		return err
	}
	_, err := b.admin.Exec(ctx, "CHECKPOINT")
	return err
}

// scenario 6: venturi's dedup-enqueue latency and claim throughput with a small and a
// large pending backlog. The backlog is of a kind no worker handles (and, for claim
// throughput, also of the worked kind itself). The two sizes alternate repetition by
// repetition, each on a freshly loaded backlog, so that the machine's load drifting over a
// minute does not land on one size only (run back to back, the same code measured the
// large backlog anywhere from 0.7 to 1.6 times slower than the small one).
func (b *bencher) scenarioBacklog(ctx context.Context) error {
	sizes := b.o.sz.backlogs
	for rep := range b.o.reps {
		order := []int{sizes[0], sizes[1]}
		if rep%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, size := range order {
			if err := b.backlogOtherKind(ctx, size, rep, "other"); err != nil {
				return err
			}
			if err := b.backlogOtherKind(ctx, size, rep, "default"); err != nil {
				return err
			}
			if !b.o.sameKind {
				continue
			}
			if err := b.backlogSameKind(ctx, size, rep); err != nil {
				return err
			}
		}
	}
	b.rep.notes = append(b.rep.notes, "Backlog (6): the pending backlog is bulk-loaded with INSERT … SELECT generate_series (ULID-shaped, time-ordered IDs and increasing due times, like jobs enqueued one after another), then VACUUM ANALYZE and CHECKPOINT, afresh for every repetition; the two backlog sizes alternate repetition by repetition. Claim throughput is measured like scenario 4, with a worker process and database polling.")
	return nil
}

// backlogOtherKind measures dedup-enqueue latency (6a) and claim throughput (6b) beside a
// backlog of size jobs of a kind no worker handles, in queue: "other", as a fleet of other
// workers would have it (6a and 6b, with targets), or the workers' own queue "default"
// (6b', for information: the claim steps over every one of those jobs).
func (b *bencher) backlogOtherKind(ctx context.Context, size, rep int, queue string) error {
	m := b.o.sz.backlogJobs
	dedupName := "6a. dedup enqueue, 1 producer, backlog of another kind in another queue"
	claimName := fmt.Sprintf("6b. claim throughput, %d jobs, backlog of another kind in another queue", m)
	target := true
	if queue == "default" {
		dedupName, target = "", false
		claimName = fmt.Sprintf("6b'. claim throughput, %d jobs, backlog of another kind in the same queue", m)
	}
	col := fmt.Sprintf("%d", size)
	logf("  backlog %d of another kind in queue %s, rep %d", size, queue, rep)
	if err := b.freshBacklogIn(ctx, kindBacklog, queue, size); err != nil {
		return err
	}
	if dedupName != "" {
		if err := b.backlogDedup(ctx, dedupName, col, size, rep); err != nil {
			return err
		}
	}
	if err := b.enqueueBulk(ctx, libVenturi, m); err != nil {
		return err
	}
	if _, err := b.admin.Exec(ctx, "ANALYZE "+jobTable(libVenturi)+"; CHECKPOINT"); err != nil {
		return err
	}
	el, _, err := b.workUntil(ctx, libVenturi, "", b.allDone(libVenturi, kindNoop, m))
	if err != nil {
		return err
	}
	logf("  %s backlog %d rep %d: %.0f jobs/s", claimName, size, rep, float64(m)/el.Seconds())
	b.backlogRow(claimName, "jobs/s", true, col, float64(m)/el.Seconds(), target)
	return nil
}

// backlogDedup measures dedup-enqueue latency beside the loaded backlog (6a).
func (b *bencher) backlogDedup(ctx context.Context, dedupName, col string, size, rep int) error {
	p, err := b.openProducers(ctx, libVenturi)
	if err != nil {
		return err
	}
	run := fmt.Sprintf("b%d-%d", size, rep)
	count, lats, el, err := drive(ctx, 1, b.o.sz.enqueueDur, func(ctx context.Context, i int) error {
		_, err := p.dedupEnqueue(ctx, dedupKey(run, i))
		return err
	})
	p.close()
	if err != nil {
		return err
	}
	logf("  %s backlog %d rep %d: %.0f enq/s p50 %.2fms p99 %.2fms", dedupName, size, rep, float64(count)/el.Seconds(), pct(lats, .5), pct(lats, .99))
	b.backlogRow(dedupName, "p50 latency (ms)", false, col, pct(lats, .5), true)
	b.backlogRow(dedupName, "p99 latency (ms)", false, col, pct(lats, .99), false)
	b.backlogRow(dedupName, "enqueues/s", true, col, float64(count)/el.Seconds(), false)
	return nil
}

// backlogSameKind measures how fast a worker claims the first jobs of a backlog of size
// jobs of its own kind (6c).
func (b *bencher) backlogSameKind(ctx context.Context, size, rep int) error {
	sameM := min(b.o.sz.backlogs[0]/2, b.o.sz.backlogJobs)
	sameName := fmt.Sprintf("6c. claim throughput, first %d jobs of a same-kind backlog", sameM)
	logf("  backlog %d of the worked kind, rep %d", size, rep)
	if err := b.freshBacklog(ctx, kindNoop, size); err != nil {
		return err
	}
	el, _, err := b.workUntil(ctx, libVenturi, "", func(ctx context.Context) (bool, time.Duration, error) {
		n, err := completedCount(ctx, b.admin, libVenturi, kindNoop)
		return n >= int64(sameM), 5 * time.Millisecond, err
	})
	if err != nil {
		return err
	}
	logf("  %s backlog %d rep %d: %.0f jobs/s", sameName, size, rep, float64(sameM)/el.Seconds())
	b.backlogRow(sameName, "jobs/s", true, fmt.Sprintf("%d", size), float64(sameM)/el.Seconds(), true)
	return nil
}

// freshBacklog empties the job table and loads a settled backlog of n jobs of kind.
func (b *bencher) freshBacklog(ctx context.Context, kind string, n int) error {
	return b.freshBacklogIn(ctx, kind, "default", n)
}

// freshBacklogIn is freshBacklog into the named queue.
func (b *bencher) freshBacklogIn(ctx context.Context, kind, queue string, n int) error {
	if err := resetJobs(ctx, b.admin); err != nil {
		return err
	}
	if err := loadBacklogIn(ctx, b.admin, kind, queue, n); err != nil {
		return err
	}
	return b.vacuumSettle(ctx)
}

// backlogRow records one value; the ratio is large backlog over small, and the target is
// "within 1.25×": latency no more than 1.25× higher, throughput no more than 1.25× lower.
func (b *bencher) backlogRow(scenario, metric string, higher bool, col string, v float64, target bool) {
	x := b.rep.addBacklog(scenario, metric, higher, col, v)
	x.ratioOf = fmt.Sprintf("%d", b.o.sz.backlogs[1])
	x.ratioTo = []string{fmt.Sprintf("%d", b.o.sz.backlogs[0])}
	if !target {
		return
	}
	if higher {
		x.target, x.check = "≥ 0.80× (within 1.25×)", ratioAtLeast(0.8)
	} else {
		x.target, x.check = "≤ 1.25×", ratioAtMost(1.25)
	}
}

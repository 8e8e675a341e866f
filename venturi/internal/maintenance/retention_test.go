package maintenance_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/venturi-dev/venturi/internal/maintenance"
	"github.com/venturi-dev/venturi/internal/testdb"
)

// insertFinished inserts a job of kind in state that finished ago.
func insertFinished(t *testing.T, b *testBundle, kind, state string, ago time.Duration) {
	t.Helper()
	b.exec(t, `INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, finished_at)
		VALUES (gen_random_uuid(), $1, 'default', $2::venturi_job_state, '{}', now(), now() - $3 * interval '1 microsecond')`,
		kind, state, ago.Microseconds())
}

// count returns the rows of table (a trusted name) that match where.
func count(t *testing.T, b *testBundle, table, where string) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+table+` WHERE `+where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// newPruner returns a pruner of the bundle's schema with partitions of span in both lanes,
// keeping completed and cancelled jobs for completed and dead ones for dead.
func newPruner(b *testBundle, batch int, completed, dead, span time.Duration) *maintenance.Pruner {
	return maintenance.NewPruner(maintenance.PrunerConfig{Batch: batch, RetainCompleted: completed, RetainDead: dead,
		CompletedPartition: span, DeadPartition: span, LockTimeout: time.Second, Logger: b.log}, b.q)
}

// table returns where the job named by its kind is: venturi_job, venturi_job_history, or
// "" when in neither.
func table(t *testing.T, b *testBundle, kind string) string {
	t.Helper()
	switch {
	case count(t, b, "venturi_job", "kind = '"+kind+"'") > 0:
		return "venturi_job"
	case count(t, b, "venturi_job_history", "kind = '"+kind+"'") > 0:
		return "venturi_job_history"
	}
	return ""
}

// TestPruner runs the retention steps against ended jobs, history partitions and events
// set up in the schema.
func TestPruner(t *testing.T) {
	t.Parallel()

	t.Run("EndedJobsMoveToTheHistoryWithTheirPruneTime", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insertFinished(t, b, "old_completed", "completed", 2*time.Hour) // past RetainCompleted
		insertFinished(t, b, "new_completed", "completed", time.Minute)
		insertFinished(t, b, "new_cancelled", "cancelled", time.Minute)
		insertFinished(t, b, "old_dead", "dead", 2*time.Hour) // dead are kept longer
		b.exec(t, `INSERT INTO venturi_job (id, kind, queue, state, payload, run_at)
			VALUES (gen_random_uuid(), 'pending', 'default', 'available', '{}', now())`)
		p := newPruner(b, 10, time.Hour, 3*time.Hour, time.Hour)
		moved := 0
		b.inTx(t, func(tx pgx.Tx) error {
			for _, s := range p.Steps() {
				n, err := s.Do(context.Background(), tx)
				if err != nil {
					return fmt.Errorf("%s: %w", s.Name, err)
				}
				if s.Name == "sweep_ended" {
					moved = n
				}
			}
			return nil
		})
		if moved != 4 {
			t.Errorf("%d jobs left venturi_job, want 4", moved)
		}
		for kind, want := range map[string]string{"old_completed": "", "new_completed": "venturi_job_history",
			"new_cancelled": "venturi_job_history", "old_dead": "venturi_job_history", "pending": "venturi_job"} {
			if got := table(t, b, kind); got != want {
				t.Errorf("%s is in %q, want %q", kind, got, want)
			}
		}
		// Prune time: when it finished plus its state's retention.
		if n := count(t, b, "venturi_job_history", `kind = 'new_completed' AND prune_at = finished_at + interval '1 hour'`); n != 1 {
			t.Errorf("new_completed's prune time is not its end plus an hour")
		}
		if n := count(t, b, "venturi_job_history", `kind = 'old_dead' AND prune_at = finished_at + interval '3 hours'`); n != 1 {
			t.Errorf("old_dead's prune time is not its end plus three hours")
		}
		// Each lane: its state, its partitions reaching its retention plus two spans.
		if n := count(t, b, "venturi_job_history_completed", `kind IN ('new_completed', 'new_cancelled')`); n != 2 {
			t.Errorf("%d of the completed and cancelled jobs in their lane, want 2", n)
		}
		if n := count(t, b, "venturi_job_history_dead", `kind = 'old_dead'`); n != 1 {
			t.Errorf("the dead job is not in its lane")
		}
		for lane, ahead := range map[int]string{1: "3 hours", 2: "5 hours"} {
			if n := count(t, b, "venturi_history_partition", fmt.Sprintf(`lane = %d AND hi >= now() + interval '%s'`, lane, ahead)); n == 0 {
				t.Errorf("no partition of lane %d reaches %s ahead", lane, ahead)
			}
			if n := count(t, b, "venturi_history_partition", fmt.Sprintf(`lane = %d AND hi > now() + interval '%s' + interval '1 hour'`, lane, ahead)); n != 0 {
				t.Errorf("lane %d reaches more than a span beyond %s ahead", lane, ahead)
			}
		}
	})

	t.Run("EachLaneHasPartitionsOfItsOwnWidth", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insertFinished(t, b, "completed", "completed", 0)
		insertFinished(t, b, "dead", "dead", 0)
		// A short retention beside a long one: completed jobs are not kept a dead span.
		p := maintenance.NewPruner(maintenance.PrunerConfig{Batch: 10, RetainCompleted: 30 * time.Second,
			RetainDead: 7 * 24 * time.Hour, CompletedPartition: time.Minute, DeadPartition: 24 * time.Hour,
			LockTimeout: time.Second, Logger: b.log}, b.q)
		b.inTx(t, func(tx pgx.Tx) error {
			if _, err := p.Extend(context.Background(), tx); err != nil {
				return err
			}
			_, err := p.SweepEnded(context.Background(), tx)
			return err
		})
		for lane, width := range map[int]string{1: "1 minute", 2: "1 day"} {
			if n := count(t, b, "venturi_history_partition", fmt.Sprintf(`lane = %d AND hi - lo <> interval '%s'`, lane, width)); n != 0 {
				t.Errorf("lane %d has %d partitions not %s wide", lane, n, width)
			}
		}
		// The completed job's partition ends within a minute and a half of now.
		if n := count(t, b, "venturi_job_history_completed h JOIN venturi_history_partition p ON p.lane = 1",
			`h.prune_at >= p.lo AND h.prune_at < p.hi AND p.hi <= now() + interval '90 seconds'`); n != 1 {
			t.Errorf("the completed job is not in a partition that ends within 90 s")
		}
		if n := count(t, b, "venturi_history_partition", `lane = 1`); n > 4 {
			t.Errorf("%d completed partitions for a 30 s retention, want at most 4", n)
		}
		if n := count(t, b, "venturi_history_partition", `lane = 2`); n > 10 {
			t.Errorf("%d dead partitions for a week's retention a day wide, want at most 10", n)
		}
	})

	t.Run("ADiscardedStateIsDeletedNotMoved", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insertFinished(t, b, "completed", "completed", time.Minute)
		insertFinished(t, b, "dead", "dead", time.Minute)
		p := newPruner(b, 10, -1, time.Hour, time.Hour)
		b.inTx(t, func(tx pgx.Tx) error {
			if _, err := p.Extend(context.Background(), tx); err != nil {
				return err
			}
			_, err := p.SweepEnded(context.Background(), tx)
			return err
		})
		if got := table(t, b, "completed"); got != "" {
			t.Errorf("a discarded completed job is in %s", got)
		}
		if got := table(t, b, "dead"); got != "venturi_job_history" {
			t.Errorf("the dead job is in %q, want the history", got)
		}
		if n := count(t, b, "venturi_history_partition", "lane = 1"); n != 0 {
			t.Errorf("%d partitions for the lane that keeps nothing, want 0", n)
		}
	})

	t.Run("APartitionPastIsDroppedWithItsJobs", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insertFinished(t, b, "soon", "completed", 0)
		// Partitions of a second, jobs kept for one: the job's partition is past within
		// two seconds.
		p := newPruner(b, 10, time.Second, time.Second, time.Second)
		b.inTx(t, func(tx pgx.Tx) error {
			if _, err := p.Extend(context.Background(), tx); err != nil {
				return err
			}
			_, err := p.SweepEnded(context.Background(), tx)
			return err
		})
		if got := table(t, b, "soon"); got != "venturi_job_history" {
			t.Fatalf("the job is in %q, want the history", got)
		}
		partitions := count(t, b, "venturi_history_partition", "true")
		dropped := 0
		testdb.Eventually(t, "the job's partition to be dropped", func() bool {
			b.inTx(t, func(tx pgx.Tx) error {
				n, err := p.DropDue(context.Background(), tx)
				dropped += n
				return err
			})
			return table(t, b, "soon") == ""
		})
		if dropped == 0 || count(t, b, "venturi_history_partition", "true") != partitions-dropped {
			t.Errorf("dropped %d partitions, %d left of %d", dropped, count(t, b, "venturi_history_partition", "true"), partitions)
		}
	})

	t.Run("ALockTimeoutLeavesTheRestOfTheRound", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insertFinished(t, b, "ended", "completed", time.Minute)
		p := maintenance.NewPruner(maintenance.PrunerConfig{Batch: 10, RetainCompleted: time.Hour, RetainDead: time.Hour,
			CompletedPartition: time.Hour, DeadPartition: time.Hour, LockTimeout: 50 * time.Millisecond, Logger: b.log}, b.q)
		ctx := context.Background()
		holder, err := b.pool.Begin(ctx) // another transaction holds the history table
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Rollback(ctx)
		if _, err := holder.Exec(ctx, `LOCK TABLE venturi_job_history IN ACCESS EXCLUSIVE MODE`); err != nil {
			t.Fatal(err)
		}
		b.inTx(t, func(tx pgx.Tx) error {
			for _, step := range []func(context.Context, pgx.Tx) (int, error){p.Extend, p.DropDue} {
				if n, err := step(ctx, tx); err != nil || n != 0 {
					t.Errorf("step under a held lock: %d, %v; want 0 and no error", n, err)
				}
			}
			// The transaction goes on: the timed-out step was undone alone.
			var one int
			return tx.QueryRow(ctx, `SELECT 1`).Scan(&one)
		})
		if n := count(t, b, "venturi_history_partition", "true"); n != 0 {
			t.Errorf("%d partitions made under a held lock, want 0", n)
		}
		if err := holder.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		b.inTx(t, func(tx pgx.Tx) error {
			_, err := p.Extend(ctx, tx)
			return err
		})
		if count(t, b, "venturi_history_partition", "true") == 0 {
			t.Error("no partition made once the lock was released")
		}
	})

	t.Run("EventsOlderThanTheLongerRetentionAreDeleted", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.exec(t, `INSERT INTO venturi_event (at, job_id, kind, queue, event, state) VALUES
			(now() - interval '4 hours', gen_random_uuid(), 'old', 'default', 'completed', 'completed'),
			(now() - interval '2 hours', gen_random_uuid(), 'kept', 'default', 'completed', 'completed')`)
		p := newPruner(b, 10, time.Hour, 3*time.Hour, time.Hour)
		var n int
		b.inTx(t, func(tx pgx.Tx) (err error) { n, err = p.PruneEvents(context.Background(), tx); return err })
		if n != 1 || count(t, b, "venturi_event", "kind = 'old'") != 0 || count(t, b, "venturi_event", "kind = 'kept'") != 1 {
			t.Errorf("deleted %d events; want the one older than RetainDead deleted and the other kept", n)
		}
	})

	t.Run("ASweepIsAtMostBatchJobs", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, k := range []string{"a", "b", "c"} {
			insertFinished(t, b, k, "completed", time.Minute)
		}
		p := newPruner(b, 2, time.Hour, time.Hour, time.Hour)
		var first, second int
		b.inTx(t, func(tx pgx.Tx) (err error) {
			if _, err := p.Extend(context.Background(), tx); err != nil {
				return err
			}
			first, err = p.SweepEnded(context.Background(), tx)
			return err
		})
		b.inTx(t, func(tx pgx.Tx) (err error) {
			second, err = p.SweepEnded(context.Background(), tx)
			return err
		})
		if first != 2 || second != 1 {
			t.Errorf("passes moved %d then %d jobs, want 2 then 1", first, second)
		}
	})
}

// TestOrphanSweeper runs the sweep of what gone jobs left against rows set up in the
// schema: the journal entries, signals, hooks and steps of a job in neither table are
// deleted, those of a pending and of a finished job kept.
func TestOrphanSweeper(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `INSERT INTO venturi_job (id, kind, queue, state, payload, run_at)
		VALUES ('00000000-0000-0000-0000-00000000000a', 'pending', 'default', 'available', '{}', now())`)
	insertFinished(t, b, "finished", "completed", time.Minute)
	p := newPruner(b, 10, time.Hour, time.Hour, time.Hour)
	b.inTx(t, func(tx pgx.Tx) error {
		if _, err := p.Extend(context.Background(), tx); err != nil {
			return err
		}
		_, err := p.SweepEnded(context.Background(), tx)
		return err
	})
	var finished string
	if err := b.pool.QueryRow(context.Background(), `SELECT id::text FROM venturi_job_history WHERE kind = 'finished'`).Scan(&finished); err != nil {
		t.Fatal(err)
	}
	for _, job := range []string{"00000000-0000-0000-0000-00000000000a", finished, "00000000-0000-0000-0000-0000000000ff"} {
		b.exec(t, `INSERT INTO venturi_journal (job_id, seq, entry) VALUES ($1, 1, '{}')`, job)
		b.exec(t, `INSERT INTO venturi_signal (job_id, name, payload, delivery_id) VALUES ($1, 'go', 'null', 'd')`, job)
		b.exec(t, `INSERT INTO venturi_hook (token_hash, job_id, name, expires_at) VALUES (decode(md5($1::text), 'hex'), $1::uuid, 'h', now() + interval '1 hour')`, job)
		b.exec(t, `INSERT INTO venturi_step (job_id, name, run, token, result) VALUES ($1, 's', 1, 1, '{}')`, job)
	}
	o := maintenance.NewOrphanSweeper(maintenance.OrphanSweeperConfig{Batch: 2, Every: time.Hour, Logger: b.log}, b.q)
	if !o.Due() {
		t.Fatal("a new sweeper is not due")
	}
	for range 20 { // a pass: every table, two jobs a batch
		var n int
		b.inTx(t, func(tx pgx.Tx) (err error) { n, err = o.RunOnce(context.Background(), tx); return err })
		if n < 2 {
			break
		}
	}
	o.Swept(nil)
	if o.Due() {
		t.Error("a pass that reached the end is due again at once")
	}
	for _, tb := range []string{"venturi_journal", "venturi_signal", "venturi_hook", "venturi_step"} {
		if n := count(t, b, tb, "job_id = '00000000-0000-0000-0000-0000000000ff'"); n != 0 {
			t.Errorf("%s: %d rows of the gone job left", tb, n)
		}
		if n := count(t, b, tb, "true"); n != 2 {
			t.Errorf("%s: %d rows, want the pending and the finished job's", tb, n)
		}
	}
}

// TestGateSweeper runs the idle gates' sweep against gates set up in the schema.
func TestGateSweeper(t *testing.T) {
	t.Parallel()

	t.Run("IdleGatesAreDeletedAndUsedOnesKept", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.exec(t, `INSERT INTO venturi_gate (key, kind, updated_at) VALUES
			('g1', 'k', now() - interval '2 hours'), ('g2', 'k', now()), ('g3', 'k', now() - interval '2 hours')`)
		g := maintenance.NewGateSweeper(maintenance.GateSweeperConfig{Batch: 10, RetainIdleGates: time.Hour,
			Interval: time.Second, Logger: b.log}, b.q)
		if !g.Due() {
			t.Fatal("a new sweeper is not due")
		}
		var n int
		b.inTx(t, func(tx pgx.Tx) (err error) { n, err = g.RunOnce(context.Background(), tx); return err })
		if n != 3 {
			t.Errorf("read %d gates, want 3", n)
		}
		if got := count(t, b, "venturi_gate", "true"); got != 1 || count(t, b, "venturi_gate", "key = 'g2'") != 1 {
			t.Errorf("%d gates left, want only g2", got)
		}
		g.Swept(nil)
		if g.Due() {
			t.Error("a sweep that reached the end is due again at once")
		}
	})

	t.Run("ASweepGoesOnAfterTheLastKeyOfTheBatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.exec(t, `INSERT INTO venturi_gate (key, kind, updated_at) VALUES
			('g1', 'k', now() - interval '2 hours'), ('g2', 'k', now() - interval '2 hours'), ('g3', 'k', now() - interval '2 hours')`)
		g := maintenance.NewGateSweeper(maintenance.GateSweeperConfig{Batch: 2, RetainIdleGates: time.Hour,
			Interval: time.Second, Logger: b.log}, b.q)
		var first int
		b.inTx(t, func(tx pgx.Tx) (err error) { first, err = g.RunOnce(context.Background(), tx); return err })
		if first != 2 || count(t, b, "venturi_gate", "true") != 1 {
			t.Fatalf("first batch read %d gates and left %d, want 2 read and g3 left", first, count(t, b, "venturi_gate", "true"))
		}
		g.Swept(nil)
		if !g.Due() {
			t.Error("a sweep half-way through is not due")
		}
		// A gate before the sweep's position is not read again until the next sweep.
		b.exec(t, `INSERT INTO venturi_gate (key, kind, updated_at) VALUES ('g0', 'k', now() - interval '2 hours')`)
		var second int
		b.inTx(t, func(tx pgx.Tx) (err error) { second, err = g.RunOnce(context.Background(), tx); return err })
		if second != 1 || count(t, b, "venturi_gate", "key = 'g3'") != 0 || count(t, b, "venturi_gate", "key = 'g0'") != 1 {
			t.Errorf("second batch read %d gates; want g3 read and deleted, g0 left for the next sweep", second)
		}
	})
}

package maintenance_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/maintenance"
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

// TestPruner runs the retention steps against finished jobs and events set up in the schema.
func TestPruner(t *testing.T) {
	t.Parallel()

	t.Run("FinishedJobsPastTheirRetentionAreDeleted", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insertFinished(t, b, "old_completed", "completed", 2*time.Hour)
		insertFinished(t, b, "new_completed", "completed", time.Minute)
		insertFinished(t, b, "old_cancelled", "cancelled", 2*time.Hour)
		insertFinished(t, b, "old_dead", "dead", 2*time.Hour)   // dead are kept longer
		insertFinished(t, b, "older_dead", "dead", 4*time.Hour) // past RetainDead
		p := maintenance.NewPruner(maintenance.PrunerConfig{Batch: 10, RetainCompleted: time.Hour, RetainDead: 3 * time.Hour}, b.q)
		steps := p.Steps()
		deleted := 0
		b.inTx(t, func(tx pgx.Tx) error {
			for _, s := range steps {
				n, err := s.Do(context.Background(), tx)
				if err != nil {
					return err
				}
				deleted += n
			}
			return nil
		})
		if deleted != 3 {
			t.Errorf("deleted %d rows, want 3", deleted)
		}
		for kind, kept := range map[string]bool{"old_completed": false, "new_completed": true, "old_cancelled": false, "old_dead": true, "older_dead": false} {
			if got := b.jobState(t, kind) != ""; got != kept {
				t.Errorf("%s: kept %v, want %v", kind, got, kept)
			}
		}
	})

	t.Run("EventsOlderThanTheLongerRetentionAreDeleted", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.exec(t, `INSERT INTO venturi_event (at, job_id, kind, queue, event, state) VALUES
			(now() - interval '4 hours', gen_random_uuid(), 'old', 'default', 'completed', 'completed'),
			(now() - interval '2 hours', gen_random_uuid(), 'kept', 'default', 'completed', 'completed')`)
		p := maintenance.NewPruner(maintenance.PrunerConfig{Batch: 10, RetainCompleted: time.Hour, RetainDead: 3 * time.Hour}, b.q)
		var n int
		b.inTx(t, func(tx pgx.Tx) (err error) { n, err = p.PruneEvents(context.Background(), tx); return err })
		if n != 1 || count(t, b, "venturi_event", "kind = 'old'") != 0 || count(t, b, "venturi_event", "kind = 'kept'") != 1 {
			t.Errorf("deleted %d events; want the one older than RetainDead deleted and the other kept", n)
		}
	})

	t.Run("ABatchIsAtMostBatchJobs", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, k := range []string{"a", "b", "c"} {
			insertFinished(t, b, k, "completed", 2*time.Hour)
		}
		p := maintenance.NewPruner(maintenance.PrunerConfig{Batch: 2, RetainCompleted: time.Hour, RetainDead: time.Hour}, b.q)
		var first, second int
		b.inTx(t, func(tx pgx.Tx) (err error) {
			first, err = p.PruneJobs(context.Background(), tx, dbsqlc.VenturiJobStateCompleted, time.Hour)
			return err
		})
		b.inTx(t, func(tx pgx.Tx) (err error) {
			second, err = p.PruneJobs(context.Background(), tx, dbsqlc.VenturiJobStateCompleted, time.Hour)
			return err
		})
		if first != 2 || second != 1 {
			t.Errorf("passes deleted %d then %d jobs, want 2 then 1", first, second)
		}
	})
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

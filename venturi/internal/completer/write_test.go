package completer_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/completer"
	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/jobrun"
	"github.com/venturi-dev/venturi/internal/journalenc"
)

// where says which table holds job id: venturi_job, venturi_job_history or neither ("").
func (b *testBundle) where(t *testing.T, id ulid.ULID) string {
	t.Helper()
	var table string
	err := b.pool.QueryRow(context.Background(), `SELECT COALESCE(
		(SELECT 'venturi_job' FROM venturi_job WHERE id = $1),
		(SELECT 'venturi_job_history' FROM venturi_job_history WHERE id = $1), '')`,
		pgtype.UUID{Bytes: id, Valid: true}).Scan(&table)
	if err != nil {
		t.Fatal(err)
	}
	return table
}

// partitions creates the history's partitions for the next three hours.
func (b *testBundle) partitions(t *testing.T) {
	t.Helper()
	if _, err := b.pool.Exec(context.Background(), `SELECT venturi_history_extend('1 hour', now() + interval '3 hours', 1000)`); err != nil {
		t.Fatal(err)
	}
}

// write writes ends with a writer that keeps the jobs they end for keep.
func (b *testBundle) write(t *testing.T, keep completer.Retention, ends ...*jobrun.End) {
	t.Helper()
	w := completer.Writer{Worker: "w1", Keep: keep, Queries: dbsqlc.New(), Logger: slog.New(slog.NewTextHandler(b.logs, nil)),
		Send: func(ctx context.Context, channel string, queue func(*pgx.Batch)) error {
			batch := &pgx.Batch{}
			dbsqlc.QueueSetLocalFinish(batch, channel)
			queue(batch)
			return b.pool.SendBatch(ctx, batch).Close()
		},
		InTx: func(ctx context.Context, fn func(pgx.Tx) error) error { return pgx.BeginFunc(ctx, b.pool, fn) },
	}
	ids, err := w.Write(context.Background(), ends, false)
	if err != nil || len(ids) != len(ends) {
		t.Fatalf("Write: %d of %d written, %v", len(ids), len(ends), err)
	}
}

// TestWriterMovesEndedJobsToTheHistory: a run that ends its job moves the job from
// venturi_job into venturi_job_history, its final entry in its journal and its prune time
// its end plus the retention of its state; its awaiters are notified and its final event
// written, as venturi_job's triggers do for the rows that stay. A run that does not end its
// job updates its row. A retention that keeps nothing deletes the job; and while the
// history has no partition, the job ends in venturi_job (the retention duty's sweep moves
// it once there is one).
func TestWriterMovesEndedJobsToTheHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("EndedMovesRetriedStays", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.partitions(t)
		done, dead, again := b.claim(t, "done"), b.claim(t, "dead"), b.claim(t, "again")
		if _, err := b.pool.Exec(ctx, `UPDATE venturi_job SET events = true, await_channel = 'test_await' WHERE id = $1`,
			pgtype.UUID{Bytes: done.ID, Valid: true}); err != nil {
			t.Fatal(err)
		}
		listener, err := b.pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer listener.Release()
		if _, err := listener.Exec(ctx, `LISTEN test_await`); err != nil {
			t.Fatal(err)
		}
		b.write(t, completer.Retention{Completed: time.Hour, Dead: 3 * time.Hour},
			&jobrun.End{Job: done, State: dbsqlc.VenturiJobStateCompleted, Ended: time.Now(), Entry: journalenc.Entry{Event: "completed"}},
			&jobrun.End{Job: dead, State: dbsqlc.VenturiJobStateDead, Ended: time.Now(), Failed: true, Entry: journalenc.Entry{Event: "dead", Note: "boom"}},
			&jobrun.End{Job: again, State: dbsqlc.VenturiJobStateAvailable, Ended: time.Now(), Failed: true, Entry: journalenc.Entry{Event: "failed"}})
		for id, want := range map[ulid.ULID]string{done.ID: "venturi_job_history", dead.ID: "venturi_job_history", again.ID: "venturi_job"} {
			if got := b.where(t, id); got != want {
				t.Errorf("job %s is in %q, want %q", id, got, want)
			}
		}
		if r := b.row(t, dead.ID); r.state != "dead" || r.failures != 1 || r.last(t).Event != "dead" || r.last(t).Note != "boom" || r.last(t).Run != 1 {
			t.Errorf("the dead job: %+v", r)
		}
		var retained, deadRetained bool
		if err := b.pool.QueryRow(ctx, `SELECT
			bool_and(prune_at = finished_at + interval '1 hour') FILTER (WHERE state = 'completed'),
			bool_and(prune_at = finished_at + interval '3 hours') FILTER (WHERE state = 'dead')
			FROM venturi_job_history`).Scan(&retained, &deadRetained); err != nil || !retained || !deadRetained {
			t.Errorf("prune times: completed %v, dead %v (%v)", retained, deadRetained, err)
		}
		if r := b.row(t, again.ID); r.state != "available" || r.failures != 1 || r.token != nil {
			t.Errorf("the retried job: %+v", r)
		}
		wctx, cancel := context.WithTimeout(ctx, within)
		defer cancel()
		n, err := listener.Conn().WaitForNotification(wctx)
		want := "\x1fdone:" + (pgtype.UUID{Bytes: done.ID, Valid: true}).String()
		if err != nil || n.Payload != want {
			t.Fatalf("awaiter's notification: %+v, %v", n, err)
		}
		var events int
		if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM venturi_event WHERE job_id = $1 AND event = 'completed' AND state = 'completed'`,
			pgtype.UUID{Bytes: done.ID, Valid: true}).Scan(&events); err != nil || events != 1 {
			t.Fatalf("%d completed events of the job (%v), want 1", events, err)
		}
	})

	t.Run("NothingKeptDeletes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.partitions(t)
		done, dead := b.claim(t, "done"), b.claim(t, "dead")
		b.write(t, completer.Retention{Completed: -1, Dead: time.Hour},
			&jobrun.End{Job: done, State: dbsqlc.VenturiJobStateCompleted, Ended: time.Now(), Entry: journalenc.Entry{Event: "completed"}},
			&jobrun.End{Job: dead, State: dbsqlc.VenturiJobStateDead, Ended: time.Now(), Entry: journalenc.Entry{Event: "dead"}})
		if got := b.where(t, done.ID); got != "" {
			t.Errorf("the completed job is in %s, want deleted", got)
		}
		if got := b.where(t, dead.ID); got != "venturi_job_history" {
			t.Errorf("the dead job is in %q, want the history", got)
		}
	})

	t.Run("NoPartitionEndsInPlace", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		done := b.claim(t, "done")
		b.write(t, completer.Retention{Completed: time.Hour, Dead: time.Hour},
			&jobrun.End{Job: done, State: dbsqlc.VenturiJobStateCompleted, Ended: time.Now(), Entry: journalenc.Entry{Event: "completed"}})
		if got := b.where(t, done.ID); got != "venturi_job" {
			t.Fatalf("the job is in %q, want venturi_job", got)
		}
		if r := b.row(t, done.ID); r.state != "completed" || r.token != nil || r.last(t).Event != "completed" {
			t.Fatalf("the job: %+v", r)
		}
	})
}

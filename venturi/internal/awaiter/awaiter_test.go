package awaiter_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/internal/awaiter"
	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/notifier"
	"github.com/venturi-dev/venturi/internal/testdb"
)

// within bounds every wait: what the tests wait for comes in milliseconds (a notification)
// or at the next poll; the bound only keeps a broken awaiter from hanging the test.
const within = 30 * time.Second

// setup returns a migrated schema's pool and an awaiter config whose Ended is the
// awaiters' real poll statement on it.
func setup(t *testing.T) (*pgxpool.Pool, awaiter.Config) {
	t.Helper()
	pool := testdb.Pool(t, testdb.Schema(t), 4)
	if _, err := venturi.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	q := dbsqlc.New()
	return pool, awaiter.Config{
		Channel: "awaiter_" + ulid.Make().String(), Poll: 50 * time.Millisecond, Linger: 0,
		Ended: func(ctx context.Context, ids []pgtype.UUID) ([]pgtype.UUID, error) {
			return q.EndedJobs(ctx, pool, ids)
		},
		Logger: slog.New(slog.DiscardHandler),
	}
}

func woken(t *testing.T, wake <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-wake:
	case <-time.After(within):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// TestAwaiterWakesOnTheEndNotification: with the poll far off, the end notification of
// the awaited job wakes its waiter; another job's does not.
func TestAwaiterWakesOnTheEndNotification(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, cfg := setup(t)
	cc := pool.Config().ConnConfig
	cfg.Notifier = notifier.New(func(ctx context.Context) (*pgx.Conn, error) { return pgx.ConnectConfig(ctx, cc) },
		time.Minute, time.Minute, cfg.Logger)
	cfg.Poll = time.Hour
	a := awaiter.New(cfg)
	id, other := ulid.Make(), ulid.Make()
	wake, done, listening := a.Add(id)
	defer done()
	wakeOther, doneOther, _ := a.Add(other)
	defer doneOther()
	woken(t, listening, "the awaiter to listen")
	notify := func(id ulid.ULID) {
		if _, err := pool.Exec(ctx, "SELECT pg_notify($1, $2)", cfg.Channel, awaiter.DonePrefix+pgtype.UUID{Bytes: id, Valid: true}.String()); err != nil {
			t.Fatal(err)
		}
	}
	notify(id)
	woken(t, wake, "the notified job's waiter")
	select {
	case <-wakeOther:
		t.Fatal("a waiter of another job was woken")
	default:
	}
}

// TestAwaiterPollWakesWaitersOfEndedJobs: without notifications, the poll wakes the waiter
// of a job that is gone (EndedJobs reports it) and keeps the waiter of a pending one.
func TestAwaiterPollWakesWaitersOfEndedJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, cfg := setup(t)
	res, err := venturi.NewQueue(pool, venturi.QueueConfig{NoNotify: true}).Enqueue(ctx, pending{})
	if err != nil {
		t.Fatal(err)
	}
	a := awaiter.New(cfg)
	gone := ulid.Make()
	wakeGone, doneGone, _ := a.Add(gone)
	defer doneGone()
	wakePending, donePending, _ := a.Add(res.ID)
	defer donePending()
	woken(t, wakeGone, "the poll to wake the waiter of a job that is gone")
	// The poll that woke one waiter asked about both jobs: the pending one was not reported.
	select {
	case <-wakePending:
		t.Fatal("the waiter of a pending job was woken")
	default:
	}
}

// TestAwaiterStopsWhenNobodyWaitsAndStartsAgain: once its last waiter leaves (Linger 0),
// the awaiter stops at its next poll, and the next Add starts it again.
func TestAwaiterStopsWhenNobodyWaitsAndStartsAgain(t *testing.T) {
	t.Parallel()
	_, cfg := setup(t)
	a := awaiter.New(cfg)
	_, done, _ := a.Add(ulid.Make())
	if !a.Running() {
		t.Fatal("not running with a waiter")
	}
	done()
	tick, deadline := time.NewTicker(5*time.Millisecond), time.After(within)
	defer tick.Stop()
	for a.Running() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal("still running with nobody waiting")
		}
	}
	gone := ulid.Make()
	wake, done, _ := a.Add(gone)
	defer done()
	if !a.Running() {
		t.Fatal("Add did not start the awaiter again")
	}
	woken(t, wake, "the restarted awaiter's poll")
}

// pending is a task no worker runs here: its job stays available.
type pending struct{}

func (pending) Kind() string { return "awaiter.pending" }

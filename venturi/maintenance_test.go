package venturi_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// TestMaintenancePrunesFinishedJobs: a job that ends moves to the history with its prune
// time, when it ended plus the retention of its state as the ending worker had it; once
// that time is past, the history partition holding it is dropped. Pending jobs stay.
func TestMaintenancePrunesFinishedJobs(t *testing.T) {
	slow(t)
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	// Worker 1 keeps completed jobs an hour, dead ones a day.
	cfg := fastConfig()
	cfg.RetainCompleted, cfg.RetainDead = time.Hour, 24*time.Hour
	w1 := startWorkerFor[failTask](t, pool, &failApp{}, cfg)
	kept := enqueue(t, q, failTask{})
	keptDead := enqueue(t, q, failTask{FailRuns: 1, Permanent: true})
	waitState(t, q, kept, venturi.StateCompleted)
	waitState(t, q, keptDead, venturi.StateDead)
	stopWorker(t, w1)
	for r, retention := range map[venturi.Result]string{kept: "1 hour", keptDead: "1 day"} {
		if n := countRows(t, pool, fmt.Sprintf(`venturi_job_history WHERE id = '%s' AND prune_at = finished_at + interval '%s'`,
			uuidString(r.ID), retention)); n != 1 {
			t.Fatalf("job %s: not in the history with a prune time of its end plus %s", r.ID, retention)
		}
	}
	for _, r := range []venturi.Result{kept, keptDead} {
		if _, err := q.Job(ctx, r.ID); err != nil {
			t.Fatalf("job %s: %v", r.ID, err)
		}
	}
	// On a schema of its own (partitions are made ahead, as wide as the worker that made
	// them had them: a narrower span applies beyond them), worker 2 keeps both two seconds,
	// in partitions of a second.
	pool2, q2 := newQueue(t)
	pending := enqueue(t, q2, failTask{}, venturi.After(time.Hour))
	cfg.RetainCompleted, cfg.RetainDead, cfg.HistoryPartition = 2*time.Second, 2*time.Second, time.Second
	startWorkerFor[failTask](t, pool2, &failApp{}, cfg)
	done := enqueue(t, q2, failTask{})
	dead := enqueue(t, q2, failTask{FailRuns: 1, Permanent: true})
	waitPruned(t, q2, done, "the completed job")
	waitPruned(t, q2, dead, "the dead job")
	if j := jobByID(t, q2, pending.ID); j.State != venturi.StateScheduled {
		t.Fatalf("pending job %s", j.State)
	}
}

// waitPruned waits until maintenance has deleted the job.
func waitPruned(t *testing.T, q *venturi.Queue, r venturi.Result, what string) {
	t.Helper()
	eventually(t, within, what+" to be pruned", func() bool {
		_, err := q.Job(context.Background(), r.ID)
		return errors.Is(err, venturi.ErrNotFound)
	})
}

// TestNotifyWakesIdleWorker: with polling effectively off, enqueues still reach an idle
// worker through LISTEN/NOTIFY.
func TestNotifyWakesIdleWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	cfg := fastConfig()
	cfg.PollInterval = time.Hour
	w := newWorker(t, pool, struct{}{}, cfg)
	venturi.MustRegister[noteTask](w)
	venturi.MustRegister[keyedNoteTask](w)
	startWorker(t, w)
	for i := 0; i < 3; i++ {
		waitState(t, q, enqueue(t, q, noteTask{Msg: fmt.Sprint(i)}), venturi.StateCompleted)
		// Through the dedup fast path and through EnqueueTx as well.
		waitState(t, q, enqueue(t, q, keyedNoteTask{Key: fmt.Sprint("fast", i)}), venturi.StateCompleted)
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r, err := q.EnqueueTx(ctx, tx, keyedNoteTask{Key: fmt.Sprint("tx", i)})
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		waitState(t, q, r, venturi.StateCompleted)
	}
}

type keyedNoteTask struct {
	Key string `json:"key"`
}

func (keyedNoteTask) Kind() string                 { return "keyed-note" }
func (k keyedNoteTask) DedupKey() venturi.DedupKey { return venturi.DedupKey(k.Key) }
func (keyedNoteTask) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	return venturi.Completed(), nil
}

// TestPollOnlyMode: without NOTIFY on either side, polling finds the jobs.
func TestPollOnlyMode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	q := venturi.NewQueue(pool, venturi.QueueConfig{NoNotify: true})
	cfg := fastConfig()
	cfg.PollOnly = true
	startWorkerFor[noteTask](t, pool, struct{}{}, cfg)
	completeNotes(t, q, 5)
	var listeners int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND query ILIKE 'LISTEN %venturi_insert%' || current_schema() || '%'`).Scan(&listeners); err != nil {
		t.Fatal(err)
	}
	if listeners != 0 {
		t.Fatalf("%d LISTEN connections in poll-only mode", listeners)
	}
}

// abandon makes job id's first run one whose worker died: running, its lease expired a
// second ago; maxFailures, when positive, is the backstop its claim recorded.
func abandon(t *testing.T, pool *pgxpool.Pool, id ulid.ULID, maxFailures int) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `UPDATE venturi_job SET state = 'running', runs = 1, worker_id = 'gone',
		lease_token = nextval('venturi_lease_token_seq'), lease_expires_at = now() - interval '1 second',
		attempted_at = now() - interval '2 seconds', max_failures = CASE WHEN $2 > 0 THEN $2 ELSE max_failures END
		WHERE id = $1`, uuidString(id), maxFailures); err != nil {
		t.Fatal(err)
	}
}

// unclaimed is a kind no test worker registers: its jobs stay where the test puts them.
type unclaimed struct{ N int }

func (unclaimed) Kind() string { return "unclaimed" }

// TestRescueDoesNotWaitForAStatsSample: a stats sample that cannot finish (it waits for the
// stats state's row, which the test holds, as a sample of a large table or one cut off by
// the network would take seconds) holds up neither rescue nor promotion: a run whose lease
// expired is rescued, and a scheduled job promoted, while the sample still waits. Before,
// the sample held the maintenance lock in the maintainer's own loop, and rescue waited for
// it.
func TestRescueDoesNotWaitForAStatsSample(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	hold, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hold.Rollback(ctx) }()
	if _, err := hold.Exec(ctx, `SELECT FROM venturi_stats_state FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	cfg := fastConfig()
	cfg.Lease = time.Second
	cfg.StatsInterval = venturi.MinStatsInterval
	w := newWorker(t, pool, struct{}{}, cfg)
	venturi.MustRegister[shortRated](w)
	startWorker(t, w)
	sampleWaits := func() bool {
		var waiting bool
		err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE NOT l.granted AND a.query LIKE '%name: StatsBegin%')`).Scan(&waiting)
		return err == nil && waiting
	}
	eventually(t, within, "the stats sample to wait for the stats state", sampleWaits)

	// A run whose worker is gone (its lease expired), and a scheduled job that is due.
	abandoned := enqueue(t, q, unclaimed{N: 1})
	abandon(t, pool, abandoned.ID, 0)
	due := enqueue(t, q, unclaimed{N: 2}, venturi.After(50*time.Millisecond))
	waitJob(t, q, abandoned.ID, "the abandoned run to be rescued", func(j *venturi.Job) bool {
		return j.State == venturi.StateAvailable && len(j.Journal) == 1 && j.Journal[0].Event == venturi.EventAbandoned
	})
	waitState(t, q, due, venturi.StateAvailable)
	if !sampleWaits() {
		t.Fatal("the stats sample stopped waiting before the test let it go")
	}
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, within, "the stats sample to be taken", func() bool {
		var sampled bool
		err := pool.QueryRow(ctx, `SELECT sampled_at IS NOT NULL FROM venturi_stats_state`).Scan(&sampled)
		return err == nil && sampled
	})
}

// Gated kinds for TestRetentionPrunesIdleGates, one gate per host.
type (
	// shortRated's rate windows are empty a moment after its jobs start.
	shortRated struct{ Host string }
	// hourRated's windows keep their starts for an hour.
	hourRated struct{ Host string }
	// guarded opens its host's breaker for an hour at the first failure.
	guarded struct {
		Host string
		Fail bool
	}
)

func (shortRated) Kind() string        { return "short-rated" }
func (r shortRated) Partition() string { return r.Host }
func (shortRated) Limits() venturi.Limits {
	return venturi.Limits{Rate: venturi.Rate{N: 100, Per: 50 * time.Millisecond, PerPartition: true}}
}
func (shortRated) Handle(context.Context, *venturi.Run[struct{}], struct{}) (venturi.Outcome, error) {
	return venturi.Completed(), nil
}

func (hourRated) Kind() string        { return "hour-rated" }
func (r hourRated) Partition() string { return r.Host }
func (hourRated) Limits() venturi.Limits {
	return venturi.Limits{Rate: venturi.Rate{N: 100, Per: time.Hour, PerPartition: true}}
}
func (hourRated) Handle(context.Context, *venturi.Run[struct{}], struct{}) (venturi.Outcome, error) {
	return venturi.Completed(), nil
}

func (guarded) Kind() string        { return "guarded" }
func (g guarded) Partition() string { return g.Host }
func (guarded) Limits() venturi.Limits {
	return venturi.Limits{Breaker: venturi.Breaker{Failures: 1, Cooldown: time.Hour, PerPartition: true}}
}
func (g guarded) Handle(context.Context, *venturi.Run[struct{}], struct{}) (venturi.Outcome, error) {
	if g.Fail {
		return venturi.Outcome{}, venturi.RetryIn(time.Millisecond, errors.New("host is down"))
	}
	return venturi.Completed(), nil
}

// TestRetentionPrunesIdleGates: the rows that rates and breakers leave per partition
// (host) are deleted once nothing uses them for RetainIdleGates: rate windows with no start
// in their period, closed breakers. A rate window still inside its period and an open
// breaker are kept, and a pruned host's next job runs under a new gate.
func TestRetentionPrunesIdleGates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	cfg := fastConfig()
	cfg.RetainIdleGates = 200 * time.Millisecond
	w := newWorker(t, pool, struct{}{}, cfg)
	venturi.MustRegister[shortRated](w)
	venturi.MustRegister[hourRated](w)
	venturi.MustRegister[guarded](w)
	startWorker(t, w)
	var done []venturi.Result
	for i := range 20 {
		host := fmt.Sprintf("h%02d.example", i)
		done = append(done, enqueue(t, q, shortRated{Host: host}), enqueue(t, q, guarded{Host: host}))
	}
	done = append(done, enqueue(t, q, hourRated{Host: "kept.example"}))
	down := enqueue(t, q, guarded{Host: "down.example", Fail: true})
	for _, r := range done {
		waitState(t, q, r, venturi.StateCompleted)
	}
	waitJob(t, q, down.ID, "the down host's breaker to open", func(j *venturi.Job) bool {
		return j.Circuit != nil && j.Circuit.State == venturi.CircuitOpen
	})
	gates := func() map[string]bool {
		rows, err := pool.Query(ctx, `SELECT kind || ' ' || part FROM venturi_gate`)
		if err != nil {
			t.Fatal(err)
		}
		keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]bool{}
		for _, k := range keys {
			m[k] = true
		}
		return m
	}
	want := map[string]bool{"hour-rated kept.example": true, "guarded down.example": true}
	eventually(t, within, "the idle gates to be pruned", func() bool {
		return maps.Equal(gates(), want)
	})
	// A pruned host's gates come back with its next job.
	waitState(t, q, enqueue(t, q, shortRated{Host: "h00.example"}), venturi.StateCompleted)
	if j := jobByID(t, q, down.ID); j.State == venturi.StateCompleted || j.Circuit == nil || j.Circuit.State != venturi.CircuitOpen {
		t.Fatalf("the down host's job %s, circuit %+v", j.State, j.Circuit)
	}
}

package venturi_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// migrateTo applies venturi's migrations up to version v only.
func migrateTo(t *testing.T, pool *pgxpool.Pool, v int) {
	t.Helper()
	all, err := venturi.ReadMigrations(venturi.MigrationsFS())
	if err != nil {
		t.Fatal(err)
	}
	fsys := fstest.MapFS{}
	for _, m := range all {
		if m.Version <= v {
			fsys[m.Name+".up.sql"] = &fstest.MapFile{Data: []byte(m.SQL)}
		}
	}
	if _, err := venturi.MigrateFS(context.Background(), pool, fsys, "venturi_migration"); err != nil {
		t.Fatal(err)
	}
}

// prioTask2 is prioTask under another kind.
type prioTask2 prioTask

func (prioTask2) Kind() string                 { return "prio2" }
func (p prioTask2) Priority() venturi.Priority { return p.P }
func (p prioTask2) Handle(ctx context.Context, run *venturi.Run[struct{}], order chan<- string) (venturi.Outcome, error) {
	order <- p.Name
	return venturi.Completed(), nil
}

// TestClaimOrderIsExactAcrossKinds: jobs of two kinds run in one order, by priority, then
// due time, whatever their kind.
func TestClaimOrderIsExactAcrossKinds(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	base := time.Now().Add(-time.Hour)
	enqueue(t, q, prioTask{"a-low-old", venturi.PriorityLow}, venturi.At(base))
	enqueue(t, q, prioTask2{"b-high-new", venturi.PriorityHigh}, venturi.At(base.Add(3*time.Minute)))
	enqueue(t, q, prioTask{"a-high-old", venturi.PriorityHigh}, venturi.At(base.Add(time.Minute)))
	enqueue(t, q, prioTask2{"b-normal", venturi.PriorityNormal}, venturi.At(base.Add(2*time.Minute)))
	enqueue(t, q, prioTask2{"b-low-new", venturi.PriorityLow}, venturi.At(base.Add(4*time.Minute)))
	order := make(chan string, 10)
	cfg := fastConfig()
	cfg.Concurrency = 1
	w := newWorker(t, pool, (chan<- string)(order), cfg)
	venturi.MustRegister[prioTask](w)
	venturi.MustRegister[prioTask2](w)
	startWorker(t, w)
	var got []string
	for range 5 {
		got = append(got, recv(t, order, "the next job"))
	}
	if want := "a-high-old,b-high-new,b-normal,a-low-old,b-low-new"; strings.Join(got, ",") != want {
		t.Fatalf("ran %v, want %s", got, want)
	}
}

// TestMigration4UpgradesAVersion3Schema: available, scheduled and running jobs of a
// version-3 schema survive the upgrade: they land in the default queue, the claim index
// replaces the per-kind one, and a version-4 worker runs them all, most urgent first.
func TestMigration4UpgradesAVersion3Schema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 3)
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	// Jobs as version 3 stores them (this version's enqueue names the queue column).
	ids := []ulid.ULID{ulid.Make(), ulid.Make(), ulid.Make(), ulid.Make()}
	if _, err := pool.Exec(ctx, `INSERT INTO venturi_job (id, kind, state, priority, payload, run_at) VALUES
		($1, 'prio', 'available', -10, '{"Name":"low","P":-10}', now()),
		($2, 'prio', 'available', 10, '{"Name":"high","P":10}', now()),
		($3, 'prio', 'scheduled', 0, '{"Name":"later","P":0}', now() + interval '300 milliseconds')`,
		ids[0][:], ids[1][:], ids[2][:]); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO venturi_job (id, kind, state, payload, run_at, runs, lease_token, lease_expires_at, worker_id)
		VALUES ($1, 'prio', 'running', '{"Name":"rescued","P":0}', now(), 1, 7, now() - interval '1 hour', 'v3-worker')`, ids[3][:]); err != nil {
		t.Fatal(err)
	}
	migrateTo(t, pool, 4)
	var queues, oldIndex int
	if err := pool.QueryRow(ctx, `SELECT count(DISTINCT queue), (SELECT count(*) FROM pg_indexes
		WHERE indexname = 'venturi_job_claim_idx' AND schemaname = current_schema()) FROM venturi_job`).Scan(&queues, &oldIndex); err != nil {
		t.Fatal(err)
	}
	if queues != 1 || oldIndex != 0 {
		t.Fatalf("after the upgrade: %d queues, per-kind claim index present: %v", queues, oldIndex == 1)
	}
	// Then on to the current version, with the data in it.
	if applied, err := venturi.Migrate(ctx, pool); err != nil || len(applied) == 0 || applied[0] != 5 {
		t.Fatalf("Migrate = %v, %v; want the versions after 4", applied, err)
	}
	order := make(chan string, 8)
	cfg := fastConfig()
	cfg.Concurrency = 1
	startWorkerFor[prioTask](t, pool, (chan<- string)(order), cfg)
	if first := recv(t, order, "the first run"); first != "high" {
		t.Fatalf("first run %q, want the high-priority job", first)
	}
	for _, id := range ids {
		if j := waitFinished(t, q, id); j.State != venturi.StateCompleted {
			t.Fatalf("job %s ended %s", id, j.State)
		}
	}
}

// bulkTask goes to the queue "bulk"; bulkKeyed does too, with a dedup key.
type bulkTask struct{ N int }

func (bulkTask) Kind() string  { return "bulk" }
func (bulkTask) Queue() string { return "bulk" }
func (b bulkTask) Handle(ctx context.Context, run *venturi.Run[struct{}], seen chan<- string) (venturi.Outcome, error) {
	seen <- "bulk"
	return venturi.Completed(), nil
}

type bulkKeyed struct{ K string }

func (bulkKeyed) Kind() string                 { return "bulk_keyed" }
func (bulkKeyed) Queue() string                { return "bulk" }
func (b bulkKeyed) DedupKey() venturi.DedupKey { return venturi.DedupKey(b.K) }
func (b bulkKeyed) Handle(ctx context.Context, run *venturi.Run[struct{}], seen chan<- string) (venturi.Outcome, error) {
	seen <- "bulk_keyed"
	return venturi.Completed(), nil
}

type badQueueTask struct{}

func (badQueueTask) Kind() string  { return "bad_queue" }
func (badQueueTask) Queue() string { return "" }

// TestNamedQueueSeparatesWorkers: a task's Queue() puts its jobs in that queue through
// every enqueue path (one, many, dedup insert, dedup replace); a worker of the default
// queue that registered the kinds leaves them alone, and a worker of that queue runs them.
// An invalid queue name is refused, by Enqueue and by NewWorker.
func TestNamedQueueSeparatesWorkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	enqueue(t, q, bulkTask{N: 1})
	if _, err := q.EnqueueMany(ctx, []venturi.Task{bulkTask{N: 2}, bulkKeyed{K: "a"}}); err != nil {
		t.Fatal(err)
	}
	enqueue(t, q, bulkKeyed{K: "b"})
	enqueue(t, q, bulkKeyed{K: "b"}) // replaces the pending job
	if n := countJobs(t, pool, "queue = 'bulk'"); n != 4 || countJobs(t, pool, "true") != 4 {
		t.Fatalf("%d jobs in queue bulk, want all 4", n)
	}
	seen := make(chan string, 8)
	other := newWorker(t, pool, (chan<- string)(seen), fastConfig()) // the default queue
	venturi.MustRegister[bulkTask](other)
	venturi.MustRegister[bulkKeyed](other)
	startWorker(t, other)
	cfg := fastConfig()
	cfg.Queue, cfg.ID = "bulk", "bulk-worker"
	w := newWorker(t, pool, (chan<- string)(seen), cfg)
	venturi.MustRegister[bulkTask](w)
	venturi.MustRegister[bulkKeyed](w)
	startWorker(t, w)
	eventually(t, within, "every bulk job to complete", func() bool {
		return countJobs(t, pool, "queue = 'bulk' AND state = 'completed'") == 4
	})
	if n := countJobs(t, pool, "queue = 'bulk' AND worker_id <> $1", cfg.ID); n != 0 {
		t.Fatalf("%d bulk jobs ran on a worker of another queue", n)
	}
	if _, err := q.Enqueue(ctx, badQueueTask{}); !errors.Is(err, venturi.ErrInvalidQueue) {
		t.Fatalf("empty queue name: %v, want ErrInvalidQueue", err)
	}
	var ce *venturi.ConfigError
	if _, err := venturi.NewWorker(pool, struct{}{}, venturi.Config{Queue: strings.Repeat("q", 129)}); !errors.As(err, &ce) || ce.Field != "Queue" {
		t.Fatalf("NewWorker with a 129-byte queue: %v", err)
	}
}

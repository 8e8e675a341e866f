package venturi_test

// Upgrade tests: each starts from a schema at an earlier version with jobs in it, applies
// the next migrations (migration/NNN_*.up.sql), and checks what the migration changes and
// that the jobs of before the upgrade still run. One test per version, in version order:
// -run 'TestUpgradeTo16_' runs one, -run TestUpgradeTo all.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/internal/dbsqlc"
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

// extendHistory makes both history lanes' partitions for the next three hours, as the
// maintenance leader would, so that jobs can finish into them.
func extendHistory(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `SELECT venturi_history_extend(1::smallint, interval '1 hour', now() + interval '3 hours', 1000),
		venturi_history_extend(2::smallint, interval '1 hour', now() + interval '3 hours', 1000)`); err != nil {
		t.Fatal(err)
	}
}

// startRun puts job id in the running state as a worker's claim does and returns its
// lease token.
func startRun(t *testing.T, pool *pgxpool.Pool, id ulid.ULID) int64 {
	t.Helper()
	var token int64
	if err := pool.QueryRow(context.Background(), `UPDATE venturi_job SET state = 'running', runs = 1,
		lease_token = nextval('venturi_lease_token_seq'), lease_expires_at = now() + interval '1 minute',
		worker_id = 'w', attempted_at = now() WHERE id = $1 RETURNING lease_token`, pgtype.UUID{Bytes: id, Valid: true}).Scan(&token); err != nil {
		t.Fatal(err)
	}
	return token
}

// finishRuns ends runs as this version's worker does (FinishRuns, an hour of retention),
// each job id, under its token, in the state given ("completed", "dead").
func finishRuns(t *testing.T, db dbsqlc.DBTX, ids []ulid.ULID, tokens []int64, states []string) {
	t.Helper()
	p := dbsqlc.FinishRunsParams{Tokens: tokens, States: states,
		RetainCompletedUs: time.Hour.Microseconds(), RetainDeadUs: time.Hour.Microseconds()}
	for i, id := range ids {
		p.Ids = append(p.Ids, pgtype.UUID{Bytes: id, Valid: true})
		p.DelaysUs = append(p.DelaysUs, 0)
		p.Failed = append(p.Failed, states[i] == "dead")
		p.SetCarry = append(p.SetCarry, false)
		p.Carries = append(p.Carries, "")
		p.Entries = append(p.Entries, "")
		p.RanUs = append(p.RanUs, 1500)
	}
	if got, err := dbsqlc.New().FinishRuns(context.Background(), db, p); err != nil || len(got) != len(ids) {
		t.Fatalf("FinishRuns = %v, %v", got, err)
	}
}

// TestUpgradeTo2_SetsVacuumOptionsAndKeepsJobs: 002_venturi_vacuum.up.sql sets the job
// table's vacuum and fill-factor options. A schema at version 1 with jobs in it upgrades to
// version 2; the jobs are untouched and still run.
func TestUpgradeTo2_SetsVacuumOptionsAndKeepsJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	v1, err := venturi.ReadMigrations(venturi.MigrationsFS())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := venturi.MigrateFS(ctx, pool, fstest.MapFS{
		"001_venturi_init.up.sql": {Data: []byte(v1[0].SQL)},
	}, "venturi_migration"); err != nil {
		t.Fatal(err)
	}
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	// A job as version 1 stores it (this version's enqueue names columns version 1 lacks).
	r := venturi.Result{ID: ulid.Make()}
	if _, err := pool.Exec(ctx, `INSERT INTO venturi_job (id, kind, state, payload, run_at)
		VALUES ($1, 'note', 'available', '{"msg":"from v1"}', now())`, r.ID[:]); err != nil {
		t.Fatal(err)
	}
	applied, err := venturi.Migrate(ctx, pool)
	if err != nil || len(applied) == 0 || applied[0] != 2 {
		t.Fatalf("Migrate = %v, %v; want version 2 applied", applied, err)
	}
	var opts []string
	if err := pool.QueryRow(ctx, "SELECT reloptions FROM pg_class WHERE oid = 'venturi_job'::regclass").Scan(&opts); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"autovacuum_vacuum_cost_delay=0": false, "fillfactor=90": false}
	for _, o := range opts {
		if _, ok := want[o]; ok {
			want[o] = true
		}
	}
	for o, seen := range want {
		if !seen {
			t.Errorf("reloptions %v lack %s", opts, o)
		}
	}
	w := newWorker(t, pool, struct{}{}, fastConfig())
	venturi.MustRegister[noteTask](w)
	startWorker(t, w)
	if j := waitState(t, q, r, venturi.StateCompleted); j.RunCount != 1 {
		t.Fatalf("job after the upgrade: %+v", j)
	}
	if _, err := q.Job(ctx, r.ID); errors.Is(err, venturi.ErrNotFound) {
		t.Fatal("job lost")
	}
}

// TestUpgradeTo3_MovesLongJournalsOutOfTheRow: 003_venturi_journal.up.sql keeps only a
// job's recent journal entries in its row and moves the rest to venturi_journal. Jobs of a
// version-2 schema, one with a journal longer than the bound and one running under a lease,
// survive the upgrade: the long journal is moved (nothing lost, numbered in order), and both
// jobs still finish.
func TestUpgradeTo3_MovesLongJournalsOutOfTheRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	all, err := venturi.ReadMigrations(venturi.MigrationsFS())
	if err != nil {
		t.Fatal(err)
	}
	v2 := fstest.MapFS{}
	for _, m := range all[:2] {
		v2[m.Name+".up.sql"] = &fstest.MapFile{Data: []byte(m.SQL)}
	}
	if _, err := venturi.MigrateFS(ctx, pool, v2, "venturi_migration"); err != nil {
		t.Fatal(err)
	}
	long := ulid.Make()
	if _, err := pool.Exec(ctx, `INSERT INTO venturi_job (id, kind, state, payload, run_at, runs, journal)
		SELECT $1, 'note', 'available', '{"msg":"long"}', now(), 50,
		       jsonb_agg(jsonb_build_object('event', 'paused', 'run', i, 'note', 'v2 run ' || i) ORDER BY i)
		FROM generate_series(1, 50) i`, long[:]); err != nil {
		t.Fatal(err)
	}
	running := ulid.Make()
	if _, err := pool.Exec(ctx, `INSERT INTO venturi_job (id, kind, state, payload, run_at, runs, lease_token, lease_expires_at, worker_id)
		VALUES ($1, 'note', 'running', '{"msg":"running"}', now(), 1, 7, now() - interval '1 hour', 'v2-worker')`, running[:]); err != nil {
		t.Fatal(err)
	}
	applied, err := venturi.Migrate(ctx, pool)
	if err != nil || len(applied) == 0 || applied[0] != 3 {
		t.Fatalf("Migrate = %v, %v; want version 3 applied", applied, err)
	}
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	j := jobByID(t, q, long)
	if j.JournalLen != 50 || len(j.Journal) != venturi.JournalRecentAfterMove || j.Journal[0].Seq != 35 {
		t.Fatalf("after the upgrade: JournalLen %d, recent %v", j.JournalLen, seqs(j.Journal))
	}
	older, err := q.Journal(ctx, long, 35, 100)
	if err != nil || len(older) != 34 || older[0].Note != "v2 run 1" || older[33].Seq != 34 {
		t.Fatalf("moved entries: %v, %v", seqs(older), err)
	}
	w := newWorker(t, pool, struct{}{}, fastConfig())
	venturi.MustRegister[noteTask](w)
	startWorker(t, w)
	if j := waitFinished(t, q, long); j.State != venturi.StateCompleted || j.JournalLen != 51 {
		t.Fatalf("long job after the upgrade: %s, JournalLen %d", j.State, j.JournalLen)
	}
	if j := waitFinished(t, q, running); j.State != venturi.StateCompleted || j.Journal[0].Event != venturi.EventAbandoned {
		t.Fatalf("rescued job after the upgrade: %s, %s", j.State, eventsOf(j))
	}
}

// TestUpgradeTo4_PutsJobsInTheDefaultQueue: 004_venturi_queue_claim.up.sql adds queues and
// claims by queue through one index instead of one scan per kind. Available, scheduled and
// running jobs of a version-3 schema survive the upgrade: they land in the default queue,
// the claim index replaces the per-kind one, and a version-4 worker runs them all, most
// urgent first.
func TestUpgradeTo4_PutsJobsInTheDefaultQueue(t *testing.T) {
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

// TestUpgradeTo6_KeepsJobsPlain: 006_venturi_flow.up.sql adds flow control (queue rows,
// kind limits, partitions and slots, the gated claim). Jobs of a version-5 schema
// (available, scheduled, running with an expired lease) are plain after the upgrade and all
// run.
func TestUpgradeTo6_KeepsJobsPlain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 5)
	ids := []ulid.ULID{ulid.Make(), ulid.Make(), ulid.Make()}
	if _, err := pool.Exec(ctx, `INSERT INTO venturi_job (id, kind, queue, state, payload, run_at) VALUES
		($1, 'queued', 'default', 'available', '{"Q":"default","Name":"a"}', now()),
		($2, 'queued', 'default', 'scheduled', '{"Q":"default","Name":"b"}', now() + interval '100 milliseconds')`,
		ids[0][:], ids[1][:]); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, runs, lease_token, lease_expires_at, worker_id)
		VALUES ($1, 'queued', 'default', 'running', '{"Q":"default","Name":"c"}', now(), 1, 7, now() - interval '1 hour', 'v5-worker')`, ids[2][:]); err != nil {
		t.Fatal(err)
	}
	if applied, err := venturi.Migrate(ctx, pool); err != nil || len(applied) == 0 || applied[0] != 6 {
		t.Fatalf("Migrate = %v, %v; want version 6 first", applied, err)
	}
	if n := countJobs(t, pool, "part IS NULL"); n != 3 {
		t.Fatalf("%d plain jobs after the upgrade, want 3", n)
	}
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	seen := make(chan string, 4)
	startWorkerFor[queued](t, pool, (chan<- string)(seen), fastConfig())
	for _, id := range ids {
		if j := waitFinished(t, q, id); j.State != venturi.StateCompleted {
			t.Fatalf("job %s ended %s", id, j.State)
		}
	}
}

// TestUpgradeTo7_RunsGatedJobsOnePerSlot: 007_venturi_claim_cost.up.sql replaces
// venturi_claim_gated with a cheaper one (functions only). Gated jobs of a version-6 schema
// (a slot held by a job whose lease expired, a round-robin cursor) all run after the
// upgrade, one at a time per slot; and a version-6 worker's claim (the function called with
// the same arguments, without the version-7 guard) still claims.
func TestUpgradeTo7_RunsGatedJobsOnePerSlot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 6)
	var ids []ulid.ULID
	for i := range 6 {
		id := ulid.Make()
		key := fmt.Sprintf("s%d", i%2)
		if _, err := pool.Exec(ctx, `
			INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, part, slot_key, slot_limit, slot_policy)
			VALUES ($1, 'slotted', 'default', 'available', $2, now(), $3, $3, 1, 0)`,
			id[:], fmt.Sprintf(`{"N":%d,"Key":%q,"Limit":1,"Ms":5}`, i, key), key); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	expired := ulid.Make()
	if _, err := pool.Exec(ctx, `
		INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, runs, lease_token, lease_expires_at,
		                         worker_id, attempted_at, part, slot_key, slot_limit, slot_policy)
		VALUES ($1, 'slotted', 'default', 'running', '{"N":9,"Key":"s0","Limit":1,"Ms":5}', now(), 1, 7,
		        now() - interval '1 hour', 'v6-worker', now() - interval '1 hour', 's0', 's0', 1, 0)`,
		expired[:]); err != nil {
		t.Fatal(err)
	}
	ids = append(ids, expired)
	if _, err := pool.Exec(ctx, `INSERT INTO venturi_queue (name, rr_after) VALUES ('default', 's0')`); err != nil {
		t.Fatal(err)
	}
	if applied, err := venturi.Migrate(ctx, pool); err != nil || len(applied) == 0 || applied[0] != 7 {
		t.Fatalf("Migrate = %v, %v; want version 7", applied, err)
	}

	// A version-6 worker calls the function as before (rolled back: only the call is tested).
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM venturi_claim_gated('default', ARRAY['slotted'], 10, 5000000, 'v6', 25, 'ch') WHERE id IS NOT NULL`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n != 1 { // slot s0 is held by the expired run until the rescue; s1 admits one
		t.Fatalf("a version-6 claim got %d jobs, want 1", n)
	}

	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	g := newGauge()
	startFlowWorkers[slotted](t, pool, flowState{g: g}, 2, fastConfig())
	for _, id := range ids {
		if j := waitFinished(t, q, id); j.State != venturi.StateCompleted {
			t.Fatalf("job %s ended %s", id, j.State)
		}
	}
	for _, key := range []string{"s0", "s1"} {
		if m := g.max(key); m > 1 {
			t.Fatalf("slot %s ran %d jobs at once, limit 1", key, m)
		}
	}
}

// TestUpgradeTo8_StartsTheDebounceBurstAtCreation: 008_venturi_supervise.up.sql adds due
// times decided by the merge (debounce, throttle) and supervised singletons. A version-6
// schema with jobs in it (a pending dedup job created two hours ago, a running job of
// another kind) takes versions 7 and 8; the pending job's first debounced merge starts its
// burst at its creation (so a one-minute maximum wait makes it due at once), the running
// job finishes, and a singleton is ensured once.
func TestUpgradeTo8_StartsTheDebounceBurstAtCreation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 6)
	pending, running := ulid.Make(), ulid.Make()
	if _, err := pool.Exec(ctx, `INSERT INTO venturi_job (id, kind, queue, state, dedup_key, payload, run_at, created_at) VALUES
		($1, 'due_policy', 'default', 'scheduled', 'k', '{"n":1}', now() + interval '1 hour', now() - interval '2 hours')`, pending[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, runs, lease_token, lease_expires_at, worker_id)
		VALUES ($1, 'due_policy', 'default', 'running', '{"n":2}', now(), 1, 7, now() - interval '1 hour', 'v6-worker')`, running[:]); err != nil {
		t.Fatal(err)
	}
	applied, err := venturi.Migrate(ctx, pool)
	if err != nil || len(applied) == 0 || applied[0] != 7 || !slices.Contains(applied, 8) {
		t.Fatalf("Migrate = %v, %v; want versions 7 and 8 applied", applied, err)
	}
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	r := enqueue(t, q, duePolicyTask{N: 3, Rule: "debounce", Delay: time.Hour, MaxWait: time.Minute})
	if r.ID != pending || r.Action != venturi.ActionReplaced {
		t.Fatalf("merge after the upgrade: %+v", r)
	}
	e, j := lastMerge(t, q, pending)
	if j.State != venturi.StateAvailable || !e.DueAfter.Equal(j.CreatedAt.Add(time.Minute)) {
		t.Fatalf("entry %+v, state %s, created %v", e, j.State, j.CreatedAt)
	}
	ran := make(chan int, 4)
	startWorkerFor[duePolicyTask](t, pool, (chan<- int)(ran), fastConfig())
	waitFinished(t, q, pending)
	waitFinished(t, q, running)
	for range 2 {
		if _, err := q.EnsureSingleton(ctx, supNever{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := countJobs(t, pool, "kind = 'sup_never'"); n != 1 {
		t.Fatalf("%d singleton jobs, want 1", n)
	}
}

// TestUpgradeTo9_AddsCronAndKeepsJobs: 009_venturi_cron.up.sql adds the cron tables. A
// schema of version 8 with jobs in it gets them and nothing else changes: its job runs, and
// a schedule fires.
func TestUpgradeTo9_AddsCronAndKeepsJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 8)
	id := ulid.Make()
	if _, err := pool.Exec(ctx, `INSERT INTO venturi_job (id, kind, queue, state, payload, run_at)
		VALUES ($1, 'queued', 'default', 'available', '{"Q":"default","Name":"a"}', now())`, id[:]); err != nil {
		t.Fatal(err)
	}
	applied, err := venturi.Migrate(ctx, pool)
	if err != nil || len(applied) == 0 || applied[0] != 9 {
		t.Fatalf("Migrate = %v, %v; want version 9 applied first", applied, err)
	}
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	schedule(t, q, venturi.Schedule{Name: "s", Cron: "* * * * * *", Task: tick{Name: "upgraded"}})
	seen := make(chan string, 4)
	startWorkerFor[queued](t, pool, (chan<- string)(seen), fastConfig())
	if j := waitFinished(t, q, id); j.State != venturi.StateCompleted {
		t.Fatalf("job ended %s", j.State)
	}
	eventually(t, within, "a fire", func() bool { return len(fires(t, q, "s")) >= 1 })
}

// upgradeTo10From is the version the upgrade to 10 starts from: 9, the one before it.
const upgradeTo10From = 9

// TestUpgradeTo10_OldJobsRunWithoutEvents: 010_venturi_events.up.sql adds the durable event
// stream (a job opts in at enqueue) and job metadata. A job of the version-9 schema keeps no
// metadata and runs without events, a job enqueued after the upgrade streams its events, and
// an insert without the new columns still works.
func TestUpgradeTo10_OldJobsRunWithoutEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, upgradeTo10From)
	old := ulid.Make()
	if _, err := pool.Exec(ctx, `
		INSERT INTO venturi_job (id, kind, queue, state, payload, run_at)
		VALUES ($1, 'scripted', 'default', 'available', '{"name":"old"}', now())`, old[:]); err != nil {
		t.Fatal(err)
	}
	if applied, err := venturi.Migrate(ctx, pool); err != nil || len(applied) == 0 || applied[0] != 10 {
		t.Fatalf("Migrate = %v, %v; want version 10 first", applied, err)
	}
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	j := jobByID(t, q, old)
	if j.Meta != nil {
		t.Fatalf("old job meta %v", j.Meta)
	}
	// The old job (enqueued before it could opt in) runs, without events; a new one streams.
	w := newWorker(t, pool, struct{}{}, fastConfig())
	venturi.MustRegister[scripted](w)
	startWorker(t, w)
	r := enqueue(t, q, scripted{Name: "new"})
	waitState(t, q, r, venturi.StateWaiting)
	waitState(t, q, venturi.Result{ID: old}, venturi.StateWaiting)
	// The stream shows an event once no transaction older than it is open in the cluster
	// (events.go), and other tests' transactions may be: wait for the new job's events.
	var evs []venturi.JobEvent
	eventually(t, 30*time.Second, "the new job's events", func() bool {
		evs, _ = readAll(t, q, "")
		return strings.HasPrefix(eventNames(evs, r.ID), "enqueued started failed")
	})
	if eventNames(evs, old) != "" {
		t.Fatalf("events: old %q, new %q", eventNames(evs, old), eventNames(evs, r.ID))
	}
	// A version-9 worker's statements (an insert without the new columns) keep working.
	v8 := ulid.Make()
	if _, err := pool.Exec(ctx, `INSERT INTO venturi_job (id, kind, queue, state, payload, run_at)
		VALUES ($1, 'plain_evt', 'default', 'scheduled', '{}', now() + interval '1 hour')`, v8[:]); err != nil {
		t.Fatal(err)
	}
}

// upgradeTo12From is the version the upgrade to 12 starts from: 10 (version 11 is unused).
const upgradeTo12From = 10

// TestUpgradeTo12_ClaimAdmitsByTheRunningCount: 012_venturi_claim_plans.up.sql replaces
// venturi_claim_gated with one whose statements are planned better (functions only). After
// the upgrade, a claim of many slot jobs over many keys admits, per slot, only what its
// limit leaves beside the jobs already running in it: the running count now comes from one
// grouped pass over the running slot jobs instead of a per-key array test. Each claimed job
// comes back with its row's metadata and due time.
func TestUpgradeTo12_ClaimAdmitsByTheRunningCount(t *testing.T) {
	t.Parallel()
	pool := newEmptyDB(t)
	migrateTo(t, pool, upgradeTo12From)
	loadSlotClaim(t, pool)
	migrateTo(t, pool, 12)
	checkSlotClaim(t, pool)
}

// TestUpgradeTo13_FirstSampleCountsEarlierJobs: 013_venturi_ops.up.sql adds the stats
// tables and the indexes of the operations API. A version-12 schema with jobs in it gets
// them; the first sample counts the jobs that finished before the upgrade (a full
// recount), the dead-job listing uses the new index, and a version-12 worker's statements
// (an insert, a retention delete that knows nothing of the stats) keep working.
func TestUpgradeTo13_FirstSampleCountsEarlierJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 12)
	if _, err := pool.Exec(ctx, `
		INSERT INTO venturi_queue (name, paused) VALUES ('held', true);
		INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, finished_at, runs)
		SELECT (lpad(to_hex((extract(epoch FROM now()) * 1000)::bigint), 12, '0') || lpad(to_hex(i), 20, '0'))::uuid,
		       'ops', CASE WHEN i = 6 THEN 'held' ELSE 'default' END,
		       (CASE WHEN i <= 3 THEN 'completed' WHEN i <= 5 THEN 'dead' ELSE 'available' END)::venturi_job_state,
		       '{}', now(), CASE WHEN i <= 5 THEN now() - interval '1 hour' END, 1
		FROM generate_series(1, 6) i`); err != nil {
		t.Fatal(err)
	}
	if applied, err := venturi.Migrate(ctx, pool); err != nil || len(applied) == 0 || applied[0] != 13 {
		t.Fatalf("Migrate = %v, %v; want version 13 first", applied, err)
	}
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	if s := readStats(t, q); !s.SampledAt.IsZero() {
		t.Fatalf("a sample before any worker: %+v", s)
	}
	cfg := statsConfig("w13")
	cfg.RetainCompleted, cfg.RetainDead = 24*time.Hour, 24*time.Hour // they ended an hour ago
	startOpsWorker(t, pool, cfg)
	waitStats(t, q, "the jobs of before the upgrade", func(s venturi.Stats) bool {
		d, h := queueStats(s, venturi.DefaultQueue), queueStats(s, "held")
		return d.Counts[venturi.StateCompleted] == 3 && d.Counts[venturi.StateDead] == 2 && h.Counts[venturi.StateAvailable] == 1 && h.Paused
	})
	if dead := listAll(t, q, mustFilter(t, "state:dead"), 1); len(dead) != 2 {
		t.Fatalf("dead listing: %+v", dead)
	}
	// A version-12 worker: its insert and its retention's plain DELETE.
	if _, err := pool.Exec(ctx, `INSERT INTO venturi_job (id, kind, queue, state, payload, run_at)
		VALUES ($1, 'ops', 'held', 'available', '{}', now())`, ulid.Make().Bytes()); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM venturi_job WHERE state = 'completed'`); err != nil {
		t.Fatal(err)
	}
}

// TestUpgradeTo14_ClaimAdmitsWhatEachSlotLeaves: 014_venturi_claim_cheaper.up.sql replaces
// venturi_claim_gated with a cheaper one that looks its slots' running jobs up in a map
// instead of joining (functions only). With running and available slot jobs in the table,
// the claim of many slots after the upgrade admits per slot what its limit leaves.
func TestUpgradeTo14_ClaimAdmitsWhatEachSlotLeaves(t *testing.T) {
	slow(t)
	t.Parallel()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 12)
	loadSlotClaim(t, pool)
	if applied, err := venturi.Migrate(context.Background(), pool); err != nil || !slices.Contains(applied, 14) {
		t.Fatalf("Migrate = %v, %v; want version 14 applied", applied, err)
	}
	checkSlotClaim(t, pool)
}

// The slot claim scenario of the upgrades to 12 and 14: slotKeys slots of limit slotLimit, a
// third of them with one job running elsewhere, slotPerKey available jobs each.
const slotKeys, slotPerKey, slotLimit = 60, 4, 2

func loadSlotClaim(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	for k := range slotKeys {
		key := fmt.Sprintf("k%02d", k)
		if k%3 == 0 { // a third of the slots have one job running elsewhere
			if _, err := pool.Exec(ctx, `
				INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, runs, lease_token, lease_expires_at,
				                         worker_id, attempted_at, part, slot_key, slot_limit, slot_policy)
				VALUES ($1, 'slotted', 'default', 'running', '{}', now(), 1, nextval('venturi_lease_token_seq'),
				        now() + interval '1 hour', 'elsewhere', now(), $2, $2, $3, 0)`,
				ulid.Make().Bytes(), key, slotLimit); err != nil {
				t.Fatal(err)
			}
		}
		for range slotPerKey {
			if _, err := pool.Exec(ctx, `
				INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, part, slot_key, slot_limit, slot_policy, meta)
				VALUES ($1, 'slotted', 'default', 'available', '{}', now() - $4::int * interval '1 second', $2, $2, $3, 0,
				        CASE WHEN $4::int % 2 = 0 THEN jsonb_build_object('key', $2::text) END)`,
				ulid.Make().Bytes(), key, slotLimit, k); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// checkSlotClaim claims every slot job at once (in a transaction it rolls back) and
// checks what each slot admitted, and that each job came back with its row's meta and
// due time.
func checkSlotClaim(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	rows, err := tx.Query(ctx, `
		SELECT j.slot_key, count(*),
		       count(*) FILTER (WHERE c.meta IS DISTINCT FROM COALESCE(j.meta, 'null'::jsonb) OR c.run_at IS DISTINCT FROM j.run_at)
		FROM venturi_claim_gated('default', ARRAY['slotted'], 1000, 5000000, 'w', 25, 'ch') c
		JOIN venturi_job j ON j.id = c.id -- the statement's snapshot: the rows as they were before the claim
		GROUP BY j.slot_key`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for rows.Next() {
		var key string
		var n, wrong int
		if err := rows.Scan(&key, &n, &wrong); err != nil {
			t.Fatal(err)
		}
		if wrong > 0 { // the two columns 012_venturi_claim_plans.up.sql added
			t.Errorf("slot %s: %d claimed jobs came back with another meta or run_at than their row's", key, wrong)
		}
		got[key] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for k := range slotKeys {
		key, want := fmt.Sprintf("k%02d", k), slotLimit
		if k%3 == 0 {
			want = slotLimit - 1
		}
		if got[key] != want {
			t.Errorf("slot %s: claimed %d, want %d (limit %d, %d running)", key, got[key], want, slotLimit, slotLimit-want)
		}
	}
}

// TestUpgradeTo15_IndexesDueJobsByDueTimeThenID: 015_venturi_due_order.up.sql indexes the
// scheduled and waiting jobs on (run_at, id), their listing order. With scheduled and
// waiting jobs in the table, many of them due at one time: the new indexes hold (run_at,
// id) and the old ones are gone; the listing walks the jobs that share a due time in ID
// order, each once; a worker still promotes and runs the scheduled jobs that are due.
func TestUpgradeTo15_IndexesDueJobsByDueTimeThenID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 14)
	batch := seedMany(t, pool, 40, "scheduled", venturi.DefaultQueue, func(int) bool { return false })
	waiting := seedMany(t, pool, 15, "waiting", venturi.DefaultQueue, func(int) bool { return false })
	due := seed(t, pool, seedJob{state: "scheduled", runAt: -time.Second}, seedJob{state: "scheduled", runAt: -time.Second})
	if applied, err := venturi.Migrate(ctx, pool); err != nil || !slices.Contains(applied, 15) {
		t.Fatalf("Migrate = %v, %v; want version 15 applied", applied, err)
	}
	rows, err := pool.Query(ctx, `SELECT indexname, indexdef FROM pg_indexes
		WHERE tablename = 'venturi_job' AND schemaname = current_schema() AND indexname ~ '^venturi_job_(scheduled|waiting)'
		  AND indexname !~ '_kind_idx$' -- version 41's, by queue and kind
		ORDER BY indexname`)
	if err != nil {
		t.Fatal(err)
	}
	var defs []string
	for rows.Next() {
		var name, def string
		if err := rows.Scan(&name, &def); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(def, "(run_at, id)") {
			t.Errorf("%s: %s, want (run_at, id)", name, def)
		}
		defs = append(defs, name)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(defs, []string{"venturi_job_scheduled_due_idx", "venturi_job_waiting_due_idx"}) {
		t.Fatalf("indexes %v, want only the two of version 15", defs)
	}
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	if got := summaryIDs(listAll(t, q, mustFilter(t, "state:waiting"), 4)); !slices.Equal(got, waiting) {
		t.Fatalf("waiting jobs listed %v, want %v", got, waiting)
	}
	want := append(slices.Clone(due), batch...) // the due ones first, then the batch by ID
	if got := summaryIDs(listAll(t, q, mustFilter(t, "state:scheduled"), 7)); !slices.Equal(got, want) {
		t.Fatalf("scheduled jobs listed %v, want %v", got, want)
	}
	startOpsWorker(t, pool, fastConfig())
	eventually(t, 10*time.Second, "the due scheduled jobs run", func() bool {
		return countJobs(t, pool, "id = ANY($1) AND state = 'completed'", [][]byte{due[0][:], due[1][:]}) == 2
	})
}

// TestUpgradeTo16_GivesGatedJobsVirtualTimes: 016_venturi_virtual_time.up.sql orders the
// gated claim by virtual time instead of a round-robin walk over partitions. The available
// gated jobs of a version-15 schema get virtual times in their partitions' order, so the
// first claim after the upgrade interleaves the partitions; jobs written after it (by any
// worker: the trigger) get theirs too; and a version-15 worker's one-time probe still finds
// the gated jobs.
func TestUpgradeTo16_GivesGatedJobsVirtualTimes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 15)
	insert := func(part string, ageSeconds int) {
		t.Helper()
		id := ulid.Make()
		if _, err := pool.Exec(ctx, `
			INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, part)
			VALUES ($1, 'fair', 'default', 'available', '{}', now() - $3::int * interval '1 second', $2)`,
			id[:], part, ageSeconds); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 30 {
		insert("big", 100-i) // the older ones first
	}
	for i := range 3 {
		insert("small", 10-i)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO venturi_queue (name, rr_after) VALUES ('default', 'big')`); err != nil {
		t.Fatal(err)
	}
	if applied, err := venturi.Migrate(ctx, pool); err != nil || !slices.Contains(applied, 16) {
		t.Fatalf("Migrate = %v, %v; want version 16 applied", applied, err)
	}
	var nullVT, maxBig, maxSmall int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE vt IS NULL),
		max(vt) FILTER (WHERE part = 'big'), max(vt) FILTER (WHERE part = 'small') FROM venturi_job`).Scan(&nullVT, &maxBig, &maxSmall); err != nil {
		t.Fatal(err)
	}
	if nullVT != 0 || maxBig != 30 || maxSmall != 3 {
		t.Fatalf("after the upgrade: %d jobs without a virtual time, big up to %d, small up to %d; want 0, 30, 3", nullVT, maxBig, maxSmall)
	}
	if got, want := claimOrder(t, pool, "fair", 6), []string{"big", "small", "big", "small", "big", "small"}; !slices.Equal(got, want) {
		t.Fatalf("first claim after the upgrade %v, want %v", got, want)
	}
	insert("new", 0) // a write as a version-15 worker makes it: the trigger gives it its place
	if got := claimOrder(t, pool, "fair", 3); !slices.Contains(got, "new") {
		t.Fatalf("a new partition's job is not among the first 3 claimed: %v", got)
	}
	var probe *string // the version-15 ClaimGated guard
	if err := pool.QueryRow(ctx, `SELECT x.part FROM venturi_job x
		WHERE x.state = 'available' AND x.part IS NOT NULL AND x.queue = 'default' ORDER BY x.part LIMIT 1`).Scan(&probe); err != nil || probe == nil {
		t.Fatalf("the version-15 probe: %v, %v", probe, err)
	}
}

// TestUpgradeTo17_RescuedJobKeepsItsVirtualTime: 017_venturi_vt_keep_place.up.sql keeps
// the virtual time of a gated job whose run ends straight back to available (functions
// only). After the upgrade, a running gated job of the version-16 schema that its run
// returns to available at once keeps its virtual time.
func TestUpgradeTo17_RescuedJobKeepsItsVirtualTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 16)
	id := ulid.Make()
	if _, err := pool.Exec(ctx, `
		INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, runs, lease_token, lease_expires_at,
		                         worker_id, attempted_at, part, vt)
		VALUES ($1, 'fair', 'default', 'running', '{}', now(), 1, nextval('venturi_lease_token_seq'),
		        now() - interval '1 minute', 'v16', now(), 'a', 7)`, id[:]); err != nil {
		t.Fatal(err)
	}
	if applied, err := venturi.Migrate(ctx, pool); err != nil || !slices.Contains(applied, 17) {
		t.Fatalf("Migrate = %v, %v; want version 17 applied", applied, err)
	}
	// As the lease rescue returns it.
	if _, err := pool.Exec(ctx, `UPDATE venturi_job SET state = 'available', failures = failures + 1, lease_token = NULL,
		lease_expires_at = NULL WHERE id = $1`, id[:]); err != nil {
		t.Fatal(err)
	}
	if got := vtOf(t, pool, id); got[0] != 7 {
		t.Fatalf("rescued job's virtual time %d, want 7 (kept)", got[0])
	}
}

// TestUpgradeTo18_ClaimCountsSlotsWithoutTheRunningIndex: 018_venturi_claim_admission.up.sql
// drops the index of running slot jobs and decides a slots-only claim in one statement.
// After the upgrade the index is gone, and the gated claim still counts a slot's running
// jobs (one running under a version-17 worker, the other claimed after the upgrade): it
// admits up to the slot's limit, passes over the full slot, and a Replace job asks the
// slot's oldest run to stop.
func TestUpgradeTo18_ClaimCountsSlotsWithoutTheRunningIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 17)
	job := func(state string, policy int, age int) ulid.ULID {
		t.Helper()
		id := ulid.Make()
		if state == "running" {
			if _, err := pool.Exec(ctx, `
				INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, runs, lease_token, lease_expires_at,
				                         worker_id, attempted_at, part, slot_key, slot_limit, slot_policy)
				VALUES ($1, 'slotted', 'default', 'running', '{}', now(), 1, nextval('venturi_lease_token_seq'),
				        now() + interval '1 minute', 'v17', now() - $2::int * interval '1 second', 's', 's', 2, 0)`,
				id[:], age); err != nil {
				t.Fatal(err)
			}
			return id
		}
		if _, err := pool.Exec(ctx, `
			INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, part, slot_key, slot_limit, slot_policy)
			VALUES ($1, 'slotted', 'default', 'available', '{}', now() - $3::int * interval '1 second', 's', 's', 2, $2)`,
			id[:], policy, age); err != nil {
			t.Fatal(err)
		}
		return id
	}
	oldest := job("running", 0, 60)
	for i := range 3 {
		job("available", 0, 30-i)
	}
	if applied, err := venturi.Migrate(ctx, pool); err != nil || !slices.Contains(applied, 18) {
		t.Fatalf("Migrate = %v, %v; want version 18 applied", applied, err)
	}
	var idx int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema()
		AND indexname = 'venturi_job_running_slot_idx'`).Scan(&idx); err != nil || idx != 0 {
		t.Fatalf("venturi_job_running_slot_idx: %d (%v), want dropped", idx, err)
	}
	claim := func(max int) int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM venturi_claim_gated('default', ARRAY['slotted'], $1, 5000000, 'w', 25, 'ch')
			WHERE id IS NOT NULL`, max).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := claim(10); n != 1 {
		t.Fatalf("first claim after the upgrade took %d jobs of slot s (limit 2, 1 running), want 1", n)
	}
	if n := claim(10); n != 0 {
		t.Fatalf("the full slot gave %d more jobs, want 0", n)
	}
	job("available", 1, 0) // Replace: the slot's oldest run is asked to stop
	if n := claim(10); n != 0 {
		t.Fatalf("a Replace job of the full slot was admitted (%d)", n)
	}
	var stop *string
	if err := pool.QueryRow(ctx, `SELECT stop_event FROM venturi_job_all WHERE id = $1`, oldest[:]).Scan(&stop); err != nil || stop == nil || *stop != "replaced" {
		t.Fatalf("the slot's oldest run: stop_event %v (%v), want replaced", stop, err)
	}
}

// TestUpgradeTo19_FullSlotsStillDropAndReplace: 019_venturi_slot_policy_recheck.up.sql
// makes DropIfRunning and Replace act only on a slot that is full when they act. With jobs
// in a full DropIfRunning slot and a full Replace slot, the upgrade leaves them alone, and
// claims after it drop and replace as before when the slots really are full.
func TestUpgradeTo19_FullSlotsStillDropAndReplace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 18)
	job := func(state, slot string, policy int) ulid.ULID {
		t.Helper()
		id := ulid.Make()
		q := `INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, part, slot_key, slot_limit, slot_policy)
		      VALUES ($1, 'slotted', 'default', 'available', '{}', now(), $2, $2, 1, $3)`
		if state == "running" {
			q = `INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, runs, lease_token, lease_expires_at,
			                             worker_id, attempted_at, part, slot_key, slot_limit, slot_policy)
			     VALUES ($1, 'slotted', 'default', 'running', '{}', now(), 1, nextval('venturi_lease_token_seq'),
			             now() + interval '1 minute', 'v18', now(), $2, $2, 1, $3)`
		}
		if _, err := pool.Exec(ctx, q, id[:], slot, policy); err != nil {
			t.Fatal(err)
		}
		return id
	}
	job("running", "d", int(venturi.SlotDropIfRunning))
	dropped := job("available", "d", int(venturi.SlotDropIfRunning))
	replaced := job("running", "r", int(venturi.SlotReplace))
	job("available", "r", int(venturi.SlotReplace))
	if applied, err := venturi.Migrate(ctx, pool); err != nil || !slices.Contains(applied, 19) {
		t.Fatalf("Migrate = %v, %v; want version 19 applied", applied, err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM venturi_claim_gated('default', ARRAY['slotted'], 10, 5000000, 'w', 25, 'ch')
		WHERE id IS NOT NULL`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("claim over two full slots took %d (%v), want 0", n, err)
	}
	var state string
	var stop *string
	if err := pool.QueryRow(ctx, `SELECT state FROM venturi_job_all WHERE id = $1`, dropped[:]).Scan(&state); err != nil || state != "cancelled" {
		t.Fatalf("the DropIfRunning job of the full slot is %s (%v), want cancelled", state, err)
	}
	if err := pool.QueryRow(ctx, `SELECT stop_event FROM venturi_job_all WHERE id = $1`, replaced[:]).Scan(&stop); err != nil || stop == nil || *stop != "replaced" {
		t.Fatalf("the Replace slot's run: stop_event %v (%v), want replaced", stop, err)
	}
}

// TestUpgradeTo21_DropsUnusedGateFunctions: 021_venturi_drop_unused_functions.up.sql drops
// venturi_gated_heads and venturi_gated_heads_upto, which nothing calls. The upgrade of a
// version-20 schema with jobs in it (a plain one, a gated one, a scheduled one that came
// due) drops them, keeps venturi_gate_lock, and a worker started after it claims and
// completes every job, the gated one through venturi_claim_gated.
func TestUpgradeTo21_DropsUnusedGateFunctions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 20)
	functions := func() []string {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT proname::text FROM pg_proc
			WHERE pronamespace = current_schema()::regnamespace AND proname ~ '^venturi_gate'
			ORDER BY proname`)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
			names = append(names, n)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return names
	}
	if got, want := functions(), []string{"venturi_gate_lock", "venturi_gated_heads", "venturi_gated_heads_upto"}; !slices.Equal(got, want) {
		t.Fatalf("version 20 has functions %v, want %v", got, want)
	}
	var ids [][]byte
	insert := func(state, part string, runAt time.Duration) {
		t.Helper()
		id := ulid.Make()
		var p *string
		if part != "" {
			p = &part
		}
		if _, err := pool.Exec(ctx, `
			INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, part)
			VALUES ($1, 'ops', 'default', $2::venturi_job_state, '{"n": 1}', now() + $3::bigint * interval '1 microsecond', $4)`,
			id[:], state, runAt.Microseconds(), p); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id[:])
	}
	insert("available", "", 0)
	insert("available", "p", 0) // gated: venturi_claim_gated claims it
	insert("scheduled", "", -time.Second)
	migrateTo(t, pool, 21)
	if got, want := functions(), []string{"venturi_gate_lock"}; !slices.Equal(got, want) {
		t.Fatalf("after the upgrade: functions %v, want %v", got, want)
	}
	if _, err := venturi.Migrate(ctx, pool); err != nil { // this worker's version
		t.Fatal(err)
	}
	startOpsWorker(t, pool, fastConfig())
	eventually(t, 10*time.Second, "the jobs of the version-20 schema complete", func() bool {
		return countJobs(t, pool, "id = ANY($1) AND state = 'completed'", ids) == len(ids)
	})
}

// TestUpgradeTo22_EndedJobsMoveToTheHistory: 022_venturi_job_history.up.sql adds the
// history of finished jobs, venturi_job_all, and drops venturi_job's delete triggers. A
// version-21 schema holds ended jobs (completed with journal entries moved out of its row
// and a signal, dead, cancelled, and one completed two days ago) and a pending one. Right
// after the upgrade nothing has moved and every job reads as before. A worker started
// after it makes the history's partitions; its retention duty moves the ended jobs there
// with their journal entries and signals kept, deletes the one past its retention, and the
// pending job completes into the history.
func TestUpgradeTo22_EndedJobsMoveToTheHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 21)
	ids := map[string]ulid.ULID{}
	insert := func(name, state string, finishedAgo time.Duration) {
		t.Helper()
		id := ulid.Make()
		ids[name] = id
		var finished any
		if state != "available" {
			finished = time.Now().Add(-finishedAgo)
		}
		if _, err := pool.Exec(ctx, `
			INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, runs, finished_at, journal)
			VALUES ($1, 'ops', 'default', $2::venturi_job_state, '{"n": 1}', now(), $3, $4, $5)`,
			id[:], state, map[bool]int{true: 0, false: 1}[state == "available"], finished,
			fmt.Sprintf(`[{"event": %q, "run": 1, "at": "2026-01-01T00:00:00Z"}]`, map[string]string{
				"available": "merged", "completed": "completed", "dead": "failed", "cancelled": "cancelled"}[state])); err != nil {
			t.Fatal(err)
		}
	}
	insert("completed", "completed", time.Minute)
	insert("dead", "dead", time.Minute)
	insert("cancelled", "cancelled", time.Minute)
	insert("expired", "completed", 48*time.Hour)
	insert("pending", "available", 0)
	// The completed job's earlier entries were moved out of its row, and it got a signal.
	done := ids["completed"]
	if _, err := pool.Exec(ctx, `UPDATE venturi_job SET journal_moved = 2 WHERE id = $1`, done[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO venturi_journal (job_id, seq, entry) VALUES ($1, 1, '{"event": "failed"}'), ($1, 2, '{"event": "failed"}')`, done[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO venturi_signal (job_id, name, payload, delivery_id) VALUES ($1, 'go', 'null', 'd')`, done[:]); err != nil {
		t.Fatal(err)
	}

	if applied, err := venturi.Migrate(ctx, pool); err != nil || !slices.Contains(applied, 22) {
		t.Fatalf("Migrate = %v, %v; want version 22 applied", applied, err)
	}
	var triggers int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_trigger WHERE tgrelid = 'venturi_job'::regclass
		AND tgname IN ('venturi_journal_delete', 'venturi_job_extras_delete')`).Scan(&triggers); err != nil || triggers != 0 {
		t.Fatalf("%d delete triggers left on venturi_job (%v)", triggers, err)
	}
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	before := jobByID(t, q, ids["completed"])
	if before.State != venturi.StateCompleted || before.JournalLen != 3 || countRows(t, pool, "venturi_job_history") != 0 {
		t.Fatalf("right after the upgrade: %s, %d entries, %d in the history", before.State, before.JournalLen, countRows(t, pool, "venturi_job_history"))
	}

	startOpsWorker(t, pool, fastConfig())
	eventually(t, within, "the ended jobs in the history and the pending one completed there", func() bool {
		return countRows(t, pool, "venturi_job") == 0 && countRows(t, pool, "venturi_job_history") == 4
	})
	if _, err := q.Job(ctx, ids["expired"]); !errors.Is(err, venturi.ErrNotFound) {
		t.Fatalf("the job past its retention: %v, want ErrNotFound", err)
	}
	for name, state := range map[string]venturi.State{"completed": venturi.StateCompleted, "dead": venturi.StateDead,
		"cancelled": venturi.StateCancelled, "pending": venturi.StateCompleted} {
		if j := jobByID(t, q, ids[name]); j.State != state {
			t.Errorf("%s: %s, want %s", name, j.State, state)
		}
	}
	page, err := q.Journal(ctx, ids["completed"], 0, 10)
	if err != nil || len(page) != 3 || page[0].Event != venturi.EventFailed || page[2].Event != venturi.EventCompleted {
		t.Fatalf("the moved job's journal: %v, %v", seqs(page), err)
	}
	if n := countSignals(t, pool, "true"); n != 1 {
		t.Fatalf("%d signals, want the moved job's", n)
	}
}

// TestUpgradeTo23_StatementsPlaceGatedJobs: 023_venturi_vt_by_statement.up.sql drops the
// BEFORE UPDATE trigger that gave gated jobs their virtual times; the statements that make
// a job available give them instead. A version-22 schema with a plain job that kept the
// virtual time of when it was gated, a scheduled gated job and a running one upgrades:
// the trigger is gone and the plain job has no virtual time. The running job released by
// the worker's statement keeps its place; the scheduled one, made available by an update
// as a version-22 worker's promotion writes it (no virtual time), is placed by the sweep
// behind its partition's job.
func TestUpgradeTo23_StatementsPlaceGatedJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 22)
	insert := func(state, part string, vt any) (ulid.ULID, int64) {
		t.Helper()
		id := ulid.Make()
		var token int64
		if err := pool.QueryRow(ctx, `
			INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, runs, part, vt, lease_token, lease_expires_at, worker_id, attempted_at)
			VALUES ($1, 'fair', 'default', $2::venturi_job_state, '{}', now(), $5, NULLIF($3, ''), $4,
			        CASE WHEN $2 = 'running' THEN nextval('venturi_lease_token_seq') END,
			        CASE WHEN $2 = 'running' THEN now() + interval '1 minute' END,
			        CASE WHEN $2 = 'running' THEN 'v22' END, CASE WHEN $2 = 'running' THEN now() END)
			RETURNING COALESCE(lease_token, 0)`,
			id[:], state, part, vt, map[bool]int{true: 1}[state == "running"]).Scan(&token); err != nil {
			t.Fatal(err)
		}
		return id, token
	}
	plain, _ := insert("available", "", 5)
	running, token := insert("running", "a", 7)
	scheduled, _ := insert("scheduled", "b", nil)

	if applied, err := venturi.Migrate(ctx, pool); err != nil || !slices.Contains(applied, 23) {
		t.Fatalf("Migrate = %v, %v; want version 23 applied", applied, err)
	}
	var triggers int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_trigger WHERE tgrelid = 'venturi_job'::regclass
		AND NOT tgisinternal AND tgtype & 19 = 19`).Scan(&triggers); err != nil || triggers != 0 {
		t.Fatalf("%d BEFORE UPDATE row triggers left on venturi_job (%v)", triggers, err)
	}
	if got := vtOf(t, pool, plain); got[0] != -1 {
		t.Fatalf("plain job's virtual time %d after the upgrade, want none", got[0])
	}
	db := dbsqlc.New()
	if got, err := db.ReleaseUnstarted(ctx, pool, dbsqlc.ReleaseUnstartedParams{
		Ids: []pgtype.UUID{{Bytes: running, Valid: true}}, Tokens: []int64{token}}); err != nil || len(got) != 1 {
		t.Fatalf("ReleaseUnstarted = %v, %v", got, err)
	}
	if _, err := pool.Exec(ctx, `UPDATE venturi_job SET state = 'available' WHERE id = $1`, scheduled[:]); err != nil {
		t.Fatal(err)
	}
	if got := vtOf(t, pool, running, scheduled); !slices.Equal(got, []int64{7, -1}) {
		t.Fatalf("virtual times %v, want [7 -1]: the released job's kept, the one an older worker promoted unplaced", got)
	}
	if n, err := db.PlaceUnplaced(ctx, pool, 10); err != nil || n != 1 {
		t.Fatalf("PlaceUnplaced = %d, %v; want 1", n, err)
	}
	if got := vtOf(t, pool, scheduled); got[0] != 7 {
		t.Fatalf("the swept job's virtual time %d, want 7 (the queue's front)", got[0])
	}
}

// TestUpgradeTo24_HistoryInLanesPerRetention: 024_venturi_history_per_retention.up.sql
// partitions the history by lane (completed and cancelled, dead), each lane by prune time
// with partitions of its own width. A version-23 history with partitions and a completed
// and a dead job becomes the mixed lane: its jobs read as before. An older worker's extend
// makes both new lanes; its insert, and a finish, land in the lane of the job's state;
// dropping what is due drops the mixed lane once its partitions are gone.
func TestUpgradeTo24_HistoryInLanesPerRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 23)
	if _, err := pool.Exec(ctx, `SELECT venturi_history_extend(interval '1 hour', now() + interval '3 hours', 1000)`); err != nil {
		t.Fatal(err)
	}
	ids := map[string]ulid.ULID{}
	// As a version-23 worker inserts (the same statement on both versions).
	history := func(name, state, pruneIn string) {
		t.Helper()
		id := ulid.Make()
		ids[name] = id
		if _, err := pool.Exec(ctx, `
			INSERT INTO venturi_job_history (id, kind, state, priority, payload, run_at, runs, failures, max_failures,
			    journal, created_at, finished_at, journal_moved, queue, events, prune_at)
			VALUES ($1, 'ops', $2::venturi_job_state, 0, '{}', now(), 1, 0, 25, '[{"event": "completed", "run": 1}]',
			    now(), now(), 0, 'default', false, now() + $3::interval)`, id[:], state, pruneIn); err != nil {
			t.Fatalf("insert %s: %v", name, err)
		}
	}
	history("completed", "completed", "30 minutes")
	history("dead", "dead", "2 hours")

	if applied, err := venturi.Migrate(ctx, pool); err != nil || !slices.Contains(applied, 24) {
		t.Fatalf("Migrate = %v, %v; want version 24 applied", applied, err)
	}
	lanes := func() map[string]string {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT h.id::text, h.tableoid::regclass::text FROM venturi_job_history h`)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for rows.Next() {
			var id, table string
			if err := rows.Scan(&id, &table); err != nil {
				t.Fatal(err)
			}
			for name, x := range ids {
				if uuidString(x) == id {
					got[name] = table
				}
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return got
	}
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	for name, state := range map[string]venturi.State{"completed": venturi.StateCompleted, "dead": venturi.StateDead} {
		if j := jobByID(t, q, ids[name]); j.State != state {
			t.Errorf("%s after the upgrade: %s, want %s", name, j.State, state)
		}
	}

	// An older worker: its extend names no lane, nor does its insert.
	if _, err := pool.Exec(ctx, `SELECT venturi_history_extend(interval '1 hour', now() + interval '2 hours', 1000)`); err != nil {
		t.Fatal(err)
	}
	history("older", "dead", "90 minutes")
	var perLane []int64
	if err := pool.QueryRow(ctx, `SELECT array_agg(n ORDER BY lane) FROM (SELECT lane, count(*) AS n
		FROM venturi_history_partition GROUP BY lane) x`).Scan(&perLane); err != nil || len(perLane) != 3 {
		t.Fatalf("partitions per lane %v (%v), want the mixed lane's and both new lanes'", perLane, err)
	}

	// This version's finish: the job goes to its state's lane.
	id := ulid.Make()
	ids["finished"] = id
	var token int64
	if err := pool.QueryRow(ctx, `
		INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, runs, lease_token, lease_expires_at, worker_id, attempted_at)
		VALUES ($1, 'ops', 'default', 'running', '{}', now(), 1, nextval('venturi_lease_token_seq'), now() + interval '1 minute', 'w', now())
		RETURNING lease_token`, id[:]).Scan(&token); err != nil {
		t.Fatal(err)
	}
	if got, err := dbsqlc.New().FinishRuns(ctx, pool, dbsqlc.FinishRunsParams{
		Ids: []pgtype.UUID{{Bytes: id, Valid: true}}, Tokens: []int64{token}, States: []string{"completed"},
		DelaysUs: []int64{0}, Failed: []bool{false}, SetCarry: []bool{false}, Carries: []string{""},
		Entries:           []string{`[{"event": "completed", "run": 1}]`},
		RetainCompletedUs: time.Minute.Microseconds(), RetainDeadUs: time.Hour.Microseconds()}); err != nil || len(got) != 1 {
		t.Fatalf("FinishRuns = %v, %v", got, err)
	}
	want := map[string]string{"completed": "venturi_job_history_20", "dead": "venturi_job_history_20",
		"older": "venturi_job_history_dead_20", "finished": "venturi_job_history_completed_20"}
	got := lanes()
	if len(got) != len(want) {
		t.Errorf("history %v, want the jobs %v", got, want)
	}
	for name, table := range got {
		if !strings.HasPrefix(table, want[name]) || (want[name] == "venturi_job_history_20" && strings.Contains(table, "_completed_")) {
			t.Errorf("%s is in %s, want %s…", name, table, want[name])
		}
	}
	if j := jobByID(t, q, ids["older"]); j.State != venturi.StateDead {
		t.Errorf("the older worker's job: %s", j.State)
	}

	// Everything due (a day on): every partition, then the mixed lane, dropped.
	for range 100 {
		var dropped *string
		if err := pool.QueryRow(ctx, `SELECT venturi_history_drop(now() + interval '1 day', 1000)`).Scan(&dropped); err != nil {
			t.Fatal(err)
		}
		if dropped == nil {
			break
		}
	}
	var mixed *string
	if err := pool.QueryRow(ctx, `SELECT to_regclass('venturi_job_history_mixed')::text`).Scan(&mixed); err != nil || mixed != nil {
		t.Fatalf("the mixed lane is still there (%v)", err)
	}
	if n := countRows(t, pool, "venturi_job_history"); n != 0 {
		t.Fatalf("%d jobs left in the history, want none", n)
	}
	if n := countRows(t, pool, "venturi_history_partition"); n != 0 {
		t.Fatalf("%d partitions left, want none", n)
	}
}

// TestUpgradeTo25_PlainCompletionEntriesAreDerived: 025_venturi_derived_completion_entry
// .up.sql derives a plain completion's entry from the history row. A version-24 history
// row (every entry stored) reads the same after the upgrade; this version's finish of a
// plain completion stores none and reads the same entry back.
func TestUpgradeTo25_PlainCompletionEntriesAreDerived(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 24)
	if _, err := pool.Exec(ctx, `SELECT venturi_history_extend(interval '1 hour', now() + interval '3 hours', 1000)`); err != nil {
		t.Fatal(err)
	}
	older := ulid.Make()
	if _, err := pool.Exec(ctx, `
		INSERT INTO venturi_job_history (id, kind, state, priority, payload, run_at, runs, failures, max_failures,
		    worker_id, attempted_at, journal, created_at, finished_at, journal_moved, queue, events, prune_at)
		VALUES ($1, 'ops', 'completed', 0, '{}', now(), 1, 0, 25, 'w24', now(),
		    '[{"event": "completed", "run": 1, "token": 7, "worker": "w24"}]', now(), now(), 0, 'default', false,
		    now() + interval '1 hour')`, older[:]); err != nil {
		t.Fatal(err)
	}
	if applied, err := venturi.Migrate(ctx, pool); err != nil || len(applied) == 0 || applied[0] != 25 {
		t.Fatalf("Migrate = %v, %v; want versions from 25 applied", applied, err)
	}
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	if j := jobByID(t, q, older); len(j.Journal) != 1 || j.Journal[0].Token != 7 || j.Journal[0].Worker != "w24" {
		t.Fatalf("the version-24 job's journal: %+v", j.Journal)
	}

	id := ulid.Make()
	var token int64
	if err := pool.QueryRow(ctx, `
		INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, runs, lease_token, lease_expires_at, worker_id, attempted_at)
		VALUES ($1, 'ops', 'default', 'running', '{}', now(), 1, nextval('venturi_lease_token_seq'), now() + interval '1 minute', 'w25', now())
		RETURNING lease_token`, id[:]).Scan(&token); err != nil {
		t.Fatal(err)
	}
	if got, err := dbsqlc.New().FinishRuns(ctx, pool, dbsqlc.FinishRunsParams{
		Ids: []pgtype.UUID{{Bytes: id, Valid: true}}, Tokens: []int64{token}, States: []string{"completed"},
		DelaysUs: []int64{0}, Failed: []bool{false}, SetCarry: []bool{false}, Carries: []string{""},
		Entries: []string{""}, RanUs: []int64{1500},
		RetainCompletedUs: time.Hour.Microseconds(), RetainDeadUs: time.Hour.Microseconds()}); err != nil || len(got) != 1 {
		t.Fatalf("FinishRuns = %v, %v", got, err)
	}
	j := jobByID(t, q, id)
	if len(j.Journal) != 1 || j.Journal[0].Token != token || j.Journal[0].Worker != "w25" ||
		j.Journal[0].At.Sub(j.Journal[0].StartedAt) != 1500*time.Microsecond || !j.Journal[0].StartedAt.Equal(*j.AttemptedAt) {
		t.Fatalf("the derived entry: %+v (attempted %v)", j.Journal, j.AttemptedAt)
	}
}

// TestUpgradeTo27_WorkflowsBesideEarlierJobs: 026_venturi_blocked_state.up.sql and
// 027_venturi_workflows.up.sql add the blocked state and workflows. A version-25 schema
// with a pending and a finished job upgrades; both read as before, the pending one still
// finishes, and a workflow's member finished the way an older worker finishes it (its
// history row without a workflow) releases what needs it.
func TestUpgradeTo27_WorkflowsBesideEarlierJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 25)
	if _, err := pool.Exec(ctx, `SELECT venturi_history_extend(interval '1 hour', now() + interval '3 hours', 1000)`); err != nil {
		t.Fatal(err)
	}
	pending, finished := ulid.Make(), ulid.Make()
	if _, err := pool.Exec(ctx, `
		INSERT INTO venturi_job (id, kind, queue, state, payload, run_at) VALUES ($1, 'ops', 'default', 'available', '{}', now());
	`, pending[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO venturi_job_history (id, kind, state, priority, payload, run_at, runs, failures, max_failures,
		    worker_id, attempted_at, journal, created_at, finished_at, journal_moved, queue, events, prune_at)
		VALUES ($1, 'ops', 'dead', 0, '{}', now(), 1, 1, 25, 'w25', now(),
		    '[{"event": "failed", "run": 1, "token": 7, "worker": "w25", "note": "boom"}]', now(), now(), 0, 'default', false,
		    now() + interval '1 hour')`, finished[:]); err != nil {
		t.Fatal(err)
	}
	if applied, err := venturi.Migrate(ctx, pool); err != nil || len(applied) < 2 || !slices.Equal(applied[:2], []int{26, 27}) {
		t.Fatalf("Migrate = %v, %v; want versions from 26 and 27 applied", applied, err)
	}
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	if j := jobByID(t, q, finished); j.State != venturi.StateDead || len(j.Journal) != 1 || j.Journal[0].Note != "boom" {
		t.Fatalf("the version-25 finished job: %+v", j)
	}
	// The pending job runs and finishes through this version's FinishRuns.
	finishRuns(t, pool, []ulid.ULID{pending}, []int64{startRun(t, pool, pending)}, []string{"completed"})
	if j := jobByID(t, q, pending); j.State != venturi.StateCompleted {
		t.Fatalf("the version-25 pending job is %s", j.State)
	}

	// A workflow; its root finished as an older worker's FinishRuns does: deleted from
	// venturi_job and inserted in the history without the workflow_id it does not know.
	wf := venturi.NewWorkflow("upgrade")
	a := wf.Add("a", wfStep{Node: "a"})
	wf.Add("b", wfStep{Node: "b"}, venturi.Needs(a))
	res, err := q.EnqueueWorkflow(ctx, wf)
	if err != nil {
		t.Fatal(err)
	}
	root := res.Jobs["a"]
	if _, err := pool.Exec(ctx, `UPDATE venturi_job SET state = 'running', runs = 1,
		lease_token = nextval('venturi_lease_token_seq'), lease_expires_at = now() + interval '1 minute' WHERE id = $1`,
		root[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `WITH d AS (DELETE FROM venturi_job WHERE id = $1 RETURNING *)
		INSERT INTO venturi_job_history (id, kind, state, priority, payload, run_at, runs, failures, max_failures,
		    journal, created_at, finished_at, journal_moved, queue, events, prune_at)
		SELECT id, kind, 'completed', priority, payload, run_at, runs, failures, max_failures, journal, created_at,
		    now(), journal_moved, queue, events, now() + interval '1 hour' FROM d`, root[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `SELECT venturi_workflow_resolve('', 64)`); err != nil {
		t.Fatal(err)
	}
	if j := jobByID(t, q, res.Jobs["b"]); j.State != venturi.StateAvailable {
		t.Fatalf("b is %s after a was finished by an older worker", j.State)
	}
}

// Version 28 settles a member's end in the finish that writes it: an end an older worker
// left in the inbox is settled by a resolver after the upgrade, and a finish that names
// its channel releases what needs the member before it commits, with no resolver.
func TestUpgradeTo28_SettleAtFinish(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 27)
	if _, err := pool.Exec(ctx, `SELECT venturi_history_extend(interval '1 hour', now() + interval '3 hours', 1000)`); err != nil {
		t.Fatal(err)
	}
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	wf := venturi.NewWorkflow("upgrade")
	a := wf.Add("a", wfStep{Node: "a"})
	b := wf.Add("b", wfStep{Node: "b"}, venturi.Needs(a))
	wf.Add("c", wfStep{Node: "c"}, venturi.Needs(b))
	res, err := q.EnqueueWorkflow(ctx, wf)
	if err != nil {
		t.Fatal(err)
	}
	// finish ends node's run in a transaction of its own (naming the jobs' channel when
	// channel is set), as a worker's finish does.
	finish := func(node string, channel bool) {
		t.Helper()
		token := startRun(t, pool, res.Jobs[node])
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if channel {
			if err := dbsqlc.New().SetLocalFinishChannel(ctx, tx, ""); err != nil {
				t.Fatal(err)
			}
		}
		finishRuns(t, tx, []ulid.ULID{res.Jobs[node]}, []int64{token}, []string{"completed"})
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// a ends as a version-27 worker's finish ends it: in the inbox, for a resolver.
	finish("a", false)
	migrateTo(t, pool, 28)
	if j := jobByID(t, q, res.Jobs["b"]); j.State != venturi.StateBlocked {
		t.Fatalf("b is %s before a resolver settled a's end", j.State)
	}
	if _, err := pool.Exec(ctx, `SELECT venturi_workflow_resolve('', 64)`); err != nil {
		t.Fatal(err)
	}
	if j := jobByID(t, q, res.Jobs["b"]); j.State != venturi.StateAvailable {
		t.Fatalf("b is %s after the resolver", j.State)
	}
	// b ends in a finish that names its channel: c is released as it commits.
	finish("b", true)
	if j := jobByID(t, q, res.Jobs["c"]); j.State != venturi.StateAvailable {
		t.Fatalf("c is %s after b's finish committed", j.State)
	}
	var inbox int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM venturi_workflow_inbox`).Scan(&inbox); err != nil || inbox != 0 {
		t.Fatalf("inbox rows left: %d, %v", inbox, err)
	}
}

// Version 29 settles in sets: a fan-out an older worker's finish left in the inbox is
// released by a resolver after the upgrade, two members ended in one finish settle their
// workflow once, and a member that fails cancels the fan-in that needs every member.
func TestUpgradeTo29_SettleInSets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 28)
	extendHistory(t, pool)
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	wf := venturi.NewWorkflow("upgrade")
	root := wf.Add("root", wfStep{Node: "root"})
	members := wf.Group("members")
	for _, m := range []string{"m1", "m2", "m3"} {
		wf.Add(m, wfStep{Node: m}, venturi.Needs(root), venturi.In(members))
	}
	wf.Add("fanin", wfStep{Node: "fanin"}, venturi.Needs(members))
	res, err := q.EnqueueWorkflow(ctx, wf)
	if err != nil {
		t.Fatal(err)
	}
	// finish ends nodes' runs in one FinishRuns, naming the jobs' channel when channel is set.
	finish := func(channel bool, states map[string]string) {
		t.Helper()
		var ids []ulid.ULID
		var tokens []int64
		var ends []string
		for node, state := range states {
			ids, tokens, ends = append(ids, res.Jobs[node]), append(tokens, startRun(t, pool, res.Jobs[node])), append(ends, state)
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if channel {
			if err := dbsqlc.New().SetLocalFinishChannel(ctx, tx, ""); err != nil {
				t.Fatal(err)
			}
		}
		finishRuns(t, tx, ids, tokens, ends)
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	state := func(node string) venturi.State {
		t.Helper()
		return jobByID(t, q, res.Jobs[node]).State
	}
	// The root ends as a version-28 worker's finish without the channel ends it: in the
	// inbox, for a resolver.
	finish(false, map[string]string{"root": "completed"})
	migrateTo(t, pool, 29)
	if _, err := pool.Exec(ctx, `SELECT venturi_workflow_resolve('', 64)`); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"m1", "m2", "m3"} {
		if s := state(m); s != venturi.StateAvailable {
			t.Fatalf("%s is %s after the resolver settled the root's end", m, s)
		}
	}
	finish(true, map[string]string{"m1": "completed", "m2": "completed"})
	if s := state("fanin"); s != venturi.StateBlocked {
		t.Fatalf("fanin is %s with m3 pending", s)
	}
	finish(true, map[string]string{"m3": "dead"})
	j := jobByID(t, q, res.Jobs["fanin"])
	if j.State != venturi.StateCancelled || len(j.Journal) == 0 || j.Journal[len(j.Journal)-1].Event != "upstream_failed" {
		t.Fatalf("fanin after m3 failed: %s, journal %+v", j.State, j.Journal)
	}
	info, err := q.Workflow(ctx, res.ID)
	if err != nil || info.State != venturi.WorkflowFailed {
		t.Fatalf("workflow = %+v, %v; want failed", info, err)
	}
	var inbox int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM venturi_workflow_inbox`).Scan(&inbox); err != nil || inbox != 0 {
		t.Fatalf("inbox rows left: %d, %v", inbox, err)
	}
}

// Version 30 reads the gated claim's rate windows once per claim: a claim after the
// upgrade admits what the windows filled before it left room for, in every partition.
func TestUpgradeTo30_ClaimReadsRateWindowsOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 29)
	if _, err := pool.Exec(ctx, `INSERT INTO venturi_kind (kind, rate_n, rate_period, rate_by_part)
		VALUES ('rated', 3, interval '1 hour', true)`); err != nil {
		t.Fatal(err)
	}
	enqueue := func(parts, each int) {
		t.Helper()
		for p := range parts {
			for range each {
				id := ulid.Make()
				if _, err := pool.Exec(ctx, `INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, part)
					VALUES ($1, 'rated', 'default', 'available', '{}', now(), $2)`, id[:], fmt.Sprint("p", p)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	claim := func() map[string]int {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT j.part FROM venturi_claim_gated('default', ARRAY['rated'], 100, 5000000, 'w', 25, 'ch') c
			JOIN venturi_job j ON j.id = c.id WHERE c.id IS NOT NULL`)
		if err != nil {
			t.Fatal(err)
		}
		parts, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int{}
		for _, p := range parts {
			got[p]++
		}
		return got
	}
	enqueue(10, 5)
	if got := claim(); len(got) != 10 || got["p0"] != 3 || got["p9"] != 3 {
		t.Fatalf("claim at version 29: %v, want 3 in each of 10 partitions", got)
	}
	migrateTo(t, pool, 30)
	if got := claim(); len(got) != 0 {
		t.Fatalf("claim with every window full: %v, want none", got)
	}
	enqueue(12, 1) // p10 and p11 are new partitions with empty windows
	if got := claim(); len(got) != 2 || got["p10"] != 1 || got["p11"] != 1 {
		t.Fatalf("claim after the upgrade: %v, want one each of p10 and p11", got)
	}
}

// TestUpgradeTo31_SQLAPIBesideEarlierJobs: 031_venturi_sql_api.up.sql adds the SQL API
// (version 1). A schema at version 30 with a pending job, a pending dedup job and a kind
// recorded by a version-30 worker upgrades: the earlier jobs read through
// venturi_job_status; a collision from SQL with the earlier dedup job is deferred (the
// kind's row has no merge recorded yet, which is always safe) until a worker of this
// version registers the kind, records its merge and merges it in Go; the earlier jobs and
// a job enqueued from SQL run.
func TestUpgradeTo31_SQLAPIBesideEarlierJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 30)
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	plain := enqueue(t, q, sqlReport{Name: "before"}) // a plain insert, as version 30 has it
	keyed := ulid.Make()
	if _, err := pool.Exec(ctx, `
		INSERT INTO venturi_job (id, kind, queue, state, priority, dedup_key, payload, run_at)
		VALUES ($1, 'sql_counter', 'default', 'scheduled', 0, 'c', '{"key": "c", "n": 1}', now() + interval '1 hour')`,
		pgtype.UUID{Bytes: keyed, Valid: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO venturi_kind (kind) VALUES ('sql_counter')`); err != nil {
		t.Fatal(err)
	}
	if applied, err := venturi.Migrate(ctx, pool); err != nil || len(applied) == 0 || applied[0] != 31 {
		t.Fatalf("Migrate = %v, %v; want 31 applied first", applied, err)
	}
	var version int
	var merge pgtype.Text
	if err := pool.QueryRow(ctx, `SELECT venturi_sql_api_version(), (SELECT merge FROM venturi_kind WHERE kind = 'sql_counter')`).
		Scan(&version, &merge); err != nil || version != 1 || merge.Valid {
		t.Fatalf("after the upgrade: version %d, merge %v, %v", version, merge, err)
	}
	if st, _, _ := sqlStatus(t, pool, keyed); st != "scheduled" {
		t.Fatalf("the earlier dedup job reads %s", st)
	}
	r := sqlEnqueue(t, pool, `SELECT * FROM venturi_enqueue('sql_counter', '{"key": "c", "n": 2}', dedup_key => 'c', delay => '1 hour')`)
	if r.ID != keyed || r.Action != "deferred" {
		t.Fatalf("collision with the earlier job: %+v", r)
	}
	after := sqlEnqueue(t, pool, `SELECT * FROM venturi_enqueue('sql_report', '{"name": "after"}')`)
	app := &sqlApp{}
	sqlWorker(t, pool, app)
	if got := sqlText(t, pool, `SELECT merge FROM venturi_kind WHERE kind = 'sql_counter'`); got != "go" {
		t.Fatalf("recorded merge %q", got)
	}
	j := waitJob(t, q, keyed, "the deferred enqueue merged", func(j *venturi.Job) bool { return len(j.Journal) == 1 })
	var c sqlCounter
	decodePayload(t, j, &c)
	if c.N != 3 || j.Journal[0].Merge != "with" {
		t.Fatalf("merged earlier job: %+v, %+v", c, j.Journal)
	}
	for _, id := range []ulid.ULID{plain.ID, after.ID} {
		if j := waitFinished(t, q, id); j.State != venturi.StateCompleted {
			t.Fatalf("job %s: %s", id, j.State)
		}
	}
}

// Version 32 debounces the SQL API's wake-up across sessions: an enqueue from SQL after the
// upgrade still wakes the workers' channel, with the same payload.
func TestUpgradeTo32_SQLWakeUpAcrossSessions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 31)
	listen := listenOn(t, pool, sqlText(t, pool, `SELECT venturi_wake_channel()`))
	migrateTo(t, pool, 32)
	sqlEnqueue(t, pool, `SELECT * FROM venturi_enqueue('sql_report', delay => '1 minute')`)
	wctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	if n, err := listen.WaitForNotification(wctx); err != nil || n.Payload != "@sql_report" {
		t.Fatalf("notification after the upgrade: %+v, %v", n, err)
	}
}

// Version 33 decides from what the nodes need as it is: a failed node and the node that
// needs its group retried in one settle leave the latter blocked, because the group's
// member that the failure had decided is undecided by the same retry.
func TestUpgradeTo33_RetriesDecideAfterWhatTheyReopen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 32)
	extendHistory(t, pool)
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	wf := venturi.NewWorkflow("retries")
	a := wf.Add("a", wfStep{Node: "a"})
	g := wf.Group("g")
	wf.Add("m", wfStep{Node: "m"}, venturi.Needs(a), venturi.In(g))
	wf.Add("s", wfStep{Node: "s"}, venturi.NeedsEnded(g))
	res, err := q.EnqueueWorkflow(ctx, wf)
	if err != nil {
		t.Fatal(err)
	}
	job := func(node string) pgtype.UUID { return pgtype.UUID{Bytes: res.Jobs[node], Valid: true} }
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	state := func(node string) venturi.State {
		t.Helper()
		return jobByID(t, q, res.Jobs[node]).State
	}
	// a fails: m is decided (something it needs failed), g ends, s is released and completes.
	exec(`UPDATE venturi_job SET state = 'dead', finished_at = now() WHERE id = $1`, job("a"))
	exec(`SELECT venturi_workflow_resolve('', 64)`)
	if st := state("s"); st != venturi.StateAvailable {
		t.Fatalf("s is %s after g ended", st)
	}
	exec(`UPDATE venturi_job SET state = 'completed', finished_at = now() WHERE id = $1`, job("s"))
	exec(`SELECT venturi_workflow_resolve('', 64)`)
	migrateTo(t, pool, 33)
	// a and s retried before one settle: a runs again, m waits for it, so g is open and s waits.
	for _, n := range []string{"a", "s"} {
		exec(`UPDATE venturi_job SET state = 'blocked', finished_at = NULL WHERE id = $1`, job(n))
	}
	exec(`SELECT venturi_workflow_resolve('', 64)`)
	if got := []venturi.State{state("a"), state("m"), state("s")}; !slices.Equal(got,
		[]venturi.State{venturi.StateAvailable, venturi.StateBlocked, venturi.StateBlocked}) {
		t.Fatalf("after the retries a, m, s are %v; want available, blocked, blocked", got)
	}
}

// TestUpgradeTo34_GatedClaimUpdatesByTupleID: 034_venturi_claim_gated_by_tid.up.sql makes
// the gated claim update the rows it admits by tuple ID. On each of its paths (slots
// alone, rates, a slot policy that drops, a kind's concurrency: the admission loop),
// claims before and after the upgrade, with rows given new versions between them, start
// each job once, with the row they return, and leave the rest as the gates say.
func TestUpgradeTo34_GatedClaimUpdatesByTupleID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 33)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`INSERT INTO venturi_kind (kind, rate_n, rate_period) VALUES ('rt', 3, interval '1 hour')`)
	exec(`INSERT INTO venturi_kind (kind, concurrency) VALUES ('kc', 3)`)
	add := func(queue, kind string, n int, slot string, limit, policy int) {
		t.Helper()
		for i := range n {
			id := ulid.Make()
			var sk, sl, sp any
			if slot != "" {
				sk, sl, sp = slot, limit, policy
			}
			exec(`INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, part, slot_key, slot_limit, slot_policy)
				VALUES ($1, $2, $3, 'available', jsonb_build_object('n', $4::int), now(), 'p', $5, $6, $7)`,
				id[:], kind, queue, i, sk, sl, sp)
		}
	}
	add("slots", "sl", 6, "s1", 2, 0)
	add("rated", "rt", 6, "", 0, 0)
	add("drop", "dr", 3, "d1", 1, 2)
	add("kc", "kc", 6, "", 0, 0)
	claim := func(queue, kind string, max int) []string {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT c.id::text, c.payload::text, c.runs
			FROM venturi_claim_gated($1, ARRAY[$2], $3, 5000000, 'w', 25, 'ch') c WHERE c.id IS NOT NULL`, queue, kind, max)
		if err != nil {
			t.Fatal(err)
		}
		type claimed struct {
			id, payload string
			runs        int
		}
		cs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (claimed, error) {
			var c claimed
			return c, r.Scan(&c.id, &c.payload, &c.runs)
		})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, c := range cs {
			var same bool
			if err := pool.QueryRow(ctx, `SELECT payload::text = $2 AND runs = $3 AND state = 'running' FROM venturi_job WHERE id = $1::uuid`,
				c.id, c.payload, c.runs).Scan(&same); err != nil {
				t.Fatal(err)
			}
			if !same {
				t.Errorf("%s: claimed %s differs from its row", queue, c.id)
			}
			ids = append(ids, c.id)
		}
		return ids
	}
	count := func(queue, state string) int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM venturi_job WHERE queue = $1 AND state = $2::venturi_job_state`,
			queue, state).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, c := range []struct{ queue, kind string }{{"slots", "sl"}, {"rated", "rt"}, {"drop", "dr"}, {"kc", "kc"}} {
		if got := claim(c.queue, c.kind, 1); len(got) != 1 {
			t.Fatalf("%s at version 33: claimed %d, want 1", c.queue, len(got))
		}
	}
	migrateTo(t, pool, 34)
	// New versions of every row: a claim by tuple ID must use the versions it locks.
	exec(`UPDATE venturi_job SET priority = priority`)
	got := map[string]int{}
	for _, c := range []struct{ queue, kind string }{{"slots", "sl"}, {"rated", "rt"}, {"drop", "dr"}, {"kc", "kc"}} {
		got[c.queue] = len(claim(c.queue, c.kind, 10))
	}
	want := map[string]int{"slots": 1, "rated": 2, "drop": 0, "kc": 2}
	for q, n := range want {
		if got[q] != n {
			t.Errorf("%s after the upgrade: claimed %d, want %d (all: %v)", q, got[q], n, got)
		}
	}
	for q, n := range map[string]int{"slots": 2, "rated": 3, "drop": 1, "kc": 3} {
		if r := count(q, "running"); r != n {
			t.Errorf("%s: %d running, want %d", q, r, n)
		}
	}
	if c := count("drop", "cancelled"); c != 2 {
		t.Errorf("drop: %d cancelled, want 2 (dropped: the slot is full)", c)
	}
	var twice int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM venturi_job WHERE runs > 1`).Scan(&twice); err != nil || twice != 0 {
		t.Fatalf("jobs started twice: %d (%v)", twice, err)
	}
}

// TestUpgradeTo35_BatchesLockKeysInOneOrder: 035_venturi_enqueue_many_lock_order.up.sql
// makes venturi_enqueue_many take its dedup keys' locks in one order, the order
// Queue.EnqueueMany takes them in. Pairs of batches naming two keys in opposite orders,
// from SQL and from Go, run at once: at version 34 SQL pairs may deadlock (counted, not
// required: it depends on timing); from 35 none does, whatever the mix.
func TestUpgradeTo35_BatchesLockKeysInOneOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 34)
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	sqlBatch := func(keys ...string) error {
		var jobs []map[string]any
		for _, k := range keys {
			jobs = append(jobs, map[string]any{"kind": "sql_report", "dedup_key": k, "payload": map[string]string{"name": k}})
		}
		_, err := pool.Exec(ctx, `SELECT count(*) FROM venturi_enqueue_many($1::jsonb)`, jobs)
		return err
	}
	goBatch := func(keys ...string) error {
		var tasks []venturi.Task
		for _, k := range keys {
			tasks = append(tasks, sqlReport{Name: k, Key: k})
		}
		_, err := q.EnqueueMany(ctx, tasks)
		return err
	}
	// pairs runs n pairs of batches over fresh keys, a with [x, y] and b with [y, x] at
	// once, and counts the deadlocks.
	pairs := func(round string, n int, a, b func(...string) error) (deadlocks int) {
		t.Helper()
		for i := range n {
			x, y := fmt.Sprintf("%s-%d-x", round, i), fmt.Sprintf("%s-%d-y", round, i)
			errs := make(chan error, 2)
			go func() { errs <- a(x, y) }()
			go func() { errs <- b(y, x) }()
			for range 2 {
				switch err := <-errs; {
				case err == nil:
				case strings.Contains(err.Error(), "40P01"):
					deadlocks++
				default:
					t.Fatalf("%s: %v", round, err)
				}
			}
		}
		return deadlocks
	}
	t.Logf("version 34, SQL batches: %d deadlocks in 100 pairs", pairs("v34", 100, sqlBatch, sqlBatch))
	migrateTo(t, pool, 35)
	for _, c := range []struct {
		name string
		a, b func(...string) error
	}{{"sql", sqlBatch, sqlBatch}, {"go", goBatch, goBatch}, {"mixed", sqlBatch, goBatch}} {
		if d := pairs(c.name, 100, c.a, c.b); d != 0 {
			t.Errorf("%s batches at version 35: %d deadlocks in 100 pairs", c.name, d)
		}
	}
	var dup int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT dedup_key FROM venturi_job WHERE kind = 'sql_report'
		AND state IN ('available', 'scheduled') GROUP BY dedup_key HAVING count(*) > 1) d`).Scan(&dup); err != nil || dup != 0 {
		t.Fatalf("keys with two pending jobs: %d (%v)", dup, err)
	}
}

// evtGated records events and belongs to a partition, so a gated claim runs it.
type evtGated struct {
	N int `json:"n"`
}

func (evtGated) Kind() string       { return "evt_gated" }
func (evtGated) StreamEvents() bool { return true }
func (g evtGated) Partition() string {
	return fmt.Sprint("p", g.N%2)
}
func (evtGated) Handle(context.Context, *venturi.Run[struct{}], struct{}) (venturi.Outcome, error) {
	return venturi.Completed(), nil
}

// evtPlain records events and is claimed by the plain claim.
type evtPlain struct {
	N int `json:"n"`
}

func (evtPlain) Kind() string       { return "evt_plain" }
func (evtPlain) StreamEvents() bool { return true }
func (evtPlain) Handle(context.Context, *venturi.Run[struct{}], struct{}) (venturi.Outcome, error) {
	return venturi.Completed(), nil
}

// TestUpgradeTo36_ClaimsWriteStartedEvents: 036_venturi_claims_write_started_events.up.sql
// makes the claims write the started events (venturi_event_write skips the move to
// running when the claim's transaction says so). Jobs that record events, enqueued at
// version 35 and run at 36 by the plain and the gated claim, and jobs that do not: each
// evented run has exactly one started event, with its run, worker and start, between its
// enqueued and completed events; the others have none. A claim by an older worker (a
// plain UPDATE that says nothing) still gets its started event from the trigger, once.
func TestUpgradeTo36_ClaimsWriteStartedEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 35)
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	var ids []ulid.ULID
	for i := range 6 {
		ids = append(ids, enqueue(t, q, evtPlain{N: i}).ID, enqueue(t, q, evtGated{N: i}).ID)
	}
	quiet := enqueue(t, q, plainEvt{})
	old := enqueue(t, q, evtPlain{N: 99}).ID
	migrateTo(t, pool, 36)
	// An older worker's claim: its transaction does not say the claim writes the started
	// events, so the trigger writes it, once.
	if _, err := pool.Exec(ctx, `UPDATE venturi_job SET state = 'running', runs = runs + 1,
		lease_token = nextval('venturi_lease_token_seq'), lease_expires_at = now() + interval '1 hour',
		worker_id = 'older', attempted_at = now() WHERE id = $1`, old[:]); err != nil {
		t.Fatal(err)
	}
	w := newWorker(t, pool, struct{}{}, fastConfig())
	venturi.MustRegister[evtPlain](w)
	venturi.MustRegister[evtGated](w)
	venturi.MustRegister[plainEvt](w)
	startWorker(t, w)
	for _, id := range ids {
		waitState(t, q, venturi.Result{ID: id}, venturi.StateCompleted)
	}
	waitState(t, q, quiet, venturi.StateCompleted)
	rows, err := pool.Query(ctx, `SELECT job_id, string_agg(event, ' ' ORDER BY xid, seq),
		       bool_and(event <> 'started' OR (run = 1 AND worker = CASE WHEN job_id = $2 THEN 'older' ELSE $1 END
		                                         AND started_at IS NOT NULL AND state = 'running'))
		FROM venturi_event GROUP BY job_id`, w.ID(), old[:])
	if err != nil {
		t.Fatal(err)
	}
	got := map[ulid.ULID]string{}
	for rows.Next() {
		var id pgtype.UUID
		var seq string
		var ok bool
		if err := rows.Scan(&id, &seq, &ok); err != nil {
			t.Fatal(err)
		}
		if !ok {
			t.Errorf("job %s: a started event without its run, worker or start", ulid.ULID(id.Bytes))
		}
		got[ulid.ULID(id.Bytes)] = seq
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if got[id] != "enqueued started completed" {
			t.Errorf("job %s: events %q, want \"enqueued started completed\"", id, got[id])
		}
	}
	if got[old] != "enqueued started" {
		t.Errorf("the job an older worker claimed: events %q, want \"enqueued started\"", got[old])
	}
	if s, ok := got[quiet.ID]; ok {
		t.Errorf("a job that records no events has %q", s)
	}
}

// TestUpgradeTo37_FinishRecordsMembersOnce: 037_venturi_finish_writes_member_inbox.up.sql
// has a worker's finish write its workflow members' inbox rows in one insert, and
// venturi_workflow_delete skip them. A workflow of a root, 20 members that need it and a
// fan-in, run by a worker at version 37: every member's end is recorded in the inbox once,
// and the workflow succeeds.
func TestUpgradeTo37_FinishRecordsMembersOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 37)
	if _, err := pool.Exec(ctx, `
		CREATE TABLE inbox_seen (job_id uuid, to_state text);
		CREATE FUNCTION inbox_seen() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO inbox_seen VALUES (NEW.job_id, NEW.to_state); RETURN NULL; END $$;
		CREATE TRIGGER inbox_seen AFTER INSERT ON venturi_workflow_inbox FOR EACH ROW EXECUTE FUNCTION inbox_seen();
		SELECT venturi_history_extend(1::smallint, interval '1 hour', now() + interval '3 hours', 1000),
		       venturi_history_extend(2::smallint, interval '1 hour', now() + interval '3 hours', 1000)`); err != nil {
		t.Fatal(err)
	}
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	startWorkerFor[wfStep](t, pool, &wfLog{fail: map[string]bool{}}, fastConfig())
	wf := venturi.NewWorkflow("inbox once")
	root := wf.Add("root", wfStep{Node: "root"})
	g := wf.Group("members")
	for i := range 20 {
		wf.Add(fmt.Sprint("m", i), wfStep{Node: fmt.Sprint("m", i)}, venturi.Needs(root), venturi.In(g))
	}
	wf.Add("fanin", wfStep{Node: "fanin"}, venturi.Needs(g))
	res, err := q.EnqueueWorkflow(ctx, wf)
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	info, err := q.AwaitWorkflow(actx, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.State != venturi.WorkflowSucceeded {
		t.Fatalf("workflow %s, want succeeded", info.State)
	}
	var recorded, twice int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE n = 1), count(*) FILTER (WHERE n > 1)
		FROM (SELECT job_id, count(*) AS n FROM inbox_seen WHERE to_state = 'completed' GROUP BY job_id) s`).Scan(&recorded, &twice); err != nil {
		t.Fatal(err)
	}
	if recorded != 22 || twice != 0 {
		t.Fatalf("ends recorded once: %d, more than once: %d; want 22 and 0", recorded, twice)
	}
}

// TestUpgradeTo38_RetryRevivesInOrder: 038_venturi_workflow_revive_in_order.up.sql decides
// a retry's revivals in order. A fail-fast workflow a → b (Needs a) → c (NeedsEnded b)
// that failed at version 37 (a dead, b upstream-failed, c cancelled), retried at 38: c
// waits for b, b for a; then all three run, in order.
func TestUpgradeTo38_RetryRevivesInOrder(t *testing.T) {
	t.Parallel()
	retryRevivesInOrder(t, 37, 38)
}

// TestUpgradeTo39_RevivedThenDecided: 039_venturi_workflow_revive_then_decide.up.sql
// revives a node to run as waiting and decides it in the next pass. The workflow of
// TestUpgradeTo38_RetryRevivesInOrder, failed at version 38 and retried at 39, keeps its
// order. (The case 39 fixes, revivals to run that depend on each other, is in the engine
// test against the model: its RetryWorkflow step, seeds 262, 432, 601 and 894.)
func TestUpgradeTo39_RevivedThenDecided(t *testing.T) {
	t.Parallel()
	retryRevivesInOrder(t, 38, 39)
}

// retryRevivesInOrder fails a fail-fast workflow a → b (Needs a) → c (NeedsEnded b) at
// version from, retries it at version to, and checks that b and c wait and then all three
// run in order.
func retryRevivesInOrder(t *testing.T, from, to int) {
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, from)
	extendHistory(t, pool)
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	log := &wfLog{fail: map[string]bool{"a": true}}
	w := startWorkerFor[wfStep](t, pool, log, fastConfig())
	wf := venturi.NewWorkflow("revivals", venturi.FailFast())
	a := wf.Add("a", wfStep{Node: "a"})
	b := wf.Add("b", wfStep{Node: "b"}, venturi.Needs(a))
	wf.Add("c", wfStep{Node: "c"}, venturi.NeedsEnded(b))
	res, err := q.EnqueueWorkflow(ctx, wf)
	if err != nil {
		t.Fatal(err)
	}
	waitWorkflow(t, q, res.ID, venturi.WorkflowFailed)
	stopWorker(t, w)
	migrateTo(t, pool, to)
	if _, err := q.RetryWorkflow(ctx, res.ID, "fixed"); err != nil {
		t.Fatal(err)
	}
	for node, want := range map[string]venturi.State{"a": venturi.StateAvailable, "b": venturi.StateBlocked, "c": venturi.StateBlocked} {
		if j := jobByID(t, q, res.Jobs[node]); j.State != want {
			t.Errorf("%s is %s after the retry, want %s", node, j.State, want)
		}
	}
	log.mu.Lock()
	log.fail["a"], log.started = false, nil
	log.mu.Unlock()
	startWorkerFor[wfStep](t, pool, log, fastConfig())
	waitWorkflow(t, q, res.ID, venturi.WorkflowSucceeded)
	log.mu.Lock()
	defer log.mu.Unlock()
	if got := strings.Join(log.started, " "); got != "a b c" {
		t.Fatalf("started %q after the retry, want \"a b c\"", got)
	}
}

// TestUpgradeTo40_NodesCountedByFlag: 040_venturi_workflow_node_fresh.up.sql marks the
// nodes no settle has counted by a column of their own, so no index of
// venturi_workflow_node names a column a counted node's updates change. A node an older
// worker inserted before the upgrade and no settle counted yet is found and counted by the
// first settle after it; a workflow enqueued before the upgrade runs to its end after it.
func TestUpgradeTo40_NodesCountedByFlag(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 39)
	extendHistory(t, pool)
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	wf := venturi.NewWorkflow("counted by flag")
	root := wf.Add("root", wfStep{Node: "root"})
	g := wf.Group("members")
	for i := range 5 {
		wf.Add(fmt.Sprint("m", i), wfStep{Node: fmt.Sprint("m", i)}, venturi.Needs(root), venturi.In(g))
	}
	wf.Add("fanin", wfStep{Node: "fanin"}, venturi.Needs(g))
	res, err := q.EnqueueWorkflow(ctx, wf)
	if err != nil {
		t.Fatal(err)
	}
	id := pgtype.UUID{Bytes: res.ID, Valid: true}
	// A node written as an older worker's enqueue writes it, before its settle.
	if _, err := pool.Exec(ctx, `INSERT INTO venturi_workflow_node (workflow_id, node, sealed) VALUES ($1, 'late', true)`, id); err != nil {
		t.Fatal(err)
	}
	migrateTo(t, pool, 40)
	fresh := func() string {
		t.Helper()
		var nodes string
		if err := pool.QueryRow(ctx, `SELECT COALESCE(string_agg(node, ' ' ORDER BY node), '')
			FROM venturi_workflow_node WHERE workflow_id = $1 AND fresh`, id).Scan(&nodes); err != nil {
			t.Fatal(err)
		}
		return nodes
	}
	if got := fresh(); got != "late" {
		t.Fatalf("nodes marked fresh after the upgrade: %q, want \"late\"", got)
	}
	if _, err := pool.Exec(ctx, `SELECT venturi_workflow_settle(ARRAY[$1::uuid], '')`, id); err != nil {
		t.Fatal(err)
	}
	if got := fresh(); got != "" {
		t.Fatalf("nodes marked fresh after a settle: %q", got)
	}
	var uncounted, nodes int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM venturi_workflow_node WHERE workflow_id = $1 AND contrib IS NULL),
		(SELECT nodes FROM venturi_workflow WHERE id = $1)`, id).Scan(&uncounted, &nodes); err != nil {
		t.Fatal(err)
	}
	if uncounted != 0 || nodes != 9 {
		t.Fatalf("after the settle: %d nodes without a contribution, the workflow counts %d nodes; want 0 and 9", uncounted, nodes)
	}
	rows, err := pool.Query(ctx, `SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = 'venturi_workflow_node'::regclass`)
	if err != nil {
		t.Fatal(err)
	}
	defs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, def := range defs {
		for _, col := range []string{"contrib", "waiting", "holds", "released", "own", "outcome", "ended_at"} {
			if strings.Contains(def, col) {
				t.Errorf("index %q names %s, which a counted node's updates change", def, col)
			}
		}
	}
	startWorkerFor[wfStep](t, pool, &wfLog{fail: map[string]bool{}}, fastConfig())
	waitWorkflow(t, q, res.ID, venturi.WorkflowSucceeded)
}

// TestUpgradeTo41_NextDueByKind: 041_venturi_next_due_and_unplaced_indexes.up.sql finds a
// worker's next due job by queue and kind. Jobs scheduled at version 40 in two queues and
// of three kinds: after the upgrade NextDue answers for exactly the queue and kinds it is
// given (an older worker's query, run against the new indexes, answers the same), and the
// partial index of unplaced gated jobs holds none.
func TestUpgradeTo41_NextDueByKind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 40)
	// kind, queue, due in (minutes), state
	for _, j := range []struct {
		kind, queue string
		in          int
		state       string
	}{
		{"a", "q1", 60, "scheduled"}, {"b", "q1", 10, "scheduled"}, {"a", "q2", 5, "scheduled"}, {"b", "q1", 3, "waiting"},
	} {
		if _, err := pool.Exec(ctx, `INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, lease_token, worker_id, attempted_at)
			VALUES (gen_random_uuid(), $1, $2, $3::venturi_job_state, '{}', now() + $4 * interval '1 minute',
			        CASE WHEN $3 = 'waiting' THEN 1 END, CASE WHEN $3 = 'waiting' THEN 'w' END, CASE WHEN $3 = 'waiting' THEN now() END)`,
			j.kind, j.queue, j.state, j.in); err != nil {
			t.Fatal(err)
		}
	}
	migrateTo(t, pool, 41)
	q := dbsqlc.New()
	for _, c := range []struct {
		queue string
		kinds []string
		min   int // minutes; -1: none
	}{
		{"q1", []string{"a"}, 60}, {"q1", []string{"a", "b"}, 3}, {"q1", []string{"c"}, -1}, {"q2", []string{"a", "b"}, 5}, {"q3", []string{"a"}, -1}, {"q1", nil, -1},
	} {
		r, err := q.NextDue(ctx, pool, dbsqlc.NextDueParams{Queue: c.queue, Due: true, Kinds: c.kinds})
		if err != nil {
			t.Fatal(err)
		}
		if c.min < 0 {
			if r.DueInUs != -1 {
				t.Errorf("NextDue(%s, %v) = %d µs, want -1 (none)", c.queue, c.kinds, r.DueInUs)
			}
			continue
		}
		want := int64(c.min) * 60e6
		if r.DueInUs > want || r.DueInUs < want-60e6 {
			t.Errorf("NextDue(%s, %v) = %d µs, want about %d minutes", c.queue, c.kinds, r.DueInUs, c.min)
		}
	}
	var unplaced int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM venturi_job WHERE state = 'available' AND part IS NOT NULL AND vt IS NULL`).Scan(&unplaced); err != nil || unplaced != 0 {
		t.Fatalf("unplaced gated jobs: %d, %v", unplaced, err)
	}
	if n, err := q.PlaceUnplaced(ctx, pool, 10); err != nil || n != 0 {
		t.Fatalf("PlaceUnplaced = %d, %v; want 0", n, err)
	}
}

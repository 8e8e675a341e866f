package venturi_test

// Tests of the SQL API (migration *_venturi_sql_api, the README's "Enqueue from SQL"): jobs enqueued with
// venturi_enqueue and venturi_enqueue_many are the rows a Go enqueue writes, run by Go
// workers; bad input is refused field by field; dedup collisions apply the kind's merge
// (Keep and Replace rules in SQL, a Go Merge method deferred to a Go process), also with
// Go producers enqueueing the same keys at once; triggers enqueue in their transaction;
// cancel, signal and status work from SQL.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/internal/testdb"
)

// ---- task types ----------------------------------------------------------------------------

// sqlApp is the state of the SQL API tests' workers: what their handlers ran.
type sqlApp struct {
	mu   sync.Mutex
	ran  []string      // sqlReport names and sqlReceipt orders, in run order
	runs chan struct{} // a sqlBlocker's run started
}

func (a *sqlApp) record(s string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ran = append(a.ran, s)
}

func (a *sqlApp) ranList() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.ran...)
}

// sqlReport has a dedup key and no merge method: a collision replaces it, in SQL too.
type sqlReport struct {
	Name string `json:"name"`
	Key  string `json:"key,omitempty"`
}

func (sqlReport) Kind() string                 { return "sql_report" }
func (r sqlReport) DedupKey() venturi.DedupKey { return venturi.DedupKey(r.Key) }

// sqlCounter merges in Go: the counts add up (With), which SQL cannot do.
type sqlCounter struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

func (sqlCounter) Kind() string                 { return "sql_counter" }
func (c sqlCounter) DedupKey() venturi.DedupKey { return venturi.DedupKey(c.Key) }
func (c sqlCounter) Merge(existing venturi.Pending[sqlCounter, struct{}]) venturi.Merge[sqlCounter, struct{}] {
	return existing.With(sqlCounter{Key: c.Key, N: existing.Payload.N + c.N}, existing.Carry)
}

// sqlKept keeps the pending job (a MergeRule, which SQL applies).
type sqlKept struct {
	Key string `json:"key"`
	V   int    `json:"v"`
}

func (sqlKept) Kind() string                 { return "sql_kept" }
func (k sqlKept) DedupKey() venturi.DedupKey { return venturi.DedupKey(k.Key) }
func (sqlKept) MergeRule() venturi.MergeRule { return venturi.KeepPending() }

// sqlDebounced replaces with a debounce (a MergeRule with a due-time rule).
type sqlDebounced struct {
	Key string `json:"key"`
	V   int    `json:"v"`
}

func (sqlDebounced) Kind() string                 { return "sql_debounced" }
func (d sqlDebounced) DedupKey() venturi.DedupKey { return venturi.DedupKey(d.Key) }
func (sqlDebounced) MergeRule() venturi.MergeRule {
	return venturi.ReplacePending().Debounce(time.Hour, 90*time.Minute)
}

// sqlWaiter waits for the signal "go" and completes with its payload as the note.
type sqlWaiter struct {
	ID string `json:"id"`
}

func (sqlWaiter) Kind() string { return "sql_waiter" }

// sqlBlocker runs until it is asked to stop.
type sqlBlocker struct{}

func (sqlBlocker) Kind() string { return "sql_blocker" }

// sqlFlow names what a SQL producer names explicitly: queue, priority, partition, slot.
type sqlFlow struct {
	Host string `json:"host"`
}

func (sqlFlow) Kind() string               { return "sql_flow" }
func (sqlFlow) Queue() string              { return "crawl" }
func (sqlFlow) Priority() venturi.Priority { return venturi.PriorityHigh }
func (f sqlFlow) Partition() string        { return f.Host }
func (f sqlFlow) Slot() venturi.Slot {
	return venturi.Slot{Key: "host:" + f.Host, Limit: 2, Policy: venturi.SlotReplace}
}

// sqlLimited is a kind with limits: its jobs are gated whoever enqueues them.
type sqlLimited struct{}

func (sqlLimited) Kind() string           { return "sql_limited" }
func (sqlLimited) Limits() venturi.Limits { return venturi.Limits{Concurrency: 3} }

// sqlWorker starts a worker that registers every task type of these tests, so that their
// kinds and merge rules are recorded.
func sqlWorker(t *testing.T, pool *pgxpool.Pool, app *sqlApp) *venturi.Worker[*sqlApp] {
	t.Helper()
	w := newWorker(t, pool, app, fastConfig())
	done := func(ctx context.Context, name string, app *sqlApp) (venturi.Outcome, error) {
		app.record(name)
		return venturi.CompletedWith("ran " + name), nil
	}
	venturi.MustRegisterFunc(w, func(ctx context.Context, r sqlReport, _ *venturi.Run[struct{}], app *sqlApp) (venturi.Outcome, error) {
		return done(ctx, r.Name, app)
	})
	venturi.MustRegisterFunc(w, func(ctx context.Context, c sqlCounter, _ *venturi.Run[struct{}], app *sqlApp) (venturi.Outcome, error) {
		return done(ctx, fmt.Sprint(c.N), app)
	})
	venturi.MustRegisterFunc(w, func(ctx context.Context, k sqlKept, _ *venturi.Run[struct{}], app *sqlApp) (venturi.Outcome, error) {
		return done(ctx, fmt.Sprint(k.V), app)
	})
	venturi.MustRegisterFunc(w, func(ctx context.Context, d sqlDebounced, _ *venturi.Run[struct{}], app *sqlApp) (venturi.Outcome, error) {
		return done(ctx, fmt.Sprint(d.V), app)
	})
	venturi.MustRegisterFunc(w, func(ctx context.Context, s sqlWaiter, run *venturi.Run[struct{}], app *sqlApp) (venturi.Outcome, error) {
		if _, waited := run.Waited(); !waited {
			return venturi.WaitForSignal(time.Hour, "go"), nil
		}
		sigs, err := run.Signals(ctx, "go")
		if err != nil || len(sigs) == 0 {
			return venturi.Outcome{}, fmt.Errorf("signals: %v (%d)", err, len(sigs))
		}
		return venturi.CompletedWith("signal " + string(sigs[0].Payload)), nil
	})
	venturi.MustRegisterFunc(w, func(ctx context.Context, _ sqlBlocker, run *venturi.Run[struct{}], app *sqlApp) (venturi.Outcome, error) {
		app.runs <- struct{}{}
		<-run.Shutdown()
		return venturi.PauseIn(0), nil
	})
	venturi.MustRegisterFunc(w, func(ctx context.Context, _ sqlFlow, _ *venturi.Run[struct{}], app *sqlApp) (venturi.Outcome, error) {
		return venturi.Completed(), nil
	})
	venturi.MustRegisterFunc(w, func(ctx context.Context, _ sqlLimited, _ *venturi.Run[struct{}], app *sqlApp) (venturi.Outcome, error) {
		return venturi.Completed(), nil
	})
	startWorker(t, w)
	return w
}

// ---- helpers -------------------------------------------------------------------------------

// sqlEnqueued is a row of venturi_enqueue or venturi_enqueue_many.
type sqlEnqueued struct {
	ID     ulid.ULID
	Action string
}

// sqlEnqueue runs a SELECT of venturi_enqueue's columns (id, action) through db and fails
// the test when it is refused.
func sqlEnqueue(t *testing.T, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, query string, args ...any) sqlEnqueued {
	t.Helper()
	var u pgtype.UUID
	var r sqlEnqueued
	if err := db.QueryRow(context.Background(), query, args...).Scan(&u, &r.Action); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	r.ID = ulid.ULID(u.Bytes)
	return r
}

// sqlStatus reads venturi_job_status(id): its state, last event and last note.
func sqlStatus(t *testing.T, pool *pgxpool.Pool, id ulid.ULID) (state, event, note string) {
	t.Helper()
	var ev, nt pgtype.Text
	if err := pool.QueryRow(context.Background(), `SELECT state, last_event, last_note FROM venturi_job_status($1)`,
		pgtype.UUID{Bytes: id, Valid: true}).Scan(&state, &ev, &nt); err != nil {
		t.Fatalf("venturi_job_status(%s): %v", id, err)
	}
	return state, ev.String, nt.String
}

// sqlText runs a query that returns one text value.
func sqlText(t *testing.T, pool *pgxpool.Pool, query string, args ...any) string {
	t.Helper()
	var s string
	if err := pool.QueryRow(context.Background(), query, args...).Scan(&s); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return s
}

// deferredCount counts the enqueues from SQL that wait for a Go merge.
func deferredCount(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM venturi_deferred_merge`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func uuidArg(id ulid.ULID) pgtype.UUID { return pgtype.UUID{Bytes: id, Valid: true} }

// ---- enqueue ---------------------------------------------------------------------------------

// TestSQLEnqueueRunsOnGoWorkers: jobs enqueued from SQL, one at a time and many at once,
// are run by a Go worker that registered their kind, with their payloads; the many form
// returns one row per job, in order, with increasing IDs.
func TestSQLEnqueueRunsOnGoWorkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	app := &sqlApp{}
	sqlWorker(t, pool, app)
	one := sqlEnqueue(t, pool, `SELECT * FROM venturi_enqueue('sql_report', '{"name": "one"}')`)
	if one.Action != "inserted" {
		t.Fatalf("venturi_enqueue: %+v", one)
	}
	rows, err := pool.Query(ctx, `SELECT ord, id, action FROM venturi_enqueue_many($1)`,
		`[{"kind": "sql_report", "payload": {"name": "two"}},
		  {"kind": "sql_report", "payload": {"name": "three"}, "priority": 5},
		  {"kind": "sql_report", "payload": {"name": "four"}, "delay": 0.05, "meta": {"tenant": "t1"}}]`)
	if err != nil {
		t.Fatal(err)
	}
	var many []sqlEnqueued
	for rows.Next() {
		var ord int
		var u pgtype.UUID
		var r sqlEnqueued
		if err := rows.Scan(&ord, &u, &r.Action); err != nil {
			t.Fatal(err)
		}
		if ord != len(many) || r.Action != "inserted" {
			t.Fatalf("row %d: ord %d, action %s", len(many), ord, r.Action)
		}
		r.ID = ulid.ULID(u.Bytes)
		many = append(many, r)
	}
	if rows.Err() != nil || len(many) != 3 {
		t.Fatalf("venturi_enqueue_many: %d rows, %v", len(many), rows.Err())
	}
	for i := 1; i < len(many); i++ {
		if many[i].ID.Compare(many[i-1].ID) <= 0 {
			t.Fatalf("IDs not increasing: %s then %s", many[i-1].ID, many[i].ID)
		}
	}
	for _, r := range append([]sqlEnqueued{one}, many...) {
		j := waitFinished(t, q, r.ID)
		if j.State != venturi.StateCompleted {
			t.Fatalf("job %s: %s, %+v", r.ID, j.State, j.Journal)
		}
	}
	if j := jobByID(t, q, many[2].ID); j.Meta["tenant"] != "t1" {
		t.Fatalf("meta = %v", j.Meta)
	}
	got := strings.Join(app.ranList(), ",")
	for _, name := range []string{"one", "two", "three", "four"} {
		if !strings.Contains(got, name) {
			t.Fatalf("ran %s, want %s among them", got, name)
		}
	}
}

// TestSQLEnqueueWritesTheRowsGoWrites: what a SQL producer names (queue, priority,
// partition, slot, metadata, events, a delay) gives the row a Go enqueue of the task
// writes: the same state, due time, gating and virtual time, slot, metadata and event
// stream opt-in; a kind with limits is gated from SQL too.
func TestSQLEnqueueWritesTheRowsGoWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	sqlWorker(t, pool, &sqlApp{}) // records sql_limited's limits; serves the default queue only
	goRes := enqueue(t, q, sqlFlow{Host: "a.example"}, venturi.WithMeta(venturi.Meta{"t": "1"}), venturi.WithEvents())
	sqlRes := sqlEnqueue(t, pool, `SELECT * FROM venturi_enqueue('sql_flow', '{"host": "a.example"}', queue => 'crawl',
		priority => 10, partition => 'a.example', slot_key => 'host:a.example', slot_limit => 2, slot_policy => 'replace',
		meta => '{"t": "1"}', events => true)`)
	goLater := enqueue(t, q, sqlFlow{Host: "b.example"}, venturi.After(time.Hour))
	sqlLater := sqlEnqueue(t, pool, `SELECT * FROM venturi_enqueue('sql_flow', '{"host": "b.example"}', queue => 'crawl',
		priority => 10, partition => 'b.example', slot_key => 'host:b.example', slot_limit => 2, slot_policy => 'replace',
		delay => '1 hour')`)
	goLimited := enqueue(t, q, sqlLimited{}, venturi.OnQueue("elsewhere"))
	sqlLimitedRes := sqlEnqueue(t, pool, `SELECT * FROM venturi_enqueue('sql_limited', queue => 'elsewhere')`)
	row := func(id ulid.ULID) string {
		t.Helper()
		var s string
		if err := pool.QueryRow(ctx, `SELECT concat_ws('|', state, queue, priority, part, slot_key, slot_limit, slot_policy,
				events, meta, vt IS NOT NULL, run_at - created_at, payload,
				(SELECT count(*) FROM venturi_event e WHERE e.job_id = j.id))
			FROM venturi_job j WHERE id = $1`, uuidArg(id)).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, pair := range [][2]ulid.ULID{{goRes.ID, sqlRes.ID}, {goLater.ID, sqlLater.ID}, {goLimited.ID, sqlLimitedRes.ID}} {
		if g, s := row(pair[0]), row(pair[1]); g != s {
			t.Errorf("rows differ:\n  Go:  %s\n  SQL: %s", g, s)
		}
	}
	if s := row(sqlRes.ID); !strings.HasPrefix(s, "available|crawl|10|a.example|host:a.example|2|1|t|") {
		t.Errorf("SQL row = %s", s)
	}
	if s := row(sqlLimitedRes.ID); !strings.HasPrefix(s, "available|elsewhere|0||f|t|") {
		t.Errorf("limited kind's SQL row = %s, want gated (part '') with a virtual time", s)
	}
	// A Replace from SQL that moves a gated job to another partition places it there
	// (venturi_job_place), as MergeInto does.
	p1 := sqlEnqueue(t, pool, `SELECT * FROM venturi_enqueue('sql_limited', queue => 'elsewhere', dedup_key => 'x', partition => 'p1')`)
	sqlEnqueue(t, pool, `SELECT * FROM venturi_enqueue('sql_limited', queue => 'elsewhere', dedup_key => 'x', partition => 'p1')`)
	p2 := sqlEnqueue(t, pool, `SELECT * FROM venturi_enqueue('sql_limited', queue => 'elsewhere', dedup_key => 'x', partition => 'p2')`)
	var part string
	var vt, front int64
	if err := pool.QueryRow(ctx, `SELECT part, vt, (SELECT min(vt) FROM venturi_job WHERE queue = 'elsewhere' AND state = 'available')
		FROM venturi_job WHERE id = $1`, uuidArg(p1.ID)).Scan(&part, &vt, &front); err != nil {
		t.Fatal(err)
	}
	if p2.Action != "replaced" || p2.ID != p1.ID || part != "p2" || vt != front {
		t.Errorf("replaced into another partition: %+v, part %q, vt %d (front %d)", p2, part, vt, front)
	}
}

// listenOn opens a connection of its own to pool's database that LISTENs on channels;
// it is closed when the test ends.
func listenOn(t *testing.T, pool *pgxpool.Pool, channels ...string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	for _, ch := range channels {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			t.Fatal(err)
		}
	}
	return conn
}

// TestSQLEnqueueWakesWorkersAsGoDoes: an enqueue from SQL sends the wake-up NOTIFY a Go
// enqueue sends on the workers' channel (the kind for a job due now, "@" and the kind for
// a delayed one), delivered at commit; a deferred one wakes the workers on the merge
// channel.
func TestSQLEnqueueWakesWorkersAsGoDoes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := newQueue(t)
	mergeCh := sqlText(t, pool, `SELECT venturi_merge_channel()`)
	wakeCh := "venturi_insert." + schemaOf(pool) // as queue.go names it
	listen := listenOn(t, pool, wakeCh, mergeCh)
	if got := sqlText(t, pool, `SELECT venturi_wake_channel()`); got != wakeCh {
		t.Fatalf("venturi_wake_channel() = %q, want %q", got, wakeCh)
	}
	next := func() string {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, within)
		defer cancel()
		n, err := listen.WaitForNotification(wctx)
		if err != nil {
			t.Fatalf("no notification: %v", err)
		}
		return n.Channel + " " + n.Payload
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	sqlEnqueue(t, conn, `SELECT * FROM venturi_enqueue('sql_counter', '{"key": "k", "n": 1}', dedup_key => 'k')`)
	if got := next(); got != wakeCh+" sql_counter" {
		t.Fatalf("due job: %q", got)
	}
	sqlEnqueue(t, conn, `SELECT * FROM venturi_enqueue('sql_report', delay => '1 minute')`)
	if got := next(); got != wakeCh+" @sql_report" {
		t.Fatalf("delayed job: %q", got)
	}
	// sql_counter has no recorded merge (no worker registered it): its collision waits.
	if r := sqlEnqueue(t, conn, `SELECT * FROM venturi_enqueue('sql_counter', '{"key": "k", "n": 2}', dedup_key => 'k')`); r.Action != "deferred" {
		t.Fatalf("collision: %+v", r)
	}
	if got := next(); got != mergeCh+" sql_counter" {
		t.Fatalf("deferred enqueue: %q", got)
	}
}

// TestSQLWakeUpIsDebouncedAcrossSessions: the first transaction of a kind in each 2 ms
// notifies and the others leave the wake-up to it. Another session holds the debounce's
// locks of sql_report for the next two seconds: an enqueue of sql_report from SQL then
// sends nothing, and the first notification the workers' channel carries is the one of
// the sql_counter enqueue committed after it.
func TestSQLWakeUpIsDebouncedAcrossSessions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := newQueue(t)
	listen := listenOn(t, pool, sqlText(t, pool, `SELECT venturi_wake_channel()`))
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	if _, err := holder.Exec(ctx, `
		SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || '.venturi_wake/sql_report/' || b::text, 0))
		FROM generate_series(floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint / 2000,
		                     floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint / 2000 + 1000) AS b`); err != nil {
		t.Fatal(err)
	}
	sqlEnqueue(t, pool, `SELECT * FROM venturi_enqueue('sql_report', '{"name": "quiet"}')`)
	sqlEnqueue(t, pool, `SELECT * FROM venturi_enqueue('sql_counter', '{"key": "w", "n": 1}')`)
	wctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	n, err := listen.WaitForNotification(wctx)
	if err != nil {
		t.Fatalf("no notification: %v", err)
	}
	if n.Payload != "sql_counter" {
		t.Fatalf("first notification %q: the sql_report enqueue notified though its 2 ms were taken", n.Payload)
	}
}

// TestSQLEnqueueRefusesBadInput: every argument a Go enqueue would refuse (and a few only
// a SQL caller can get wrong) is refused with a SQLSTATE, a message naming the field and
// the field in the error's COLUMN, and nothing is written: no job, no deferred enqueue.
func TestSQLEnqueueRefusesBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := newQueue(t)
	if _, err := pool.Exec(ctx, `INSERT INTO venturi_kind (kind, singleton) VALUES ('sql_service', true)`); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		call, code, column, message string
	}{
		{`venturi_enqueue(NULL)`, "22004", "kind", "venturi_enqueue: kind: must not be NULL"},
		{`venturi_enqueue('')`, "22023", "kind", "venturi_enqueue: kind: must not be empty"},
		{`venturi_enqueue(repeat('k', 129))`, "22001", "kind", "venturi_enqueue: kind: is longer than 128 bytes"},
		{`venturi_enqueue(repeat('é', 65))`, "22001", "kind", "venturi_enqueue: kind: is longer than 128 bytes"},
		{`venturi_enqueue('k', NULL)`, "22004", "payload", "venturi_enqueue: payload: must not be NULL"},
		{`venturi_enqueue('k', jsonb_build_object('s', repeat('x', 1048576)))`, "22001", "payload",
			"venturi_enqueue: payload: is larger than 1048576 bytes"},
		{`venturi_enqueue('k', queue => NULL)`, "22004", "queue", "venturi_enqueue: queue: must not be NULL"},
		{`venturi_enqueue('k', queue => '')`, "22023", "queue", "venturi_enqueue: queue: must not be empty"},
		{`venturi_enqueue('k', queue => repeat('q', 129))`, "22001", "queue", "venturi_enqueue: queue: is longer than 128 bytes"},
		{`venturi_enqueue('k', priority => 1001)`, "22003", "priority", "venturi_enqueue: priority: must be between -1000 and 1000"},
		{`venturi_enqueue('k', priority => NULL)`, "22004", "priority", "venturi_enqueue: priority: must not be NULL"},
		{`venturi_enqueue('k', run_at => 'infinity')`, "22023", "run_at", "venturi_enqueue: run_at: must be a finite time"},
		{`venturi_enqueue('k', delay => '-1 second')`, "22023", "delay", "venturi_enqueue: delay: must not be negative"},
		{`venturi_enqueue('k', dedup_key => repeat('d', 513))`, "22001", "dedup_key", "venturi_enqueue: dedup_key: is longer than 512 bytes"},
		{`venturi_enqueue('k', meta => '[1]')`, "22023", "meta", "venturi_enqueue: meta: must be a JSON object of strings"},
		{`venturi_enqueue('k', meta => '{"a": 1}')`, "22023", "meta", "venturi_enqueue: meta: must be a JSON object of strings"},
		{`venturi_enqueue('k', meta => jsonb_build_object('a', repeat('x', 8200)))`, "22001", "meta",
			"venturi_enqueue: meta: is larger than 8192 bytes"},
		{`venturi_enqueue('k', partition => 'a' || chr(31))`, "22023", "partition", "venturi_enqueue: partition: must not contain U+001F"},
		{`venturi_enqueue('k', partition => repeat('p', 257))`, "22001", "partition", "venturi_enqueue: partition: is longer than 256 bytes"},
		{`venturi_enqueue('k', slot_limit => 2)`, "22023", "slot_limit", "venturi_enqueue: slot_limit: needs a slot_key"},
		{`venturi_enqueue('k', slot_policy => 'replace')`, "22023", "slot_policy", "venturi_enqueue: slot_policy: needs a slot_key"},
		{`venturi_enqueue('k', slot_key => 's', slot_limit => -1)`, "22023", "slot_limit", "venturi_enqueue: slot_limit: must not be negative"},
		{`venturi_enqueue('k', slot_key => 's', slot_policy => 'fifo')`, "22023", "slot_policy",
			"venturi_enqueue: slot_policy: must be queue, replace or drop_if_running"},
		{`venturi_enqueue('k', slot_key => repeat('s', 257))`, "22001", "slot_key", "venturi_enqueue: slot_key: is longer than 256 bytes"},
		{`venturi_enqueue('k', slot_key => 'venturi.singleton:k')`, "22023", "slot_key", "venturi_enqueue: slot_key: is reserved"},
		{`venturi_enqueue('sql_service')`, "22023", "kind", "venturi_enqueue: kind: is a supervised singleton"},
		{`venturi_enqueue_many('{"kind": "k"}')`, "22023", "jobs", "venturi_enqueue_many: jobs: must be a JSON array of objects"},
		{`venturi_enqueue_many('[{"kind": "k"}, 1]')`, "22023", "job", "venturi_enqueue_many: jobs[1]: job: must be a JSON object"},
		{`venturi_enqueue_many('[{"kind": "k", "kidn": "x"}]')`, "22023", "kidn", "venturi_enqueue_many: jobs[0]: kidn: is not a field of a job"},
		{`venturi_enqueue_many('[{"kind": "k"}, {"kind": ""}]')`, "22023", "kind", "venturi_enqueue_many: jobs[1]: kind: must not be empty"},
		{`venturi_enqueue_many('[{"kind": 7}]')`, "22023", "kind", "venturi_enqueue_many: jobs[0]: kind: must be a JSON string"},
		{`venturi_enqueue_many('[{"kind": "k", "priority": 1.5}]')`, "22023", "priority", "venturi_enqueue_many: jobs[0]: priority: must be a whole JSON number"},
		{`venturi_enqueue_many('[{"kind": "k", "run_at": "soon"}]')`, "22007", "run_at", "venturi_enqueue_many: jobs[0]: run_at: is not a time"},
		{`venturi_enqueue_many('[{"kind": "k", "delay": "later"}]')`, "22007", "delay", "venturi_enqueue_many: jobs[0]: delay: is not an interval"},
		{`venturi_enqueue_many('[{"kind": "k", "delay": 1e300}]')`, "22003", "delay", "venturi_enqueue_many: jobs[0]: delay: is out of range"},
		{`venturi_enqueue_many('[{"kind": "k", "delay": [1]}]')`, "22023", "delay", "venturi_enqueue_many: jobs[0]: delay: must be an interval"},
		{`venturi_enqueue_many('[{"kind": "k", "priority": 2.0, "slot_key": "s", "slot_limit": -1.0}]')`, "22023", "slot_limit",
			"venturi_enqueue_many: jobs[0]: slot_limit: must not be negative"},
		{`venturi_enqueue_many('[{"kind": "k", "events": "yes"}]')`, "22023", "events", "venturi_enqueue_many: jobs[0]: events: must be a JSON boolean"},
		{`venturi_enqueue_many('[{"kind": "k"}, {"kind": "k", "dedup_key": "d", "meta": {"a": [1]}}]')`, "22023", "meta",
			"venturi_enqueue_many: jobs[1]: meta: must be a JSON object of strings"},
		{`venturi_cancel(NULL)`, "22004", "id", "venturi_cancel: id: must not be NULL"},
		{`venturi_signal(gen_random_uuid(), '')`, "22023", "name", "venturi_signal: name: must not be empty"},
		{`venturi_signal(gen_random_uuid(), 'n', delivery_id => repeat('d', 257))`, "22001", "delivery_id",
			"venturi_signal: delivery_id: is longer than 256 bytes"},
	} {
		_, err := pool.Exec(ctx, `SELECT * FROM `+tt.call)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) {
			t.Errorf("%s: %v, want a PostgreSQL error", tt.call, err)
			continue
		}
		if pe.Code != tt.code || pe.ColumnName != tt.column || !strings.HasPrefix(pe.Message, tt.message) {
			t.Errorf("%s:\n  got  %s %q (column %q)\n  want %s %q… (column %q)", tt.call, pe.Code, pe.Message, pe.ColumnName,
				tt.code, tt.message, tt.column)
		}
	}
	// A dedup key needs READ COMMITTED, as EnqueueTx does (ErrIsolation).
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctx, `SELECT * FROM venturi_enqueue('k', dedup_key => 'd')`)
	_ = tx.Rollback(ctx)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "55000" || pe.ColumnName != "dedup_key" ||
		pe.Message != "venturi_enqueue: dedup_key: needs a READ COMMITTED transaction" || pe.Detail != "the transaction is repeatable read" {
		t.Errorf("dedup key in REPEATABLE READ: %v", err)
	}
	if n := countJobs(t, pool, "true"); n != 0 {
		t.Fatalf("refused calls left %d jobs", n)
	}
	if n := deferredCount(t, pool); n != 0 {
		t.Fatalf("refused calls left %d deferred enqueues", n)
	}
}

// ---- dedup and merge -----------------------------------------------------------------------

// TestSQLEnqueueAppliesTheKindsMerge: a collision from SQL applies the merge its kind's
// workers recorded. Without a merge method it replaces (carry reset, due time the
// earlier); a KeepPending rule keeps the pending job and its due time; a debounce rule
// moves the due time to now + delay within the burst's bound. Each leaves the merged
// journal entry a Go enqueue leaves. A Merge method in Go is deferred: the enqueue waits
// in venturi_deferred_merge until the worker that knows the type merges it (the counts add
// up). What each registration recorded is in venturi_kind.
func TestSQLEnqueueAppliesTheKindsMerge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	sqlWorker(t, pool, &sqlApp{})
	recorded := sqlText(t, pool, `SELECT string_agg(concat_ws(':', kind, merge, merge_due, merge_delay, merge_max_wait, singleton), ' ' ORDER BY kind)
		FROM venturi_kind WHERE kind IN ('sql_counter', 'sql_debounced', 'sql_kept', 'sql_report')`)
	if want := "sql_counter:go:0:00:00:00:00:00:00:f sql_debounced:replace:2:01:00:00:01:30:00:f " +
		"sql_kept:keep:1:00:00:00:00:00:00:f sql_report:replace:0:00:00:00:00:00:00:f"; recorded != want {
		t.Fatalf("venturi_kind:\n  %s\nwant\n  %s", recorded, want)
	}

	// Replace: the Go enqueue's job takes the SQL payload; its due time moves earlier.
	first := enqueue(t, q, sqlReport{Name: "go", Key: "r"}, venturi.After(2*time.Hour))
	if _, err := pool.Exec(ctx, `UPDATE venturi_job SET carry = '{"c": 1}' WHERE id = $1`, uuidArg(first.ID)); err != nil {
		t.Fatal(err)
	}
	r := sqlEnqueue(t, pool, `SELECT * FROM venturi_enqueue('sql_report', '{"name": "sql", "key": "r"}', dedup_key => 'r', delay => '1 hour')`)
	j := jobByID(t, q, first.ID)
	e := lastEntry(j)
	var rep sqlReport
	decodePayload(t, j, &rep)
	if r.ID != first.ID || r.Action != "replaced" || rep.Name != "sql" || !carryIsZero(j.Carry) ||
		e.Event != venturi.EventMerged || e.Merge != "replace" || e.Due != "earliest" || !e.DueAfter.Before(e.DueBefore) ||
		!strings.HasPrefix(e.Note, "merged enqueue ") {
		t.Fatalf("replace: %+v, payload %s, carry %s, entry %+v", r, j.Payload, j.Carry, e)
	}
	// The note names the enqueue as a Go merge does: its ULID's text.
	if _, err := ulid.ParseStrict(strings.TrimPrefix(e.Note, "merged enqueue ")); err != nil {
		t.Fatalf("note %q: %v", e.Note, err)
	}

	// Keep: nothing changes but the journal.
	kept := sqlEnqueue(t, pool, `SELECT * FROM venturi_enqueue('sql_kept', '{"key": "k", "v": 1}', dedup_key => 'k', delay => '1 hour')`)
	again := sqlEnqueue(t, pool, `SELECT * FROM venturi_enqueue('sql_kept', '{"key": "k", "v": 2}', dedup_key => 'k')`)
	j = jobByID(t, q, kept.ID)
	e = lastEntry(j)
	var k sqlKept
	decodePayload(t, j, &k)
	if again.ID != kept.ID || again.Action != "kept" || j.State != venturi.StateScheduled || k.V != 1 ||
		e.Merge != "keep" || e.Due != "keep" || !e.DueAfter.Equal(e.DueBefore) {
		t.Fatalf("keep: %+v, %s %s, entry %+v", again, j.State, j.Payload, e)
	}

	// Debounce: due now + 1h, the burst began at the job's creation.
	deb := sqlEnqueue(t, pool, `SELECT * FROM venturi_enqueue('sql_debounced', '{"key": "d", "v": 1}', dedup_key => 'd', delay => '2 hours')`)
	debAgain := sqlEnqueue(t, pool, `SELECT * FROM venturi_enqueue('sql_debounced', '{"key": "d", "v": 2}', dedup_key => 'd')`)
	var dueIn, burst string
	if err := pool.QueryRow(ctx, `SELECT date_trunc('minute', run_at - now() + interval '30 seconds')::text,
			(burst_at = created_at)::text FROM venturi_job WHERE id = $1`, uuidArg(deb.ID)).Scan(&dueIn, &burst); err != nil {
		t.Fatal(err)
	}
	j = jobByID(t, q, deb.ID)
	if debAgain.Action != "replaced" || debAgain.ID != deb.ID || dueIn != "01:00:00" || burst != "true" ||
		j.State != venturi.StateScheduled || lastEntry(j).Due != "debounce" {
		t.Fatalf("debounce: %+v, due in %s, burst at creation %s, %s %+v", debAgain, dueIn, burst, j.State, lastEntry(j))
	}

	// A Go Merge: deferred, then merged by the worker.
	c1 := sqlEnqueue(t, pool, `SELECT * FROM venturi_enqueue('sql_counter', '{"key": "c", "n": 1}', dedup_key => 'c', delay => '1 hour')`)
	c2 := sqlEnqueue(t, pool, `SELECT * FROM venturi_enqueue('sql_counter', '{"key": "c", "n": 2}', dedup_key => 'c', delay => '1 hour')`)
	if c1.Action != "inserted" || c2.Action != "deferred" || c2.ID != c1.ID {
		t.Fatalf("counter: %+v then %+v", c1, c2)
	}
	j = waitJob(t, q, c1.ID, "the deferred enqueue merged", func(j *venturi.Job) bool { return lastEntry(j).Merge == "with" })
	var cnt sqlCounter
	decodePayload(t, j, &cnt)
	if cnt.N != 3 || j.State != venturi.StateScheduled || deferredCount(t, pool) != 0 {
		t.Fatalf("counter after the Go merge: %+v, %s, %d deferred", cnt, j.State, deferredCount(t, pool))
	}
}

// TestGoEnqueueAppliesDeferredSQLEnqueuesFirst: enqueues from SQL that wait for a Go merge
// (here no worker registered the kind, so nothing is recorded) are applied, in order, by
// the next Go enqueue of the same key, before its own. One whose payload does not decode
// into the type ends dead with the decode error, and is not lost.
func TestGoEnqueueAppliesDeferredSQLEnqueuesFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	first := sqlEnqueue(t, pool, `SELECT * FROM venturi_enqueue('sql_counter', '{"key": "c", "n": 1}', dedup_key => 'c', delay => '1 hour')`)
	second := sqlEnqueue(t, pool, `SELECT * FROM venturi_enqueue('sql_counter', '{"key": "c", "n": 10}', dedup_key => 'c', delay => '1 hour')`)
	bad := sqlEnqueue(t, pool, `SELECT * FROM venturi_enqueue('sql_counter', '{"key": "c", "n": "ten"}', dedup_key => 'c')`)
	if first.Action != "inserted" || second.Action != "deferred" || bad.Action != "deferred" || second.ID != first.ID || bad.ID != first.ID {
		t.Fatalf("%+v, %+v, %+v", first, second, bad)
	}
	var ids []pgtype.UUID
	rows, err := pool.Query(ctx, `SELECT id FROM venturi_deferred_merge ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	if ids, err = pgx.CollectRows(rows, pgx.RowTo[pgtype.UUID]); err != nil || len(ids) != 2 {
		t.Fatalf("deferred: %v, %v", ids, err)
	}
	res := enqueue(t, q, sqlCounter{Key: "c", N: 100}, venturi.After(time.Hour))
	if res.ID != first.ID || res.Action != venturi.ActionMerged {
		t.Fatalf("Go enqueue: %+v", res)
	}
	j := jobByID(t, q, first.ID)
	var cnt sqlCounter
	decodePayload(t, j, &cnt)
	if cnt.N != 111 || len(j.Journal) != 2 || j.Journal[0].Merge != "with" || j.Journal[1].Merge != "with" ||
		j.Journal[0].Note != "merged enqueue "+ulid.ULID(ids[0].Bytes).String() || j.Journal[1].Note == j.Journal[0].Note {
		t.Fatalf("merged job: n = %d, journal %+v", cnt.N, j.Journal)
	}
	dead := jobByID(t, q, ulid.ULID(ids[1].Bytes))
	if dead.Kind != "sql_counter" || dead.DedupKey != "c" || dead.State != venturi.StateDead ||
		!strings.HasPrefix(lastEntry(dead).Note, "decode payload into venturi_test.sqlCounter: ") {
		t.Fatalf("undecodable enqueue: %s %s %+v", dead.Kind, dead.State, dead.Journal)
	}
	if n := deferredCount(t, pool); n != 0 {
		t.Fatalf("%d deferred enqueues left", n)
	}
}

// TestSQLAndGoProducersDedupConcurrently: Go producers and SQL producers (their own
// connections) enqueue the same keys of three kinds at once, while a worker that
// registered them applies the deferred merges: a Go merge that adds counts, the default
// Replace, and a KeepPending rule. Once the deferred merges are applied, each key has
// exactly one pending job; its journal holds one merged entry per enqueue but the first;
// and the counter's count is the number of enqueues of its key: no enqueue was lost or
// applied twice, whichever side made it.
func TestSQLAndGoProducersDedupConcurrently(t *testing.T) {
	t.Parallel()
	slow(t)
	ctx := context.Background()
	pool, q := newQueue(t)
	sqlWorker(t, pool, &sqlApp{})
	const (
		producers = 3 // of each side
		perKey    = 8 // enqueues of each key by each producer
		keys      = 4
	)
	errs := make(chan error, 2*producers)
	concurrently(2*producers, func(p int) {
		for i := range perKey * keys {
			key := fmt.Sprintf("k%d", (i+p)%keys)
			var err error
			if p < producers {
				for _, task := range []venturi.Task{sqlCounter{Key: key, N: 1}, sqlReport{Name: "go", Key: key}, sqlKept{Key: key, V: 1}} {
					if _, err = q.Enqueue(ctx, task, venturi.After(time.Hour)); err != nil {
						break
					}
				}
			} else {
				_, err = pool.Exec(ctx, `SELECT venturi_enqueue('sql_counter', jsonb_build_object('key', $1::text, 'n', 1), dedup_key => $1, delay => '1 hour'),
					venturi_enqueue('sql_report', jsonb_build_object('name', 'sql', 'key', $1::text), dedup_key => $1, delay => '1 hour'),
					venturi_enqueue('sql_kept', jsonb_build_object('key', $1::text, 'v', 2), dedup_key => $1, delay => '1 hour')`, key)
			}
			if err != nil {
				errs <- err
				return
			}
		}
	})
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	eventually(t, within, "the deferred merges applied", func() bool { return deferredCount(t, pool) == 0 })
	rows, err := pool.Query(ctx, `SELECT kind, dedup_key, count(*), min(payload::text), min(journal_moved + jsonb_array_length(journal))
		FROM venturi_job WHERE state IN ('scheduled', 'available') GROUP BY kind, dedup_key ORDER BY kind, dedup_key`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var kind, key, payload string
		var n, entries int
		if err := r.Scan(&kind, &key, &n, &payload, &entries); err != nil {
			return "", err
		}
		if kind == "sql_counter" {
			var c sqlCounter
			if err := json.Unmarshal([]byte(payload), &c); err != nil {
				return "", err
			}
			payload = fmt.Sprint(c.N)
		} else {
			payload = "-"
		}
		return fmt.Sprintf("%s/%s: %d job, %s, %d merged", kind, key, n, payload, entries), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	const enqueues = 2 * producers * perKey // of each key of each kind
	var want []string
	for _, kind := range []string{"sql_counter", "sql_kept", "sql_report"} {
		for k := range keys {
			n := "-"
			if kind == "sql_counter" {
				n = fmt.Sprint(enqueues)
			}
			want = append(want, fmt.Sprintf("%s/k%d: 1 job, %s, %d merged", kind, k, n, enqueues-1))
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("pending jobs:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// ---- triggers ------------------------------------------------------------------------------

// sqlReceipt is the job an outbox trigger enqueues for each new order.
type sqlReceipt struct {
	Order int64  `json:"order"`
	Email string `json:"email"`
}

func (sqlReceipt) Kind() string { return "sql_receipt" }

// TestSQLEnqueueInATrigger: a trigger on a table in another schema (whose sessions'
// search_path does not reach venturi's) enqueues a job for each row inserted, in the
// inserting transaction: a rolled-back insert leaves no job, a committed one is run by a
// worker, with the row's data.
func TestSQLEnqueueInATrigger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	app := testdb.Pool(t, testdb.Schema(t), 4) // the application's schema and sessions
	venturiSchema := pgx.Identifier{schemaOf(pool)}.Sanitize()
	if _, err := app.Exec(ctx, `
		CREATE TABLE orders (id bigint PRIMARY KEY, email text NOT NULL);
		CREATE FUNCTION orders_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		    PERFORM `+venturiSchema+`.venturi_enqueue('sql_receipt',
		        jsonb_build_object('order', NEW.id, 'email', NEW.email), dedup_key => 'order:' || NEW.id);
		    RETURN NEW;
		END $$;
		CREATE TRIGGER orders_outbox AFTER INSERT ON orders FOR EACH ROW EXECUTE FUNCTION orders_outbox();`); err != nil {
		t.Fatal(err)
	}
	ran := make(chan sqlReceipt, 4)
	w := newWorker(t, pool, struct{}{}, fastConfig())
	venturi.MustRegisterFunc(w, func(ctx context.Context, r sqlReceipt, _ *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
		ran <- r
		return venturi.Completed(), nil
	})
	startWorker(t, w)
	insert := func(id int64, commit bool) {
		t.Helper()
		tx, err := app.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, email) VALUES ($1, $2)`, id, fmt.Sprintf("o%d@example.com", id)); err != nil {
			t.Fatal(err)
		}
		if commit {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	insert(1, false)
	if n := countJobs(t, pool, "kind = 'sql_receipt'"); n != 0 {
		t.Fatalf("a rolled-back insert left %d jobs", n)
	}
	insert(2, true)
	if got := recv(t, ran, "the committed order's receipt"); got != (sqlReceipt{Order: 2, Email: "o2@example.com"}) {
		t.Fatalf("ran %+v", got)
	}
	id := idWhere(t, pool, "kind = 'sql_receipt'")
	if j := waitState(t, q, venturi.Result{ID: id}, venturi.StateCompleted); j.DedupKey != "order:2" {
		t.Fatalf("job %+v", j)
	}
	if n := countJobs(t, pool, "kind = 'sql_receipt'"); n != 1 {
		t.Fatalf("%d receipt jobs, want the committed order's only", n)
	}
}

// ---- cancel, signal, status -----------------------------------------------------------------

// TestSQLCancelSignalAndStatus: venturi_cancel, venturi_cancel_by_key, venturi_signal and
// venturi_job_status do what Queue.Cancel, CancelByKey, Signal and Job do: a pending job
// ends cancelled with the reason; a running one is asked to stop and ends cancelled; a
// waiting job is woken by its signal and reads its payload; a repeated delivery ID is a
// duplicate; finished and unknown jobs are reported as such; the status of a finished job
// is read from the history.
func TestSQLCancelSignalAndStatus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	app := &sqlApp{runs: make(chan struct{}, 1)}
	sqlWorker(t, pool, app)
	result := func(query string, args ...any) string { t.Helper(); return sqlText(t, pool, query, args...) }
	unknown := uuidArg(ulid.Make())

	// A waiting job, woken by a signal from SQL.
	waiter := sqlEnqueue(t, pool, `SELECT * FROM venturi_enqueue('sql_waiter', '{"id": "w"}')`)
	eventually(t, within, "the waiter waiting", func() bool {
		st, _, _ := sqlStatus(t, pool, waiter.ID)
		return st == "waiting"
	})
	if got := result(`SELECT venturi_signal($1, 'go', '{"ok": true}', 'd1')`, uuidArg(waiter.ID)); got != "woke" {
		t.Fatalf("signal to a waiting job: %s", got)
	}
	waitState(t, q, venturi.Result{ID: waiter.ID}, venturi.StateCompleted)
	if st, ev, note := sqlStatus(t, pool, waiter.ID); st != "completed" || ev != "completed" || note != `signal {"ok": true}` {
		t.Fatalf("status of the woken job: %s %s %q", st, ev, note)
	}
	if got := result(`SELECT venturi_signal($1, 'go')`, uuidArg(waiter.ID)); got != "finished" {
		t.Fatalf("signal to a completed job: %s", got)
	}
	if got := result(`SELECT venturi_cancel($1)`, uuidArg(waiter.ID)); got != "finished" {
		t.Fatalf("cancel of a completed job: %s", got)
	}

	// A scheduled job: a signal is stored (once per delivery ID), a cancel ends it.
	later := sqlEnqueue(t, pool, `SELECT * FROM venturi_enqueue('sql_report', '{"name": "later"}', dedup_key => 'l', delay => '1 hour')`)
	if got := result(`SELECT venturi_signal($1, 'go', NULL, 'd2')`, uuidArg(later.ID)); got != "stored" {
		t.Fatalf("first delivery: %s", got)
	}
	if got := result(`SELECT venturi_signal($1, 'go', NULL, 'd2')`, uuidArg(later.ID)); got != "duplicate" {
		t.Fatalf("repeated delivery: %s", got)
	}
	if st, _, _ := sqlStatus(t, pool, later.ID); st != "scheduled" {
		t.Fatalf("scheduled job: %s", st)
	}
	if got := result(`SELECT string_agg(id::text || ' ' || result, ',') FROM venturi_cancel_by_key('sql_report', 'l', 'no longer needed')`); got != uuidText(later.ID)+" ended" {
		t.Fatalf("cancel by key: %s", got)
	}
	if st, ev, note := sqlStatus(t, pool, later.ID); st != "cancelled" || ev != "cancelled" || note != "no longer needed" {
		t.Fatalf("cancelled job: %s %s %q", st, ev, note)
	}
	if got := result(`SELECT venturi_cancel($1)`, uuidArg(later.ID)); got != "already" {
		t.Fatalf("second cancel: %s", got)
	}

	// A running job: asked to stop, its run sees Shutdown, it ends cancelled.
	blocker := sqlEnqueue(t, pool, `SELECT * FROM venturi_enqueue('sql_blocker')`)
	recv(t, app.runs, "the blocker running")
	if got := result(`SELECT venturi_cancel($1, 'stop it')`, uuidArg(blocker.ID)); got != "requested" {
		t.Fatalf("cancel of a running job: %s", got)
	}
	if got := result(`SELECT venturi_cancel($1, 'stop it')`, uuidArg(blocker.ID)); got != "already" && got != "finished" {
		t.Fatalf("second cancel of a running job: %s", got)
	}
	j := waitState(t, q, venturi.Result{ID: blocker.ID}, venturi.StateCancelled)
	if e := lastEntry(j); e.Event != venturi.EventCancelled || !strings.HasPrefix(e.Note, "stop it") {
		t.Fatalf("stopped job's last entry: %+v", e)
	}

	// Unknown jobs.
	if got := result(`SELECT venturi_cancel($1)`, unknown); got != "not_found" {
		t.Fatalf("cancel of an unknown job: %s", got)
	}
	if got := result(`SELECT venturi_signal($1, 'go')`, unknown); got != "not_found" {
		t.Fatalf("signal to an unknown job: %s", got)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM venturi_job_status($1)`, unknown).Scan(&n); err != nil || n != 0 {
		t.Fatalf("status of an unknown job: %d rows, %v", n, err)
	}
	// The status of a job in the history, read in one statement with the pending ones.
	var inHistory bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM venturi_job_history WHERE id = $1)`, uuidArg(waiter.ID)).Scan(&inHistory); err != nil || !inHistory {
		t.Fatalf("the completed job is not in the history (%v)", err)
	}
}

// TestSQLAPIVersionAndIDs: the schema says which SQL API it provides; IDs made in SQL are
// ULIDs whose text venturi_ulid_text prints as Go does, increasing within a session.
func TestSQLAPIVersionAndIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := newQueue(t)
	var version int
	if err := pool.QueryRow(ctx, `SELECT venturi_sql_api_version()`).Scan(&version); err != nil || version != 1 {
		t.Fatalf("venturi_sql_api_version() = %d, %v", version, err)
	}
	rows, err := pool.Query(ctx, `SELECT id, venturi_ulid_text(id) FROM (SELECT venturi_ulid_make() AS id FROM generate_series(1, 50)) s`)
	if err != nil {
		t.Fatal(err)
	}
	var prev ulid.ULID
	for rows.Next() {
		var u pgtype.UUID
		var text string
		if err := rows.Scan(&u, &text); err != nil {
			t.Fatal(err)
		}
		id := ulid.ULID(u.Bytes)
		if id.String() != text {
			t.Fatalf("venturi_ulid_text = %s, Go prints %s", text, id)
		}
		if id.Compare(prev) <= 0 {
			t.Fatalf("%s after %s", id, prev)
		}
		if d := time.Since(ulid.Time(id.Time())); d < -time.Minute || d > time.Minute {
			t.Fatalf("ID %s carries %v", id, ulid.Time(id.Time()))
		}
		prev = id
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	for _, u := range []string{"00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff"} {
		var p pgtype.UUID
		if err := p.Scan(u); err != nil {
			t.Fatal(err)
		}
		if got := sqlText(t, pool, `SELECT venturi_ulid_text($1)`, p); got != ulid.ULID(p.Bytes).String() {
			t.Fatalf("venturi_ulid_text(%s) = %s, want %s", u, got, ulid.ULID(p.Bytes))
		}
	}
}

// uuidText prints id as PostgreSQL prints a uuid.
func uuidText(id ulid.ULID) string {
	var u pgtype.UUID = uuidArg(id)
	v, _ := u.Value()
	return v.(string)
}

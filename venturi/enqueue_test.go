package venturi_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// plainTask has no dedup key.
type plainTask struct {
	N   int    `json:"n"`
	Msg string `json:"msg,omitempty"`
}

func (plainTask) Kind() string { return "plain" }

// keyedTask coalesces by Key; Mode picks its merge decision.
type keyedTask struct {
	Key  string `json:"key"`
	Mode string `json:"mode"`
	N    int    `json:"n"`
}

func (keyedTask) Kind() string                 { return "keyed" }
func (k keyedTask) DedupKey() venturi.DedupKey { return venturi.KeyOf("k", k.Key) }
func (k keyedTask) Merge(existing venturi.Pending[keyedTask, struct{}]) venturi.Merge[keyedTask, struct{}] {
	switch k.Mode {
	case "keep":
		return existing.Keep()
	case "independent":
		return existing.Independent()
	}
	return existing.Replace()
}

func TestEnqueueReportsInsertedWithID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, q := newQueue(t)
	before := time.Now()
	r := enqueue(t, q, plainTask{N: 7, Msg: "hello"})
	if r.Action != venturi.ActionInserted || r.ID == (ulid.ULID{}) {
		t.Fatalf("result = %+v, want inserted with an ID", r)
	}
	if ms := int64(r.ID.Time()); ms < before.Add(-time.Minute).UnixMilli() || ms > time.Now().Add(time.Minute).UnixMilli() {
		t.Errorf("ID %s carries time %d, not around the enqueue", r.ID, ms)
	}
	j := jobByID(t, q, r.ID)
	var p plainTask
	decodePayload(t, j, &p)
	if j.ID != r.ID || j.Kind != "plain" || j.State != venturi.StateAvailable || p != (plainTask{N: 7, Msg: "hello"}) ||
		j.RunCount != 0 || j.Failures != 0 || len(j.Journal) != 0 || j.DedupKey != "" || j.Priority != venturi.PriorityNormal ||
		!carryIsZero(j.Carry) || j.AttemptedAt != nil || j.FinishedAt != nil {
		t.Fatalf("job = %+v", j)
	}
	if _, err := q.Job(ctx, ulid.Make()); !errors.Is(err, venturi.ErrNotFound) {
		t.Fatalf("Job(unknown) error = %v, want ErrNotFound", err)
	}
}

func TestEnqueueTxFollowsTheTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	for _, task := range []venturi.Task{plainTask{N: 1}, keyedTask{Key: "tx"}} {
		t.Run(task.Kind(), func(t *testing.T) {
			// Rolled back: the job never existed.
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			rolled, err := q.EnqueueTx(ctx, tx, task)
			if err != nil {
				t.Fatal(err)
			}
			if rolled.Action != venturi.ActionInserted {
				t.Fatalf("action = %v", rolled.Action)
			}
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := q.Job(ctx, rolled.ID); !errors.Is(err, venturi.ErrNotFound) {
				t.Fatalf("rolled-back job: Job() error = %v, want ErrNotFound", err)
			}
			// Committed: it is there, and invisible to others before the commit.
			tx, err = pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			committed, err := q.EnqueueTx(ctx, tx, task)
			if err != nil {
				t.Fatal(err)
			}
			if committed.Action != venturi.ActionInserted || committed.ID == rolled.ID {
				t.Fatalf("second enqueue = %+v after rollback of %s", committed, rolled.ID)
			}
			if _, err := q.Job(ctx, committed.ID); !errors.Is(err, venturi.ErrNotFound) {
				t.Fatalf("uncommitted job visible outside its transaction: %v", err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if j := jobByID(t, q, committed.ID); j.State != venturi.StateAvailable || j.Kind != task.Kind() {
				t.Fatalf("committed job = %+v", j)
			}
		})
	}
	if n := countJobs(t, pool, "true"); n != 2 {
		t.Fatalf("%d rows, want the 2 committed jobs", n)
	}
}

func TestEnqueueManyThousandPlainTasks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	tasks := make([]venturi.Task, 1000)
	for i := range tasks {
		tasks[i] = plainTask{N: i}
	}
	res, err := q.EnqueueMany(ctx, tasks)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(tasks) {
		t.Fatalf("%d results for %d tasks", len(res), len(tasks))
	}
	ids := map[ulid.ULID]bool{}
	for i, r := range res {
		if r.Action != venturi.ActionInserted || ids[r.ID] {
			t.Fatalf("result %d = %+v (duplicate ID: %v)", i, r, ids[r.ID])
		}
		ids[r.ID] = true
	}
	if n := countJobs(t, pool, "kind = 'plain' AND state = 'available'"); n != 1000 {
		t.Fatalf("%d rows, want 1000", n)
	}
	// Results are in task order: each ID holds its own payload.
	for _, i := range []int{0, 1, 499, 999} {
		var p plainTask
		decodePayload(t, jobByID(t, q, res[i].ID), &p)
		if p.N != i {
			t.Fatalf("result %d points at the job of task %d", i, p.N)
		}
	}
	if res, err := q.EnqueueMany(ctx, nil); err != nil || len(res) != 0 {
		t.Fatalf("EnqueueMany(nil) = %v, %v", res, err)
	}
}

func TestEnqueueManyMixedReportsPerTaskActions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	pre := enqueue(t, q, keyedTask{Key: "pre", N: 0})
	tasks := []venturi.Task{
		plainTask{N: 1},                                // 0 inserted
		keyedTask{Key: "a", N: 1},                      // 1 inserted
		keyedTask{Key: "a", Mode: "replace", N: 2},     // 2 replaced into 1
		plainTask{N: 2},                                // 3 inserted
		keyedTask{Key: "b", N: 1},                      // 4 inserted
		keyedTask{Key: "a", Mode: "keep", N: 3},        // 5 kept: 1 (with N 2)
		keyedTask{Key: "pre", Mode: "replace", N: 9},   // 6 replaced into pre
		keyedTask{Key: "b", Mode: "independent", N: 2}, // 7 independent of 4
	}
	res, err := q.EnqueueMany(ctx, tasks)
	if err != nil {
		t.Fatal(err)
	}
	want := []venturi.Action{venturi.ActionInserted, venturi.ActionInserted, venturi.ActionReplaced, venturi.ActionInserted,
		venturi.ActionInserted, venturi.ActionKept, venturi.ActionReplaced, venturi.ActionIndependent}
	for i, a := range want {
		if res[i].Action != a {
			t.Errorf("task %d: action %v, want %v", i, res[i].Action, a)
		}
	}
	if res[2].ID != res[1].ID || res[5].ID != res[1].ID || res[6].ID != pre.ID || res[7].ID == res[4].ID {
		t.Fatalf("IDs do not point at the merged jobs: %+v (pre %s)", res, pre.ID)
	}
	var a keyedTask
	decodePayload(t, jobByID(t, q, res[1].ID), &a)
	if a.N != 2 {
		t.Errorf("job a holds N=%d, want the replacement's 2 (keep must not change it)", a.N)
	}
	if n := countJobs(t, pool, "true"); n != 6 { // pre, 2 plain, a, b, b'
		t.Fatalf("%d rows, want 6", n)
	}
	if n := countJobs(t, pool, "dedup_key = $1", "k/b"); n != 2 {
		t.Fatalf("%d rows with key k/b, want 2 (independent)", n)
	}
	// A refused task anywhere in the list writes nothing.
	before := countJobs(t, pool, "true")
	_, err = q.EnqueueMany(ctx, []venturi.Task{plainTask{N: 100}, keyedTask{Key: "c"}, plainTask{Msg: "nul\x00"}})
	if !errors.Is(err, venturi.ErrInvalidPayload) || !strings.Contains(err.Error(), "task 2") {
		t.Fatalf("EnqueueMany with a bad task: %v, want ErrInvalidPayload naming task 2", err)
	}
	if n := countJobs(t, pool, "true"); n != before {
		t.Fatalf("a refused EnqueueMany wrote %d rows", n-before)
	}
}

// timedTask records that it ran.
type timedTask struct{ Name string }

func (timedTask) Kind() string { return "timed" }

func (tt timedTask) Handle(ctx context.Context, run *venturi.Run[struct{}], ran chan<- string) (venturi.Outcome, error) {
	ran <- tt.Name
	return venturi.CompletedWith("ran " + tt.Name), nil
}

func TestEnqueueAtAndAfter(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	ran := make(chan string, 10)
	startWorkerFor[timedTask](t, pool, (chan<- string)(ran), fastConfig())

	later := enqueue(t, q, timedTask{Name: "later"}, venturi.After(time.Hour))
	future := enqueue(t, q, timedTask{Name: "future"}, venturi.At(time.Now().Add(time.Hour)))
	for _, r := range []venturi.Result{later, future} {
		if j := jobByID(t, q, r.ID); j.State != venturi.StateScheduled || j.RunAt.Before(time.Now().Add(50*time.Minute)) {
			t.Fatalf("job due in an hour: state %s, run_at %v", j.State, j.RunAt)
		}
	}
	past := enqueue(t, q, timedTask{Name: "past"}, venturi.At(time.Now().Add(-time.Hour)))
	if got := recv(t, ran, "the past-due job to run"); got != "past" {
		t.Fatalf("ran %q first, want past", got)
	}
	waitState(t, q, past, venturi.StateCompleted)
	// Several poll and maintenance rounds later (another job came and went), the
	// scheduled jobs are still untouched.
	now := enqueue(t, q, timedTask{Name: "now"})
	if got := recv(t, ran, "the due job to run"); got != "now" {
		t.Fatalf("ran %q, want now", got)
	}
	waitState(t, q, now, venturi.StateCompleted)
	for _, r := range []venturi.Result{later, future} {
		if j := jobByID(t, q, r.ID); j.State != venturi.StateScheduled || j.RunCount != 0 || len(j.Journal) != 0 {
			t.Fatalf("job due in an hour ran: %+v", j)
		}
	}
}

// Tasks that an enqueue must refuse.
type emptyKindTask struct{}

func (emptyKindTask) Kind() string { return "" }

type longKindTask struct{}

func (longKindTask) Kind() string { return strings.Repeat("k", 129) }

type chanTask struct{ C chan int }

func (chanTask) Kind() string { return "chan" }

type longKeyTask struct{ Key string }

func (longKeyTask) Kind() string                 { return "longkey" }
func (l longKeyTask) DedupKey() venturi.DedupKey { return venturi.DedupKey(l.Key) }

func TestEnqueueRefusedTasksWriteNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	for _, c := range []struct {
		name string
		task venturi.Task
		want error
	}{
		{"empty kind", emptyKindTask{}, venturi.ErrEmptyKind},
		{"long kind", longKindTask{}, venturi.ErrKindTooLong},
		{"payload too large", plainTask{Msg: strings.Repeat("x", venturi.MaxPayloadBytes)}, venturi.ErrPayloadTooLarge},
		{"unmarshalable payload", chanTask{C: make(chan int)}, venturi.ErrInvalidPayload},
		{"NUL in payload", plainTask{Msg: "a\x00b"}, venturi.ErrInvalidPayload},
		{"dedup key too long", longKeyTask{Key: strings.Repeat("k", venturi.MaxDedupKeyBytes+1)}, venturi.ErrDedupKeyTooLong},
		{"NUL in dedup key", longKeyTask{Key: "a\x00b"}, venturi.ErrInvalidPayload},
		{"invalid UTF-8 dedup key", longKeyTask{Key: "a\xffb"}, venturi.ErrInvalidPayload},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := q.Enqueue(ctx, c.task); !errors.Is(err, c.want) {
				t.Errorf("Enqueue: %v, want %v", err, c.want)
			}
			if _, err := q.EnqueueMany(ctx, []venturi.Task{c.task}); !errors.Is(err, c.want) {
				t.Errorf("EnqueueMany: %v, want %v", err, c.want)
			}
			// In a transaction that then commits: the refusal wrote nothing into it.
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := q.EnqueueTx(ctx, tx, c.task); !errors.Is(err, c.want) {
				t.Errorf("EnqueueTx: %v, want %v", err, c.want)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatalf("commit after a refused enqueue: %v", err)
			}
		})
	}
	// Exactly at the limits is accepted.
	if _, err := q.Enqueue(ctx, longKeyTask{Key: strings.Repeat("k", venturi.MaxDedupKeyBytes)}); err != nil {
		t.Errorf("dedup key of exactly %d bytes: %v", venturi.MaxDedupKeyBytes, err)
	}
	if _, err := q.Enqueue(ctx, plainTask{Msg: `text with a literal \u0000 is not NUL`}); err != nil {
		t.Errorf("escaped backslash-u0000 text: %v", err)
	}
	if n := countJobs(t, pool, "true"); n != 2 {
		t.Fatalf("%d rows, want only the 2 valid jobs", n)
	}
}

func TestEnqueueTxDedupNeedsReadCommitted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	for _, iso := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		t.Run(string(iso), func(t *testing.T) {
			for _, withCandidate := range []bool{false, true} {
				if withCandidate {
					enqueue(t, q, keyedTask{Key: "iso", N: 1})
				}
				before := countJobs(t, pool, "true")
				tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
				if err != nil {
					t.Fatal(err)
				}
				_, err = q.EnqueueTx(ctx, tx, keyedTask{Key: "iso", N: 2})
				if !errors.Is(err, venturi.ErrIsolation) {
					t.Fatalf("EnqueueTx in %s (candidate %v): %v, want ErrIsolation", iso, withCandidate, err)
				}
				// The caller may still commit its transaction: the refused enqueue left nothing in it.
				if err := tx.Commit(ctx); err != nil {
					t.Fatalf("commit: %v", err)
				}
				if n := countJobs(t, pool, "true"); n != before {
					t.Fatalf("a refused enqueue in %s wrote %d rows", iso, n-before)
				}
				var k keyedTask
				if withCandidate {
					decodePayload(t, jobByID(t, q, idWhere(t, pool, "dedup_key = 'k/iso'")), &k)
					if k.N != 1 {
						t.Fatalf("candidate changed by a refused enqueue: %+v", k)
					}
				}
			}
			if _, err := pool.Exec(ctx, "DELETE FROM venturi_job"); err != nil {
				t.Fatal(err)
			}
		})
	}
	// Plain tasks need no lock and work in any isolation level.
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	r, err := q.EnqueueTx(ctx, tx, plainTask{N: 1})
	if err != nil {
		t.Fatalf("plain EnqueueTx in repeatable read: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	jobByID(t, q, r.ID)
}

// TestEnqueueManyTxRefusalWritesNoPlainTasks: an EnqueueManyTx whose keyed task is refused
// (ErrIsolation under REPEATABLE READ) writes nothing into the caller's transaction, not
// even the batch's plain tasks, so a caller that logs the error and commits gets no
// partial batch.
func TestEnqueueManyTxRefusalWritesNoPlainTasks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	_, err = q.EnqueueManyTx(ctx, tx, []venturi.Task{plainTask{N: 1}, keyedTask{Key: "k"}})
	if !errors.Is(err, venturi.ErrIsolation) {
		t.Fatalf("EnqueueManyTx: %v, want ErrIsolation", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countJobs(t, pool, "true"); n != 0 {
		t.Fatalf("a refused EnqueueManyTx left %d rows in the caller's transaction", n)
	}
}

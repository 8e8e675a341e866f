package venturi_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/venturi-dev/venturi"
)

// Concurrent enqueues of one dedup key: exactly one inserts, every other committed
// enqueue merges into that job, and rolled-back merges leave no trace.

// unionTask unions its items with the pending job's (With).
type unionTask struct {
	Items []int `json:"items"`
}

func (unionTask) Kind() string               { return "union" }
func (unionTask) DedupKey() venturi.DedupKey { return "hot" }
func (u unionTask) Merge(existing venturi.Pending[unionTask, struct{}]) venturi.Merge[unionTask, struct{}] {
	items := slices.Clone(existing.Payload.Items)
	for _, it := range u.Items {
		if !slices.Contains(items, it) {
			items = append(items, it)
		}
	}
	return existing.With(unionTask{Items: items}, struct{}{})
}

// keepTask keeps the pending job.
type keepTask struct {
	Item int `json:"item"`
}

func (keepTask) Kind() string               { return "keep" }
func (keepTask) DedupKey() venturi.DedupKey { return "hot" }
func (keepTask) Merge(existing venturi.Pending[keepTask, struct{}]) venturi.Merge[keepTask, struct{}] {
	return existing.Keep()
}

func TestConcurrentDedupEnqueueWithRollbacks(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"with", "keep"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel() // each subtest has its own schema
			ctx := context.Background()
			pool, q := newQueue(t)
			const n = 60
			var (
				mu        sync.Mutex
				committed = map[int]venturi.Result{}
				errs      = make(chan error, n)
			)
			concurrently(n, func(i int) {
				var task venturi.Task = unionTask{Items: []int{i}}
				if mode == "keep" {
					task = keepTask{Item: i}
				}
				tx, err := pool.Begin(ctx)
				if err != nil {
					errs <- err
					return
				}
				r, err := q.EnqueueTx(ctx, tx, task)
				if err != nil {
					_ = tx.Rollback(ctx)
					errs <- fmt.Errorf("enqueue %d: %w", i, err)
					return
				}
				if i%3 == 0 {
					if err := tx.Rollback(ctx); err != nil {
						errs <- err
					}
					return
				}
				if err := tx.Commit(ctx); err != nil {
					errs <- fmt.Errorf("commit %d: %w", i, err)
					return
				}
				mu.Lock()
				committed[i] = r
				mu.Unlock()
			})
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if t.Failed() {
				t.FailNow()
			}
			if len(committed) != n-n/3 {
				t.Fatalf("%d commits, want %d", len(committed), n-n/3)
			}
			if rows := countJobs(t, pool, "true"); rows != 1 {
				t.Fatalf("%d rows, want exactly 1 pending job for the key", rows)
			}
			id := idWhere(t, pool, "dedup_key = 'hot' AND state = 'available'")
			// Every committed enqueue landed in that job: one inserted it, the others merged.
			inserted := -1
			for i, r := range committed {
				if r.ID != id {
					t.Fatalf("committed enqueue %d reports job %s, but the job is %s", i, r.ID, id)
				}
				switch {
				case r.Action == venturi.ActionInserted && inserted < 0:
					inserted = i
				case r.Action == venturi.ActionInserted:
					t.Fatalf("committed enqueues %d and %d both inserted", inserted, i)
				case mode == "with" && r.Action != venturi.ActionMerged, mode == "keep" && r.Action != venturi.ActionKept:
					t.Fatalf("committed enqueue %d: action %v", i, r.Action)
				}
			}
			if inserted < 0 {
				t.Fatal("no committed enqueue inserted the job")
			}
			j := jobByID(t, q, id)
			if n := len(fullJournal(t, q, id)); n != len(committed)-1 || j.JournalLen != int64(n) {
				t.Fatalf("%d merged entries (JournalLen %d), want %d (one per committed merge; rolled-back merges leave none)", n, j.JournalLen, len(committed)-1)
			}
			if mode == "keep" {
				var k keepTask
				decodePayload(t, j, &k)
				if k.Item != inserted {
					t.Fatalf("kept payload is item %d, want %d, the committed insert", k.Item, inserted)
				}
				return
			}
			var u unionTask
			decodePayload(t, j, &u)
			var want []int
			for i := range committed {
				want = append(want, i)
			}
			slices.Sort(want)
			got := slices.Clone(u.Items)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("union holds %v\nwant exactly the committed items %v", got, want)
			}
		})
	}
}

// TestConcurrentDedupEnqueueFastPath races plain Enqueue calls (the one-round-trip path)
// on one key.
func TestConcurrentDedupEnqueueFastPath(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	const n = 40
	results := make(chan venturi.Result, n)
	errs := make(chan error, n)
	concurrently(n, func(i int) {
		var task venturi.Task = unionTask{Items: []int{i}}
		r, err := q.Enqueue(context.Background(), task)
		if err != nil {
			errs <- err
			return
		}
		results <- r
	})
	close(errs)
	close(results)
	for err := range errs {
		t.Fatal(err)
	}
	ins := 0
	for r := range results {
		if r.Action == venturi.ActionInserted {
			ins++
		}
	}
	if ins != 1 || countJobs(t, pool, "true") != 1 {
		t.Fatalf("%d inserts, %d rows; want 1 and 1", ins, countJobs(t, pool, "true"))
	}
	var u unionTask
	decodePayload(t, jobByID(t, q, idWhere(t, pool, "true")), &u)
	if len(u.Items) != n {
		t.Fatalf("union has %d items, want %d", len(u.Items), n)
	}
}

package venturi_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi"
)

// rowTask is one row for a tenant; the row FailOnce fails its first run.
type rowTask struct {
	Tenant   string `json:"tenant"`
	N        int    `json:"n"`
	FailOnce bool   `json:"fail_once,omitempty"`
}

func (rowTask) Kind() string { return "chunk-row" }

// chunkLog records the chunks a handler got.
type chunkLog struct {
	mu     sync.Mutex
	chunks [][]rowTask
	failed map[int]bool
}

func (l *chunkLog) all() [][]rowTask {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.chunks)
}

func handleRows(_ context.Context, items []*venturi.ChunkItem[rowTask, struct{}], l *chunkLog) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var chunk []rowTask
	for _, it := range items {
		chunk = append(chunk, it.Task)
		if it.Task.FailOnce && !l.failed[it.Task.N] {
			l.failed[it.Task.N] = true
			it.Set(venturi.Outcome{}, venturi.RetryIn(10*time.Millisecond, errors.New("row refused")))
			continue
		}
		if it.Run.RunCount() > 1 {
			it.Set(venturi.CompletedWith("second run"), nil)
			continue
		}
	}
	l.chunks = append(l.chunks, chunk)
	return nil // the items left unset complete
}

func startChunkWorker(t *testing.T, pool *pgxpool.Pool, l *chunkLog, size int) {
	t.Helper()
	cfg := fastConfig()
	cfg.Concurrency = 20
	w := newWorker(t, pool, l, cfg)
	venturi.MustRegisterChunks(w, venturi.ChunkConfig[rowTask]{Size: size, Linger: time.Second,
		Key: func(r rowTask) string { return r.Tenant }}, handleRows)
	startWorker(t, w)
}

// Jobs claimed together are handled in chunks of one key and at most Size; each job
// keeps its own outcome: the one refused is retried alone and completes on its second
// run, every other job completes once.
func TestChunks(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	var tasks []venturi.Task
	for i := range 30 {
		tasks = append(tasks, rowTask{Tenant: fmt.Sprintf("t%d", i%2), N: i, FailOnce: i == 7})
	}
	res, err := q.EnqueueMany(ctx, tasks)
	if err != nil {
		t.Fatal(err)
	}
	l := &chunkLog{failed: map[int]bool{}}
	startChunkWorker(t, pool, l, 8)
	for _, r := range res {
		j := waitJob(t, q, r.ID, "completed", func(j *venturi.Job) bool { return j.State == venturi.StateCompleted })
		if j.State != venturi.StateCompleted {
			t.Fatalf("job %+v", j)
		}
		want := 1
		if r.ID == res[7].ID {
			want = 2
		}
		if j.RunCount != want {
			t.Fatalf("job %s ran %d times, want %d", r.ID, j.RunCount, want)
		}
	}
	seen := map[int]int{}
	several := false
	for _, c := range l.all() {
		if len(c) > 8 {
			t.Fatalf("a chunk of %d", len(c))
		}
		several = several || len(c) > 1
		for _, r := range c {
			if r.Tenant != c[0].Tenant {
				t.Fatalf("a chunk mixes tenants: %v", c)
			}
			seen[r.N]++
		}
	}
	if !several {
		t.Fatalf("no chunk held more than one job: %v", l.all())
	}
	for i := range 30 {
		want := 1
		if i == 7 {
			want = 2
		}
		if seen[i] != want {
			t.Fatalf("row %d handled %d times, want %d", i, seen[i], want)
		}
	}
}

// A handler's error fails the jobs it gave no outcome; a panic is such an error.
func TestChunkHandlerError(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	w := newWorker(t, pool, struct{}{}, fastConfig())
	venturi.MustRegisterChunks(w, venturi.ChunkConfig[rowTask]{Size: 4, Linger: 100 * time.Millisecond},
		func(_ context.Context, items []*venturi.ChunkItem[rowTask, struct{}], _ struct{}) error {
			for _, it := range items {
				if it.Task.N == 0 {
					it.Complete()
				}
			}
			for _, it := range items {
				if it.Task.Tenant == "panic" {
					panic("row " + it.Task.Tenant)
				}
			}
			return venturi.Permanent(errors.New("the chunk failed"))
		})
	if err := venturi.RegisterChunks(w, venturi.ChunkConfig[rowTask]{Size: -1}, handleRowsAny); err == nil {
		t.Fatal("a negative Size registered")
	}
	startWorker(t, w)
	res, err := q.EnqueueMany(ctx, []venturi.Task{rowTask{N: 0}, rowTask{N: 2}})
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, q, res[0].ID, "row 0 completed", func(j *venturi.Job) bool { return j.State == venturi.StateCompleted })
	j := waitJob(t, q, res[1].ID, "row 2 dead", func(j *venturi.Job) bool { return j.State == venturi.StateDead })
	if !strings.Contains(lastEntry(j).Note, "the chunk failed") {
		t.Fatalf("row 2's note %q", lastEntry(j).Note)
	}
	p, err := q.Enqueue(ctx, rowTask{Tenant: "panic", N: 3})
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, q, p.ID, "the panic noted", func(j *venturi.Job) bool {
		return j.RunCount >= 1 && j.State != venturi.StateRunning && strings.Contains(lastEntry(j).Note, "panic: row panic")
	})
}

func handleRowsAny(context.Context, []*venturi.ChunkItem[rowTask, struct{}], struct{}) error {
	return nil
}

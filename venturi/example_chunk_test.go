package venturi_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"sync"
	"time"

	"github.com/venturi-dev/venturi"
)

// IndexTag adds one bookmark to a tag's index; many are written in one statement.
type IndexTag struct {
	Tag      string `json:"tag"`
	Bookmark int    `json:"bookmark"`
}

// Kind names the task.
func (IndexTag) Kind() string { return "index-tag" }

// tagIndex is the worker's state: the index, written a chunk at a time.
type tagIndex struct {
	mu      sync.Mutex
	entries map[string][]int
	writes  int
	mixed   bool
}

// Jobs of one tag handled together: the handler takes up to 50 claimed jobs of a tag and
// writes them at once; each job keeps its own outcome.
func ExampleRegisterChunks() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()

	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	var tasks []venturi.Task
	for i := range 40 {
		tasks = append(tasks, IndexTag{Tag: []string{"go", "sql"}[i%2], Bookmark: i})
	}
	res, err := q.EnqueueMany(ctx, tasks)
	if err != nil {
		log.Fatal(err)
	}

	index := &tagIndex{entries: map[string][]int{}}
	var w *venturi.Worker[*tagIndex]
	w, err = venturi.NewWorker(pool, index, venturi.Config{
		Concurrency:  40,
		PollInterval: 10 * time.Millisecond,
		Logger:       slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	venturi.MustRegisterChunks(w, venturi.ChunkConfig[IndexTag]{
		Size:   50,
		Linger: 100 * time.Millisecond,
		Key:    func(t IndexTag) string { return t.Tag }, // a chunk holds one tag's jobs
	}, func(_ context.Context, items []*venturi.ChunkItem[IndexTag, struct{}], ix *tagIndex) error {
		ix.mu.Lock()
		defer ix.mu.Unlock()
		ix.writes++ // one write for the chunk
		for _, it := range items {
			ix.mixed = ix.mixed || it.Task.Tag != items[0].Task.Tag
			ix.entries[it.Task.Tag] = append(ix.entries[it.Task.Tag], it.Task.Bookmark)
		}
		return nil // every item completes
	})
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(context.Background())

	actx, cancel := context.WithTimeout(ctx, exampleWithin)
	defer cancel()
	for _, r := range res {
		if j, err := q.Await(actx, r.ID); err != nil || j.State != venturi.StateCompleted {
			log.Fatalf("job %s: %v", r.ID, err)
		}
	}
	index.mu.Lock()
	defer index.mu.Unlock()
	fmt.Printf("go: %d, sql: %d, fewer writes than jobs: %v, a chunk mixed tags: %v\n",
		len(index.entries["go"]), len(index.entries["sql"]), index.writes < 40, index.mixed)
	// Output:
	// go: 20, sql: 20, fewer writes than jobs: true, a chunk mixed tags: false
}

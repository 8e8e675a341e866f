package venturi

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Chunks: a kind whose handler takes many claimed jobs at once (see the README, "Chunks").

// Defaults of ChunkConfig.
const (
	DefaultChunkSize   = 100
	DefaultChunkLinger = 50 * time.Millisecond
)

// ChunkConfig configures a chunked kind ([RegisterChunks]).
type ChunkConfig[T Task] struct {
	// Size is the most jobs one call of the handler takes. Each job of a chunk waits in
	// one of its queue's Concurrency slots, so a chunk holds at most that many. Default
	// DefaultChunkSize.
	Size int
	// Linger is how long a chunk's first job waits for others before the handler runs
	// with what came. Default DefaultChunkLinger.
	Linger time.Duration
	// Key groups the jobs: a chunk holds jobs of one key (a tenant, a target). Nil: all
	// the kind's jobs are one group.
	Key func(T) string
}

// ChunkItem is one job of a chunk: its task, its run (its own lease, journal, carry and
// steps), and the outcome the handler gives it with Complete, Fail or Set.
type ChunkItem[T Task, C any] struct {
	// Task is the job's payload.
	Task T
	// Run is the job's run.
	Run *Run[C]

	ctx     context.Context
	outcome Outcome
	err     error
	set     bool
}

// Complete gives the job the outcome Completed.
func (i *ChunkItem[T, C]) Complete() { i.Set(Completed(), nil) }

// Fail fails the job alone with err, as a handler's error does (retried by its backoff,
// or dead for a [Permanent] one); the chunk's other jobs keep their own outcomes.
func (i *ChunkItem[T, C]) Fail(err error) {
	if err == nil {
		err = errors.New("failed without an error")
	}
	i.Set(Outcome{}, err)
}

// Set gives the job the outcome a handler would return (o, err).
func (i *ChunkItem[T, C]) Set(o Outcome, err error) { i.outcome, i.err, i.set = o, err, true }

// ChunkFunc handles a chunk of jobs against the worker's state. It gives each item its
// outcome (ChunkItem.Complete, Fail, Set); the items it leaves unset complete when it
// returns nil, and fail with its error otherwise (a panic is such an error). ctx ends
// when every job's run has ended its own context (their leases lost, the worker's hard
// stop).
type ChunkFunc[T Task, S, C any] func(ctx context.Context, items []*ChunkItem[T, C], state S) error

// RegisterChunks adds task type T to w with handle as a chunked handler: the jobs of T's
// kind that the worker claims are handed to handle together, up to cfg.Size of one
// cfg.Key at a time, formed within cfg.Linger of the first one's start. Each job keeps
// everything a job has (lease, journal entry, carry, steps, events, middleware) and its
// own outcome: one job's failure retries that job alone. It returns the errors of
// [Register], and one for a nil handle or a negative Size or Linger.
func RegisterChunks[T Task, S, C any](w *Worker[S], cfg ChunkConfig[T], handle ChunkFunc[T, S, C]) error {
	switch {
	case handle == nil:
		return errors.New("venturi: RegisterChunks with a nil handler")
	case cfg.Size < 0 || cfg.Linger < 0:
		return fmt.Errorf("venturi: RegisterChunks: negative Size %d or Linger %v", cfg.Size, cfg.Linger)
	}
	if cfg.Size == 0 {
		cfg.Size = DefaultChunkSize
	}
	if cfg.Linger == 0 {
		cfg.Linger = DefaultChunkLinger
	}
	c := &chunker[T, S, C]{cfg: cfg, fn: handle, open: map[string]*chunk[T, C]{}}
	return register(w, c.handle)
}

// MustRegisterChunks is like [RegisterChunks] but panics on error.
func MustRegisterChunks[T Task, S, C any](w *Worker[S], cfg ChunkConfig[T], handle ChunkFunc[T, S, C]) {
	if err := RegisterChunks(w, cfg, handle); err != nil {
		panic(err)
	}
}

// chunker forms a kind's chunks: each job's run (its own goroutine, in its own slot)
// joins the open chunk of its key; the first one leads: it waits until the chunk is
// full or its linger passed, closes it, runs the handler for all, and the others return
// the outcomes it gave them.
type chunker[T Task, S, C any] struct {
	cfg  ChunkConfig[T]
	fn   ChunkFunc[T, S, C]
	mu   sync.Mutex
	open map[string]*chunk[T, C] // by key: the chunk jobs join
}

type chunk[T Task, C any] struct {
	items  []*ChunkItem[T, C]
	full   chan struct{} // closed when it reached Size
	done   chan struct{} // closed when every item has its outcome
	closed bool          // takes no more items
}

// handle is the kind's HandlerFunc: it runs for each job.
func (c *chunker[T, S, C]) handle(ctx context.Context, task T, run *Run[C], state S) (Outcome, error) {
	key := ""
	if c.cfg.Key != nil {
		key = c.cfg.Key(task)
	}
	item := &ChunkItem[T, C]{Task: task, Run: run, ctx: ctx}
	c.mu.Lock()
	ch := c.open[key]
	lead := ch == nil
	if lead {
		ch = &chunk[T, C]{full: make(chan struct{}), done: make(chan struct{})}
		c.open[key] = ch
	}
	ch.items = append(ch.items, item)
	if len(ch.items) >= c.cfg.Size {
		c.closeLocked(key, ch)
		close(ch.full)
	}
	c.mu.Unlock()
	if !lead {
		<-ch.done // the leader always closes it
		return item.outcome, item.err
	}
	t := time.NewTimer(c.cfg.Linger)
	select {
	case <-ch.full:
	case <-t.C:
	case <-ctx.Done():
	}
	t.Stop()
	c.mu.Lock()
	c.closeLocked(key, ch)
	items := ch.items
	c.mu.Unlock()
	c.run(items, state)
	close(ch.done)
	return item.outcome, item.err
}

// closeLocked stops ch from taking more items (c.mu held).
func (c *chunker[T, S, C]) closeLocked(key string, ch *chunk[T, C]) {
	if !ch.closed {
		ch.closed = true
		if c.open[key] == ch {
			delete(c.open, key)
		}
	}
}

// run calls the handler for items and gives every item an outcome.
func (c *chunker[T, S, C]) run(items []*ChunkItem[T, C], state S) {
	// The chunk's context ends when every item's has ended.
	ctx, cancel := context.WithCancel(context.WithoutCancel(items[0].ctx))
	defer cancel()
	var left sync.WaitGroup
	left.Add(len(items))
	stops := make([]func() bool, len(items))
	for i, it := range items {
		stops[i] = context.AfterFunc(it.ctx, left.Done)
	}
	go func() {
		left.Wait()
		cancel()
	}()
	err := c.call(ctx, items, state)
	for i, it := range items {
		if stops[i]() {
			left.Done() // its context had not ended: count it out, so the goroutine ends
		}
		if !it.set {
			it.outcome, it.err = Outcome{}, err
		}
	}
}

// call runs the handler and turns a panic into an error carrying the stack.
func (c *chunker[T, S, C]) call(ctx context.Context, items []*ChunkItem[T, C], state S) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = panicError(r)
		}
	}()
	return c.fn(ctx, items, state)
}

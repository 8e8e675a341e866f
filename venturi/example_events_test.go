package venturi_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/venturi-dev/venturi"
)

// Resize opts in to the durable event stream.
type Resize struct {
	Image string `json:"image"`
}

func (Resize) Kind() string       { return "resize" }
func (Resize) StreamEvents() bool { return true } // venturi.EventStreamer

func (t Resize) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	if run.RunCount() == 1 {
		return venturi.Outcome{}, venturi.RetryIn(time.Millisecond, fmt.Errorf("storage busy"))
	}
	return venturi.CompletedWith("resized " + t.Image), nil
}

// The durable stream: any process reads it with a cursor it stores, and resumes there
// after a restart without missing or repeating an event.
func ExampleQueue_Events() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()
	w, err := venturi.NewWorker(pool, struct{}{}, venturi.Config{PollInterval: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	venturi.MustRegister[Resize](w)
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(context.Background())
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	res, _ := q.Enqueue(ctx, Resize{Image: "cat.png"})
	awaitFinished(q, res.ID)

	var cursor venturi.EventCursor // "" is the beginning; store it to resume after a restart
	var seen []string
	for len(seen) < 5 {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		events, next, err := q.WaitEvents(wctx, cursor, 100)
		cancel()
		if err != nil {
			log.Fatal(err)
		}
		for _, e := range events {
			s := fmt.Sprintf("%s run=%d", e.Event, e.Run)
			if e.Event == venturi.EventFailed {
				s += fmt.Sprintf(" retry in %v", e.Delay)
			}
			seen = append(seen, s)
		}
		cursor = next
	}
	fmt.Println(strings.Join(seen, "\n"))
	// Output:
	// enqueued run=0
	// started run=1
	// failed run=1 retry in 1ms
	// started run=2
	// completed run=2
}

// A subscriber of a worker sees its runs in process; a slow one never slows the worker,
// and learns how many events it missed.
func ExampleWorker_Subscribe() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()
	w, err := venturi.NewWorker(pool, struct{}{}, venturi.Config{PollInterval: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	venturi.MustRegister[Resize](w)
	sub := w.Subscribe(venturi.SubscribeConfig{Buffer: 100, Events: []venturi.Event{venturi.EventFailed, venturi.EventCompleted}})
	defer sub.Close()
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(context.Background())
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	_, _ = q.Enqueue(ctx, Resize{Image: "dog.png"})
	for e := range sub.Events() {
		fmt.Println(e.Kind, e.Event, e.Run, e.Note)
		if e.Event == venturi.EventCompleted {
			break
		}
	}
	fmt.Println("dropped:", sub.Dropped())
	// Output:
	// resize failed 1 storage busy
	// resize completed 2 resized dog.png
	// dropped: 0
}

// ---- Tracing with middleware (a fake tracer: no OpenTelemetry dependency) ----

// tracer is a stand-in for an OpenTelemetry tracer: spans with a trace ID and a parent.
type tracer struct {
	mu    sync.Mutex
	spans []string
	next  int
}

type span struct {
	t               *tracer
	name, trace, id string
	parent          string
}

func (t *tracer) start(name, trace, parent string) *span {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.next++
	if trace == "" {
		trace = fmt.Sprintf("trace%d", t.next)
	}
	return &span{t: t, name: name, trace: trace, id: fmt.Sprintf("span%d", t.next), parent: parent}
}

func (s *span) end(err error) {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	s.t.spans = append(s.t.spans, fmt.Sprintf("%s trace=%s parent=%q err=%v", s.name, s.trace, s.parent, err != nil))
}

// traceparent is the W3C header's shape: version-trace-span-flags.
func (s *span) traceparent() string { return "00-" + s.trace + "-" + s.id + "-01" }

func parseTraceparent(v string) (trace, parent string) {
	p := strings.Split(v, "-")
	if len(p) != 4 {
		return "", ""
	}
	return p[1], p[2]
}

// Enqueue middleware starts a span and stamps its traceparent in the job's metadata; work
// middleware continues the trace in the worker, as a child of the enqueue's span.
func ExampleWorkMiddleware() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()
	tr := &tracer{}

	q := venturi.NewQueue(pool, venturi.QueueConfig{Middleware: []venturi.EnqueueMiddleware{
		func(ctx context.Context, info *venturi.EnqueueInfo, next func(context.Context) (venturi.Result, error)) (venturi.Result, error) {
			sp := tr.start("enqueue "+info.Kind, "", "")
			info.Meta["traceparent"] = sp.traceparent()
			res, err := next(ctx)
			sp.end(err)
			return res, err
		},
	}})
	w, err := venturi.NewWorker(pool, struct{}{}, venturi.Config{
		PollInterval: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
		Middleware: []venturi.WorkMiddleware{
			func(ctx context.Context, job *venturi.JobInfo, next func(context.Context) (venturi.Outcome, error)) (venturi.Outcome, error) {
				trace, parent := parseTraceparent(job.Meta["traceparent"])
				sp := tr.start(fmt.Sprintf("run %s #%d", job.Kind, job.Run), trace, parent)
				o, err := next(ctx)
				sp.end(err)
				return o, err
			},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	venturi.MustRegister[Resize](w)
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	res, _ := q.Enqueue(ctx, Resize{Image: "bird.png"})
	awaitFinished(q, res.ID)
	_ = w.Stop(context.Background())
	fmt.Println(strings.Join(tr.spans, "\n"))
	// Output:
	// enqueue resize trace=trace1 parent="" err=false
	// run resize #1 trace=trace1 parent="span1" err=true
	// run resize #2 trace=trace1 parent="span1" err=false
}

package venturiotel_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/venturiotel"
)

// attr returns the span's attribute key.
func attr(s tracetest.SpanStub, key string) attribute.Value {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// An enqueue inside a request's span starts a producer span under it and carries its
// context in the job's metadata; each run, in a real worker, starts a consumer span in a
// trace of its own that links to the enqueue's span, and the handler gets the enqueue's
// baggage.
func TestRunSpanLinksToTheEnqueueSpan(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	x := newTelemetry(t, venturiotel.Config{Propagator: prop})
	q := venturi.NewQueue(pool, venturi.QueueConfig{Middleware: []venturi.EnqueueMiddleware{x.tel.Enqueue}})
	seen := &seenBaggage{}
	startWorker(t, pool, x.tel, seen, 0)

	member, _ := baggage.NewMember("tenant", "acme")
	bag, _ := baggage.New(member)
	ctx, req := x.tp.Tracer("test").Start(baggage.ContextWithBaggage(context.Background(), bag), "POST /things")
	r, err := q.Enqueue(ctx, otelTask{Do: "fail_once"})
	req.End()
	if err != nil {
		t.Fatal(err)
	}
	j := waitState(t, q, r.ID, venturi.StateCompleted)

	request, enq := x.span(t, "POST /things"), x.span(t, "venturi.enqueue otel_task")
	if enq.Parent.SpanID() != request.SpanContext.SpanID() || enq.SpanKind != trace.SpanKindProducer {
		t.Fatalf("enqueue span: parent %v (want the request's %v), kind %v", enq.Parent.SpanID(), request.SpanContext.SpanID(), enq.SpanKind)
	}
	if got := attr(enq, "messaging.message.id").AsString(); got != r.ID.String() {
		t.Errorf("enqueue span's job id %q, want %s", got, r.ID)
	}
	if got := attr(enq, "venturi.action").AsString(); got != "inserted" {
		t.Errorf("enqueue span's action %q", got)
	}
	tp := j.Meta["traceparent"]
	if !strings.Contains(tp, enq.SpanContext.TraceID().String()) || !strings.Contains(tp, enq.SpanContext.SpanID().String()) {
		t.Fatalf("job meta traceparent %q does not name the enqueue span %v", tp, enq.SpanContext)
	}

	var runs []tracetest.SpanStub
	for _, s := range x.spans.GetSpans() {
		if s.Name == "venturi.work otel_task" {
			runs = append(runs, s)
		}
	}
	if len(runs) != 2 {
		t.Fatalf("%d run spans, want 2 (a failed run and a completed one): %v", len(runs), x.names())
	}
	slices.SortFunc(runs, func(a, b tracetest.SpanStub) int {
		return int(attr(a, "venturi.run").AsInt64() - attr(b, "venturi.run").AsInt64())
	})
	for i, run := range runs {
		if run.SpanKind != trace.SpanKindConsumer {
			t.Errorf("run %d: kind %v", i+1, run.SpanKind)
		}
		if run.Parent.IsValid() || run.SpanContext.TraceID() == enq.SpanContext.TraceID() {
			t.Errorf("run %d: parent %v, trace %v: want the root of a trace of its own", i+1, run.Parent, run.SpanContext.TraceID())
		}
		if len(run.Links) != 1 || !run.Links[0].SpanContext.Equal(enq.SpanContext.WithRemote(true)) {
			t.Errorf("run %d: links %v, want the enqueue span %v", i+1, run.Links, enq.SpanContext)
		}
		if got := attr(run, "messaging.message.id").AsString(); got != r.ID.String() {
			t.Errorf("run %d: job id %q", i+1, got)
		}
		if got := attr(run, "venturi.run").AsInt64(); got != int64(i+1) {
			t.Errorf("run %d: venturi.run %d", i+1, got)
		}
		if got := attr(run, "messaging.destination.name").AsString(); got != venturi.DefaultQueue {
			t.Errorf("run %d: queue %q", i+1, got)
		}
		if got := attr(run, "venturi.kind").AsString(); got != "otel_task" {
			t.Errorf("run %d: kind %q", i+1, got)
		}
	}
	if got := attr(runs[0], "venturi.outcome").AsString(); got != "failed" || runs[0].Status.Code != codes.Error ||
		!strings.Contains(runs[0].Status.Description, "try again") {
		t.Errorf("run 1: outcome %q, status %+v; want failed with status Error", got, runs[0].Status)
	}
	if got := attr(runs[1], "venturi.outcome").AsString(); got != "completed" || runs[1].Status.Code != codes.Unset {
		t.Errorf("run 2: outcome %q, status %+v; want completed, status unset", got, runs[1].Status)
	}
	if got := seen.get(); !slices.Equal(got, []string{"acme", "acme"}) {
		t.Errorf("the handlers saw tenants %q, want the enqueue's baggage in both runs", got)
	}
}

// With ParentFromEnqueue each run's span is a child of the enqueue's span, in its trace.
func TestRunSpanChildOfTheEnqueueSpan(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	x := newTelemetry(t, venturiotel.Config{ParentFromEnqueue: true})
	q := venturi.NewQueue(pool, venturi.QueueConfig{Middleware: []venturi.EnqueueMiddleware{x.tel.Enqueue}})
	startWorker(t, pool, x.tel, &seenBaggage{}, 0)
	r, err := q.Enqueue(context.Background(), otelTask{})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, q, r.ID, venturi.StateCompleted)
	enq, run := x.span(t, "venturi.enqueue otel_task"), x.span(t, "venturi.work otel_task")
	if enq.Parent.IsValid() {
		t.Errorf("an enqueue without a span in its context has parent %v", enq.Parent)
	}
	if run.Parent.SpanID() != enq.SpanContext.SpanID() || run.SpanContext.TraceID() != enq.SpanContext.TraceID() || len(run.Links) != 0 {
		t.Fatalf("run span: parent %v trace %v links %v; want a child of %v", run.Parent, run.SpanContext.TraceID(), run.Links, enq.SpanContext)
	}
}

// A panicking handler's run span records the panic as an exception with its stack, and
// the run dies (MaxFailures 1) with status Error; a job without trace context (enqueued
// without the middleware) still gets a run span, the root of its own trace, unlinked.
func TestRunSpanRecordsPanicAndWorksWithoutTraceContext(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	x := newTelemetry(t, venturiotel.Config{})
	q := venturi.NewQueue(pool, venturi.QueueConfig{}) // no enqueue middleware
	startWorker(t, pool, x.tel, &seenBaggage{}, 1)
	r, err := q.Enqueue(context.Background(), otelTask{Do: "panic"})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, q, r.ID, venturi.StateDead)
	run := x.span(t, "venturi.work otel_task")
	if run.Parent.IsValid() || len(run.Links) != 0 {
		t.Errorf("parent %v links %v, want neither", run.Parent, run.Links)
	}
	if got := attr(run, "venturi.outcome").AsString(); got != "dead" || run.Status.Code != codes.Error {
		t.Errorf("outcome %q status %+v, want dead with status Error", got, run.Status)
	}
	var found bool
	for _, e := range run.Events {
		if e.Name != "exception" {
			continue
		}
		var typ, msg, stack string
		for _, kv := range e.Attributes {
			switch kv.Key {
			case "exception.type":
				typ = kv.Value.AsString()
			case "exception.message":
				msg = kv.Value.AsString()
			case "exception.stacktrace":
				stack = kv.Value.AsString()
			}
		}
		found = typ == "panic" && msg == "boom" && strings.Contains(stack, "otelTask.Handle")
	}
	if !found {
		t.Fatalf("no panic exception event with the handler's stack: %+v", run.Events)
	}
}

// A refused enqueue ends its span with status Error and is not counted.
func TestRefusedEnqueueSpan(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	x := newTelemetry(t, venturiotel.Config{})
	q := venturi.NewQueue(pool, venturi.QueueConfig{Middleware: []venturi.EnqueueMiddleware{x.tel.Enqueue}})
	if _, err := q.Enqueue(context.Background(), otelTask{Key: strings.Repeat("k", venturi.MaxDedupKeyBytes+1)}); !errors.Is(err, venturi.ErrDedupKeyTooLong) {
		t.Fatalf("an enqueue with a dedup key too long: %v, want ErrDedupKeyTooLong", err)
	}
	enq := x.span(t, "venturi.enqueue otel_task")
	if enq.Status.Code != codes.Error {
		t.Errorf("status %+v, want Error", enq.Status)
	}
	if n := counterValue(x.collect(t), "venturi.jobs.enqueued", nil); n != 0 {
		t.Errorf("a refused enqueue was counted: %d", n)
	}
}

// A workflow enqueued in a request's span is one trace: every node's enqueue span is a
// child of the request's, and with ParentFromEnqueue every run a child of its enqueue;
// the spans carry the workflow's ID and each job's node.
func TestWorkflowIsOneTrace(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	x := newTelemetry(t, venturiotel.Config{ParentFromEnqueue: true})
	q := venturi.NewQueue(pool, venturi.QueueConfig{Middleware: []venturi.EnqueueMiddleware{x.tel.Enqueue}})
	startWorker(t, pool, x.tel, &seenBaggage{}, 0)
	ctx, request := x.tp.Tracer("test").Start(context.Background(), "request")
	wf := venturi.NewWorkflow("traced")
	a := wf.Add("a", otelTask{})
	wf.Add("b", otelTask{}, venturi.Needs(a))
	res, err := q.EnqueueWorkflow(ctx, wf)
	request.End()
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, q, res.Jobs["b"], venturi.StateCompleted)
	trace := request.SpanContext().TraceID()
	nodes := map[string]int{}
	for _, s := range x.spans.GetSpans() {
		if s.Name == "request" {
			continue
		}
		if s.SpanContext.TraceID() != trace {
			t.Fatalf("span %s is in trace %v, not the request's %v", s.Name, s.SpanContext.TraceID(), trace)
		}
		if attr(s, "venturi.workflow.id").AsString() != res.ID.String() {
			t.Fatalf("span %s: workflow %q", s.Name, attr(s, "venturi.workflow.id").AsString())
		}
		nodes[attr(s, "venturi.workflow.node").AsString()]++
	}
	if nodes["a"] != 2 || nodes["b"] != 2 {
		t.Fatalf("spans by node %v; want an enqueue and a run of each", nodes)
	}
}

package venturiotel

import (
	"context"
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/venturi-dev/venturi"
)

// OutcomeLost is the outcome of a run that lost its lease: the worker records nothing
// for it (its job was rescued and runs again).
const OutcomeLost = "lost"

// maxStatusBytes bounds an error's text in a span's status description.
const maxStatusBytes = 1024

// Enqueue is venturi enqueue middleware ([venturi.EnqueueMiddleware]): it starts a
// producer span "venturi.enqueue <kind>" as a child of ctx's span, writes the span's
// context into the job's metadata (info.Meta) with the propagator, calls next within the
// span, and counts the enqueue (venturi.jobs.enqueued) with the action it returned.
// A refused enqueue ends the span with status Error and is not counted.
func (in *Instrumentation) Enqueue(ctx context.Context, info *venturi.EnqueueInfo, next func(context.Context) (venturi.Result, error)) (venturi.Result, error) {
	ctx, span := in.tracer.Start(ctx, "venturi.enqueue "+info.Kind, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(keyMessagingSystem.String("venturi"), keyOperationType.String("send"),
			keyOperationName.String("enqueue"), keyDestination.String(info.Queue), keySpanKind.String(info.Kind),
			keySpanTx.Bool(info.Tx)))
	defer span.End()
	if info.Meta == nil {
		info.Meta = venturi.Meta{}
	}
	in.textMap().Inject(ctx, propagation.MapCarrier(info.Meta))
	span.SetAttributes(workflowAttrs(info.Meta)...)
	r, err := next(ctx)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, statusText(err))
		return r, err
	}
	span.SetAttributes(keyMessageID.String(r.ID.String()), keySpanAction.String(r.Action.String()))
	in.enqueued.Add(ctx, 1, metric.WithAttributes(keyQueue.String(info.Queue), keyKind.String(info.Kind),
		keyAction.String(r.Action.String())))
	return r, err
}

// Work is venturi work middleware ([venturi.WorkMiddleware]): it starts a consumer span
// "venturi.work <kind>" per run, linked to the enqueue's span context read from the
// job's metadata (or its child, with [Config].ParentFromEnqueue), records the job's wait
// (venturi.job.wait, from JobInfo.Due to JobInfo.StartedAt), calls next within the span,
// then records the run's duration and counts it (venturi.jobs.finished) by the outcome
// the worker journals ([venturi.JobInfo.EndEvent]). Register it first in
// [venturi.Config].Middleware, so that it sees the final result.
func (in *Instrumentation) Work(ctx context.Context, job *venturi.JobInfo, next func(context.Context) (venturi.Outcome, error)) (o venturi.Outcome, err error) {
	kind := attribute.NewSet(keyQueue.String(job.Queue), keyKind.String(job.Kind))
	if !job.Due.IsZero() && !job.StartedAt.IsZero() {
		in.wait.Record(ctx, max(job.StartedAt.Sub(job.Due), 0).Seconds(), metric.WithAttributeSet(kind))
	}
	// The enqueue's context, extracted on its own: ctx may carry a span of its own.
	carried := in.textMap().Extract(context.Background(), propagation.MapCarrier(job.Meta))
	if b := baggage.FromContext(carried); b.Len() > 0 {
		ctx = baggage.ContextWithBaggage(ctx, b)
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(keyMessagingSystem.String("venturi"), keyOperationType.String("process"),
			keyOperationName.String("work"), keyDestination.String(job.Queue), keyMessageID.String(job.ID.String()),
			keySpanKind.String(job.Kind), keySpanRun.Int(job.Run), keySpanWorker.String(job.Worker)),
		trace.WithAttributes(workflowAttrs(job.Meta)...)}
	start := ctx
	switch sc := trace.SpanContextFromContext(carried); {
	case in.parent && sc.IsValid():
		start = trace.ContextWithRemoteSpanContext(ctx, sc)
	case sc.IsValid():
		opts = append(opts, trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: sc}))
	default:
		opts = append(opts, trace.WithNewRoot())
	}
	ctx, span := in.tracer.Start(start, "venturi.work "+job.Kind, opts...)
	began := time.Now()
	ended := false
	defer func() {
		if ended {
			return
		}
		// A panic in middleware inside this one (the worker fails the run), or
		// runtime.Goexit (recover returns nil).
		r := recover()
		in.endRun(ctx, span, job, kind, time.Since(began), venturi.Outcome{}, fmt.Errorf("panic: %v\n%s", r, debug.Stack()))
		if r != nil {
			panic(r)
		}
	}()
	o, err = next(ctx)
	ended = true
	in.endRun(ctx, span, job, kind, time.Since(began), o, err)
	return o, err
}

// endRun records a run's end on its span and in the metrics, and ends the span.
func (in *Instrumentation) endRun(ctx context.Context, span trace.Span, job *venturi.JobInfo, kind attribute.Set,
	d time.Duration, o venturi.Outcome, err error) {
	defer span.End()
	outcome := string(job.EndEvent(o, err))
	if outcome == "" {
		outcome = OutcomeLost
	}
	span.SetAttributes(keySpanOutcome.String(outcome))
	attrs := metric.WithAttributes(append(kind.ToSlice(), keyOutcome.String(outcome))...)
	in.duration.Record(ctx, d.Seconds(), attrs)
	in.finished.Add(ctx, 1, attrs)
	if err == nil {
		return
	}
	if msg, stack, ok := strings.Cut(err.Error(), "\n"); ok && strings.HasPrefix(msg, "panic: ") {
		span.AddEvent("exception", trace.WithAttributes(keyExceptionType.String("panic"),
			keyExceptionMessage.String(strings.TrimPrefix(msg, "panic: ")), keyExceptionStack.String(stack)))
	} else {
		span.RecordError(err)
	}
	switch venturi.Event(outcome) {
	case venturi.EventFailed, venturi.EventDead:
		span.SetStatus(codes.Error, statusText(err))
	case OutcomeLost:
		span.SetStatus(codes.Error, "venturi: lease lost")
	}
}

// statusText is an error's first line, bounded, for a span's status.
func statusText(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	if len(s) > maxStatusBytes {
		s = strings.ToValidUTF8(s[:maxStatusBytes], "") + "…"
	}
	return s
}

// workflowAttrs are the span attributes of a workflow's job: venturi.workflow.id and
// venturi.workflow.node, from the metadata venturi sets on it (venturi.MetaWorkflow,
// venturi.MetaNode); none for other jobs.
func workflowAttrs(m venturi.Meta) []attribute.KeyValue {
	id, ok := m[venturi.MetaWorkflow]
	if !ok {
		return nil
	}
	return []attribute.KeyValue{keySpanWorkflow.String(id), keySpanNode.String(m[venturi.MetaNode])}
}

package venturi

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"time"

	"github.com/oklog/ulid/v2"
)

// Meta is a job's metadata: string keys and values stored with the job (venturi_job.meta)
// and handed to its runs: trace context, a tenant, a request ID. Set it with [WithMeta]
// or in enqueue middleware ([EnqueueInfo].Meta); read it in work middleware
// ([JobInfo].Meta), with [Run.Meta], on [Job].Meta and on the job's events.
type Meta map[string]string

// MaxMetaBytes bounds a job's metadata, encoded as a JSON object.
const MaxMetaBytes = 8 << 10

// ErrMetaTooLarge reports metadata over [MaxMetaBytes].
var ErrMetaTooLarge = errors.New("venturi: job metadata over 8 KiB")

// WithMeta sets metadata keys on the job (later options and enqueue middleware may
// overwrite them). A merge into a pending job keeps that job's metadata.
func WithMeta(m Meta) EnqueueOption {
	return enqueueOptionFunc(func(o *enqueueOpts) {
		if len(m) == 0 {
			return
		}
		if o.meta == nil {
			o.meta = Meta{}
		}
		maps.Copy(o.meta, m)
	})
}

// WithEvents opts the job in to the durable event stream ([Queue.Events]), like a task's
// [EventStreamer] method.
func WithEvents() EnqueueOption {
	return enqueueOptionFunc(func(o *enqueueOpts) { o.events = true })
}

// EventStreamer is the optional task method that opts the kind's jobs in to the durable
// event stream: every transition of a job whose task returns true at enqueue is written
// to venturi_event in the transaction that makes it. Streaming costs a row per event
// and a notification per transaction; jobs that do not opt in cost nothing.
type EventStreamer interface {
	StreamEvents() bool
}

// decodeMeta decodes a stored meta column (nil, JSON null or an object).
func decodeMeta(b []byte) Meta {
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	var m Meta
	if json.Unmarshal(b, &m) != nil {
		return nil
	}
	return m
}

// JobInfo is what work middleware knows of the run it wraps.
type JobInfo struct {
	ID     ulid.ULID
	Kind   string
	Queue  string
	Run    int   // the run's number: 1 for the job's first
	Token  int64 // the run's fencing token
	Worker string
	// Meta is the job's metadata (nil when it has none). Do not modify it.
	Meta Meta
	// Due is when the job was due to run (its run_at when it was claimed: the enqueue's
	// time or its At/After, a retry's or a pause's end, a merge's moved due time), and
	// StartedAt when this run was claimed (attempted_at). Both are database-clock times,
	// so StartedAt minus Due is the time the job waited for a worker, whatever the
	// worker's own clock says.
	Due, StartedAt time.Time

	// end decides the journal event of a result, as the worker does after the
	// middleware returns (see EndEvent).
	end func(Outcome, error) Event
}

// EndEvent reports how the worker records a run whose handler chain returns (o, err):
// the journal event of the run's end, decided as the worker decides it:
// [EventCompleted], [EventPaused], [EventWaiting], [EventCancelled], [EventReplaced]
// (a newer job of its slot took over), [EventFailed] (retried), [EventDead] (a
// permanent error or the backstop), [EventInterrupted] (shutdown cut the run), or ""
// when the run lost its lease and nothing is recorded. It changes nothing. Work
// middleware calls it with the result it returns, so that metrics and traces name the
// outcome the journal will show; a middleware registered after it may still replace the
// result, so register the one that calls it first ([Config].Middleware).
func (j *JobInfo) EndEvent(o Outcome, err error) Event {
	if j.end == nil { // a JobInfo not made by a worker
		switch {
		case IsPermanent(err):
			return EventDead
		case err != nil:
			return EventFailed
		}
		switch o.kind {
		case outcomePause:
			return EventPaused
		case outcomeCancel:
			return EventCancelled
		case outcomeWait:
			return EventWaiting
		}
		return EventCompleted
	}
	return j.end(o, err)
}

// WorkMiddleware wraps every handler call of a worker: tracing, logging, timing, panic
// policy. It calls next to run the handler (and the middleware registered after it) and
// returns the outcome, which it may inspect or replace; a ctx it passes to next is the
// handler's. A panic in the handler reaches middleware as an error (its message starts
// with "panic: " and holds the stack); a panic in middleware itself is caught the same
// way and fails the run.
//
// Order: the first middleware in [Config].Middleware is the outermost: it runs first and
// sees the final outcome last.
type WorkMiddleware func(ctx context.Context, job *JobInfo, next func(context.Context) (Outcome, error)) (Outcome, error)

// EnqueueInfo is what enqueue middleware knows of an enqueue.
type EnqueueInfo struct {
	Task  Task
	Kind  string
	Queue string // the task's queue unless an option overrides it
	// Meta is the metadata the job gets: middleware may set keys (a traceparent, a
	// tenant). It holds the keys of [WithMeta] options.
	Meta Meta
	// Tx reports an enqueue in the caller's transaction (EnqueueTx, EnqueueManyTx).
	Tx bool
}

// EnqueueMiddleware wraps every enqueue of a [Queue], once per task: it may set
// metadata, start a span around the write, or refuse the task by returning an error
// without calling next. next writes the job (with info.Meta as it is then) and returns
// its [Result]. In EnqueueMany (and EnqueueManyTx), next returns once the task is
// prepared, with its planned ID and ActionInserted, and the batch is written after every
// task's middleware returned (a dedup merge may then report another action).
//
// Order: the first middleware in [QueueConfig].Middleware is the outermost.
type EnqueueMiddleware func(ctx context.Context, info *EnqueueInfo, next func(context.Context) (Result, error)) (Result, error)

// handleWith runs the worker's middleware around the handler call h, turning a panic in
// middleware into an error as safeHandle does for the handler's.
func handleWith(ctx context.Context, mws []WorkMiddleware, info *JobInfo, h func(context.Context) (Outcome, error)) (o Outcome, err error) {
	if len(mws) == 0 {
		return h(ctx)
	}
	defer func() {
		if r := recover(); r != nil {
			err = panicError(r)
		}
	}()
	next := h
	for i := len(mws) - 1; i >= 0; i-- {
		mw, inner := mws[i], next
		next = func(ctx context.Context) (Outcome, error) { return mw(ctx, info, inner) }
	}
	return next(ctx)
}

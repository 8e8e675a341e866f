package venturitest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"slices"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/internal/jsonb"
	"github.com/venturi-dev/venturi/internal/testhook"
)

// RunOptions describes the run a handler sees: which execution of the job it is, what the
// earlier runs left, and whether the worker is shutting down. The zero value is the first
// run of a fresh job.
type RunOptions[C any] struct {
	// ID is the job's ID; zero gets a new ULID.
	ID ulid.ULID
	// Token is the run's fencing token; zero means 1.
	Token int64
	// RunCount is the run's number, this run included; zero means 1 (the first run).
	RunCount int
	// Failures is how many earlier runs failed.
	Failures int
	// History is the journal of earlier runs and merges, oldest first: the job's whole
	// journal. Entries without a Seq are numbered from 1. As in a worker, the run's
	// History() returns the newest venturi.JournalRecent of them and
	// Run.EarlierHistory pages through the rest.
	History []venturi.JournalEntry
	// Carry is the carry the earlier runs left. It goes through a JSON round trip, as the
	// stored carry does.
	Carry C
	// ShuttingDown makes the run see a graceful shutdown that has already begun.
	ShuttingDown bool
	// Shutdown, when not nil, is the run's shutdown channel (a test closes it to begin a
	// shutdown mid-run); it takes precedence over ShuttingDown.
	Shutdown <-chan struct{}
	// Waited, when not nil, makes the previous run one that returned
	// venturi.WaitForSignal(timeout, Waited...): a waiting entry for those names is
	// appended to History, so Run.Waited reports them, and RunCount defaults to 2. It
	// tests a handler's resume path, with Signals (none: the wait timed out).
	Waited []string
	// Signals are the job's signals that no run has consumed, oldest first: what
	// Run.Signals returns (those with one of the names asked for, on every call). A signal
	// without a Seq is numbered by its position (from 1); without a SentAt it gets the
	// time of the call. Payloads are JSON; build one with SignalOf.
	Signals []venturi.Signal
	// CompleteTxErr, when not nil, is what Run.CompleteTx returns instead of succeeding:
	// venturi.ErrLeaseLost tests the path where the run lost its job.
	CompleteTxErr error
	// Workflow and Node place the job in a workflow, as its node Node (a zero Workflow:
	// the job is outside workflows, and the workflow calls return
	// venturi.ErrNotInWorkflow).
	Workflow ulid.ULID
	Node     string
	// Outputs are the outputs of the workflow's other nodes, by name, each encoded as
	// JSON: Run.Output reads any of them, Run.UpstreamOutputs returns them all.
	Outputs map[string]any
	// Batch, when not nil, is what Run.Batch returns (the job is a member or callback of
	// that batch); nil: Run.Batch returns venturi.ErrNotBatch.
	Batch *venturi.BatchInfo
}

// Result is what one run of a handler did: its outcome or error, and what it left in its
// run.
type Result[C any] struct {
	// Outcome is the outcome the handler returned (meaningful when Err is nil).
	Outcome venturi.Outcome
	// Err is the handler's error. A panic becomes an error, as in the worker, and so do a
	// task that cannot be encoded (the enqueue would refuse it) and a payload or carry that
	// does not decode (the worker would kill the job; the error is permanent).
	Err error
	// Panicked reports that the handler panicked; Err holds the value and the stack.
	Panicked bool
	// Carry is the carry the run left: the carry when Run.CompleteTx succeeded, and the
	// carry at return otherwise. The worker stores it when the job pauses or retries.
	Carry C
	// Attachment is the run's attachment (Run.SetAttachment), as of Run.CompleteTx when it
	// succeeded; nil when none was set.
	Attachment json.RawMessage
	// CompletedTx reports that the handler called Run.CompleteTx and it succeeded: its
	// outcome was recorded in the handler's transaction. Whether that transaction then
	// committed is the handler's business: one that returns an error after CompleteTx
	// usually rolled back, and the worker records the error (which Event reports).
	CompletedTx bool
	// CompletedTxOutcome is the outcome passed to the successful Run.CompleteTx.
	CompletedTxOutcome venturi.Outcome
	// Consumed are the signals the handler read with Run.Signals, in the order it first
	// read them: a worker marks them consumed when the run ends, whatever its outcome.
	Consumed []venturi.Signal
	// Output is the run's output (Run.SetOutput), stored for its node if it completes;
	// nil when none was set. DecodeOutput decodes it.
	Output json.RawMessage
	// Spawned are the full names of the nodes the run attached with Run.Spawn, in order:
	// written if it completes.
	Spawned []string
}

// DecodeOutput decodes the run's output into v; an error when it set none.
func (r Result[C]) DecodeOutput(v any) error {
	if r.Output == nil {
		return errors.New("venturitest: the run set no output")
	}
	return json.Unmarshal(r.Output, v)
}

// SignalOf builds a signal for [RunOptions].Signals: name, the JSON encoding of payload
// (nil for none) and a delivery ID. It panics when payload cannot be encoded, as a test
// helper may.
func SignalOf(name string, payload any, deliveryID string) venturi.Signal {
	b, err := encodeJSON(payload)
	if err != nil {
		panic(fmt.Sprintf("venturitest.SignalOf(%q): %v", name, err))
	}
	return venturi.Signal{Name: name, Payload: b, DeliveryID: deliveryID}
}

// Event returns the journal event the worker would record for the run: completed, paused,
// failed or dead (a permanent error). The worker's backstop (Config.MaxFailures) is not
// applied: a plain error is always failed.
func (r Result[C]) Event() venturi.Event {
	switch {
	case r.Err != nil && venturi.IsPermanent(r.Err):
		return venturi.EventDead
	case r.Err != nil:
		return venturi.EventFailed
	case r.Outcome.IsPause():
		return venturi.EventPaused
	}
	return venturi.EventCompleted
}

// Note returns the journal note the worker would record: the error's message, or the
// outcome's note.
func (r Result[C]) Note() string {
	if r.Err != nil {
		return r.Err.Error()
	}
	return r.Outcome.Note()
}

// IsPermanent reports whether the run failed permanently ([venturi.Permanent]): the
// worker sends the job to dead.
func (r Result[C]) IsPermanent() bool { return venturi.IsPermanent(r.Err) }

// RetryIn reports the delay a [venturi.RetryIn] error asks for. ok is false for a
// success, a permanent error, and a plain error, which retries after the worker's backoff.
func (r Result[C]) RetryIn() (d time.Duration, ok bool) {
	var te *venturi.TaskError
	if !errors.As(r.Err, &te) {
		return 0, false
	}
	return te.Delay()
}

// DecodeAttachment decodes the run's attachment into v. It returns an error when the run
// set no attachment.
func (r Result[C]) DecodeAttachment(v any) error {
	if r.Attachment == nil {
		return errors.New("venturitest: the run set no attachment")
	}
	return json.Unmarshal(r.Attachment, v)
}

// RunHandler runs task's Handle method once, in the caller's goroutine, without a database
// or a worker: it encodes the task and decodes it into a fresh T as the worker would, builds
// the [venturi.Run] that opts describe and returns what the handler did. S and C are
// inferred from state and opts:
//
//	res := venturitest.RunHandler(ctx, Resize{ImageID: 7}, deps, venturitest.RunOptions[ResizeCarry]{})
//
// Run.CompleteTx succeeds without writing anything (the handler's own transaction commits
// as usual) unless opts.CompleteTxErr says otherwise.
func RunHandler[T venturi.Handler[S, C], S, C any](ctx context.Context, task T, state S, opts RunOptions[C]) Result[C] {
	return RunFunc(ctx, func(ctx context.Context, t T, run *venturi.Run[C], s S) (venturi.Outcome, error) {
		return t.Handle(ctx, run, s)
	}, task, state, opts)
}

// RunFunc is [RunHandler] for a handler function, as registered with
// [venturi.RegisterFunc]: T, S and C are inferred from handle.
func RunFunc[T venturi.Task, S, C any](ctx context.Context, handle venturi.HandlerFunc[T, S, C], task T, state S, opts RunOptions[C]) Result[C] {
	var res Result[C]
	decoded, carry, err := roundTrip(task, opts.Carry)
	if err != nil {
		res.Err = err
		return res
	}
	if opts.Waited != nil && opts.RunCount == 0 {
		opts.RunCount = 2 // the run after the wait
	}
	run := new(venturi.Run[C])
	sigs := numberedSignals(opts.Signals)
	sp := spec(task, carry, opts, &res)
	sp.Signals = sigs
	if sp.Outputs, err = encodeOutputs(opts.Outputs); err != nil {
		res.Err = err
		return res
	}
	if opts.Waited != nil {
		history := append(slices.Clone(opts.History), venturi.JournalEntry{Event: venturi.EventWaiting,
			Run: max(int(orOne(int64(opts.RunCount)))-1, 0), Wait: slices.Clone(opts.Waited), At: time.Now()})
		if len(opts.History) > 0 && opts.History[0].Seq != 0 {
			history[len(history)-1].Seq = opts.History[len(opts.History)-1].Seq + 1
		}
		sp.History = history
	}
	if err := testhook.FillRun(run, sp); err != nil {
		res.Err = fmt.Errorf("venturitest: %w", err)
		return res
	}
	res.Outcome, res.Panicked, res.Err = call(ctx, handle, decoded, run, state)
	st := testhook.ReadRun(run)
	res.Output, res.Spawned = st.Output, st.Spawned
	if !res.CompletedTx {
		res.Carry, _ = st.Carry.(C)
		res.Attachment = st.Attachment
	}
	for _, seq := range st.Consumed {
		for _, s := range sigs {
			if s.Seq == seq {
				res.Consumed = append(res.Consumed, s)
			}
		}
	}
	return res
}

// spec describes the run; its Finish records a successful CompleteTx in res.
func spec[T venturi.Task, C any](task T, carry C, opts RunOptions[C], res *Result[C]) testhook.RunSpec {
	id := opts.ID
	if id == (ulid.ULID{}) {
		id = ulid.Make()
	}
	shutdown := opts.Shutdown
	if shutdown == nil {
		ch := make(chan struct{})
		if opts.ShuttingDown {
			close(ch)
		}
		shutdown = ch
	}
	var batch any
	if opts.Batch != nil {
		batch = opts.Batch
	}
	return testhook.RunSpec{
		ID: id, Kind: kindOf(task), Token: orOne(opts.Token), RunCount: int(orOne(int64(opts.RunCount))),
		Failures: opts.Failures, History: opts.History, Carry: carry, Shutdown: shutdown,
		Workflow: opts.Workflow, Node: opts.Node, Batch: batch,
		Finish: func(_ context.Context, outcome, c any, attachment json.RawMessage) error {
			if opts.CompleteTxErr != nil {
				return opts.CompleteTxErr
			}
			res.CompletedTx = true
			res.CompletedTxOutcome, _ = outcome.(venturi.Outcome)
			if p, ok := c.(*C); ok && p != nil {
				res.Carry = *p
			}
			res.Attachment = attachment
			return nil
		},
	}
}

// numberedSignals returns a test run's signals with Seq and SentAt set where the caller
// left them zero.
func numberedSignals(in []venturi.Signal) []venturi.Signal {
	out := slices.Clone(in)
	now := time.Now()
	for i := range out {
		if out[i].Seq == 0 {
			out[i].Seq = int64(i) + 1
		}
		if out[i].SentAt.IsZero() {
			out[i].SentAt = now
		}
	}
	return out
}

func orOne(n int64) int64 {
	if n == 0 {
		return 1
	}
	return n
}

// roundTrip encodes task and carry and decodes them into fresh values, as an enqueue and
// a claim would; the encoding is venturi's own, so what the queue refuses fails here too.
func roundTrip[T any, C any](task T, carry C) (T, C, error) {
	var t T
	var c C
	b, err := encodeJSON(task)
	if err != nil {
		return t, c, fmt.Errorf("venturitest: the task cannot be enqueued: %w", err)
	}
	if err := json.Unmarshal(b, &t); err != nil {
		return t, c, venturi.Permanentf("decode payload into %s: %v", reflect.TypeFor[T](), err)
	}
	b, err = encodeJSON(carry)
	if err != nil {
		return t, c, fmt.Errorf("venturitest: the carry cannot be stored: %w", err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return t, c, venturi.Permanentf("decode carry into %s: %v", reflect.TypeFor[C](), err)
	}
	return t, c, nil
}

// call runs handle, turning a panic into an error as the worker does.
func call[T venturi.Task, S, C any](ctx context.Context, handle venturi.HandlerFunc[T, S, C], task T, run *venturi.Run[C], state S) (o venturi.Outcome, panicked bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			o, panicked, err = venturi.Outcome{}, true, fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	o, err = handle(ctx, task, run, state)
	return o, false, err
}

// kindOf returns T's kind, as the registry sees it: Kind on the zero value, or on a new
// value when T is a pointer type.
func kindOf[T venturi.Task](task T) string {
	if t := reflect.TypeFor[T](); t.Kind() == reflect.Pointer {
		if v := reflect.ValueOf(task); v.IsValid() && !v.IsNil() {
			return task.Kind()
		}
		return reflect.New(t.Elem()).Interface().(venturi.Task).Kind()
	}
	return task.Kind()
}

// encodeOutputs encodes RunOptions.Outputs as the worker stores outputs.
func encodeOutputs(in map[string]any) (map[string]json.RawMessage, error) {
	if in == nil {
		return nil, nil
	}
	out := make(map[string]json.RawMessage, len(in))
	for node, v := range in {
		b, err := encodeJSON(v)
		if err != nil {
			return nil, fmt.Errorf("venturitest: output of node %q: %w", node, err)
		}
		out[node] = b
	}
	return out, nil
}

// encodeJSON encodes a payload, carry or signal payload as an enqueue does: it refuses
// what the queue refuses (values that do not encode, NUL characters jsonb cannot store,
// encodings over venturi.MaxPayloadBytes).
func encodeJSON(v any) ([]byte, error) {
	return jsonb.Marshal(v, venturi.MaxPayloadBytes, venturi.ErrInvalidPayload, venturi.ErrPayloadTooLarge)
}

package venturi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"runtime/debug"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/completer"
	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/executor"
	"github.com/venturi-dev/venturi/internal/jobrun"
	"github.com/venturi-dev/venturi/internal/journalenc"
)

var (
	errShutdown   = errors.New("venturi: worker shut down")
	errJobTimeout = errors.New("venturi: job timeout")
	errStopped    = errors.New("venturi: run asked to stop (replaced or cancelled)")
)

// runner binds the runs of one queue's executor (internal/executor) to the public API:
// it runs a claimed job's registered handler (runTask builds its Run[C] from the
// runner's database access and the executor's shutdown signal) and hands the run's end
// to the completer, or publishes it when the run wrote its result itself.
type runner struct {
	cfg       Config
	channel   string        // the notification channel (wake-ups after gated runs)
	signals   signalReader  // Run.Signals' reads, on the application's pool
	hooks     hookCreator   // Run.CreateHook's writes, on the application's pool
	steps     *stepStore    // Step's reads and writes, on the application's pool
	journal   journalLoader // Run.EarlierHistory's reads, on the application's pool
	saveCarry carrySaver    // Run.Checkpoint's writes, on the application's pool
	flows     flowAccess    // the runs' workflow calls, on the application's pool
	q         *dbsqlc.Queries
	db        dbsqlc.DBTX // the application's pool
	reg       map[string]*registration
	tracker   *jobrun.Tracker
	finish    func(*jobrun.End) // the completer's submit
	shutdown  <-chan struct{}   // closed when graceful shutdown begins
	hub       *eventHub         // the worker's subscribers
}

// newExecutor returns the executor (internal/executor) of the queue cfg is for (see
// Config.forQueue): its handlers run the kinds of reg with their database access on db
// (the application's pool), their runs held in tracker; their ends go to finish (the
// completer's submit), and are published to hub.
func newExecutor(parent context.Context, cfg Config, db dbsqlc.DBTX, q *dbsqlc.Queries, reg map[string]*registration, tracker *jobrun.Tracker,
	finish func(*jobrun.End), channel string, hub *eventHub) *executor.Executor {
	r := &runner{cfg: cfg, q: q, reg: reg, tracker: tracker, finish: finish, channel: channel, hub: hub}
	r.useDB(db)
	e := executor.New(parent, executor.Config{
		Concurrency: cfg.Concurrency, Tracker: tracker, Run: r.run, Ended: r.ended, Untimed: r.untimed,
		LeaseLost: ErrLeaseLost,
	})
	r.shutdown = e.ShuttingDown()
	return e
}

// useDB gives runs their database reads and writes on db (the application's pool):
// Run.EarlierHistory, Run.Signals, Run.CreateHook.
func (e *runner) useDB(db dbsqlc.DBTX) {
	q := e.q
	e.db = db
	e.flows = &dbFlows{db: db, q: q}
	e.journal = func(ctx context.Context, id ulid.ULID, before int64, limit int) ([]JournalEntry, error) {
		return journalPage(ctx, db, q, id, before, limit)
	}
	e.signals = func(ctx context.Context, id ulid.ULID, names []string) ([]Signal, error) {
		return pendingSignals(ctx, db, q, id, names)
	}
	e.hooks = func(ctx context.Context, p dbsqlc.CreateHookParams) error { return q.CreateHook(ctx, db, p) }
	e.steps = &stepStore{db: db, q: q}
	e.saveCarry = func(ctx context.Context, id ulid.ULID, token int64, carry []byte) (int64, error) {
		return q.SaveCarry(ctx, db, dbsqlc.SaveCarryParams{ID: uuidOf(id), Token: pgtype.Int8{Int64: token, Valid: true}, Carry: string(carry)})
	}
}

// log returns the runner's logger.
func (e *runner) log() *slog.Logger {
	if e.cfg.Logger == nil {
		return slog.Default()
	}
	return e.cfg.Logger
}

// run runs j's registered handler (executor.Config.Run).
func (e *runner) run(ctx context.Context, j *jobrun.Job) *jobrun.End {
	return e.reg[j.Kind].run(ctx, e, j)
}

// untimed reports whether kind is a singleton's (executor.Config.Untimed).
func (e *runner) untimed(kind string) bool {
	reg := e.reg[kind]
	return reg != nil && reg.singleton != nil
}

// ended hands a run's end on (executor.Config.Ended): a run that wrote its result itself
// (CompleteTx) or lost its lease is settled and published here; the others go to the
// completer.
func (e *runner) ended(req *jobrun.End) {
	if req.Finalized || req.Lost {
		e.tracker.Remove(req.Job)
		if e.hub.active() {
			if req.Lost {
				req.Entry.Event, req.State = string(EventLeaseLost), dbsqlc.VenturiJobStateRunning
			}
			e.hub.publish(endEvent(req, e.cfg.ID))
		}
		return
	}
	e.hub.endPending(req.Job.ID) // its end comes from the completer: hold a next start until then
	e.finish(req)
}

// runTask decodes j into T and its carry into C, runs handle, and returns the job's
// next state. Undecodable payloads, carries and journals send the job to dead, but for a
// singleton's carry, whose run fails under its restart policy with the carry kept.
func runTask[T Task, S, C any](ctx context.Context, e *runner, j *jobrun.Job, state S, handle HandlerFunc[T, S, C]) *jobrun.End {
	var task T
	if err := json.Unmarshal(j.Payload, &task); err != nil {
		return deadReq(j, fmt.Sprintf("decode payload into %s: %v", reflect.TypeFor[T](), err))
	}
	backoff := e.cfg.Backoff
	if bp, ok := any(task).(BackoffPolicy); ok {
		backoff = bp.Backoff().merged(e.cfg.Backoff)
	}
	var sup *Singleton
	if reg := e.reg[j.Kind]; reg != nil {
		sup = reg.singleton
	}
	var carry C
	if len(j.Carry) > 0 {
		if err := json.Unmarshal(j.Carry, &carry); err != nil {
			msg := fmt.Sprintf("decode carry into %s: %v", reflect.TypeFor[C](), err)
			if sup == nil {
				return deadReq(j, msg)
			}
			// A service's checkpoint that this build cannot read (its carry type changed) is
			// kept, and the run fails under the restart policy: a fix or a rollback resumes
			// from it, where a dead job would be replaced by a fresh one at the next Start.
			req := e.outcomeReq(ctx, j, Outcome{}, errors.New(msg+"; the checkpoint is kept"), nil, backoff)
			supervise(req, sup)
			return req
		}
	}
	history, err := decodeJournal(j.Journal, j.JournalMoved)
	if err != nil {
		return deadReq(j, fmt.Sprintf("decode journal: %v", err))
	}
	if len(j.MetaJSON) > 0 {
		if string(j.MetaJSON) == "?" { // a gated claim's row committed after its snapshot
			if b, err := e.q.JobMeta(ctx, e.db, uuidOf(j.ID)); err == nil {
				j.MetaJSON = b
			}
		}
		j.Meta = decodeMeta(j.MetaJSON)
	}
	if e.hub.active() {
		e.hub.publishStart(JobEvent{Event: EventStarted, JobID: j.ID, Kind: j.Kind, Queue: j.Queue, Run: j.Runs,
			State: StateRunning, Worker: e.cfg.ID, At: time.Now(), StartedAt: j.Started, Meta: j.Meta})
	}
	run := &Run[C]{
		meta: j.Meta, queue: j.Queue,
		id: j.ID, kind: j.Kind, token: j.Token, runs: j.Runs, failures: j.Failures,
		history: history, carry: carry, shutdown: e.shutdown, earlier: e.journal, signals: e.signals, hooks: e.hooks, steps: e.steps,
		saveCarry: e.saveCarry, flows: e.flows,
	}
	if j.Stop != nil { // every claim gives its runs one
		run.shutdown = j.Stop.Done()
	}
	keepCarry := reflect.TypeFor[C]().Size() > 0
	// build turns a result into the job's next state. The carry is stored only when the
	// job goes back to pending (pause, retry, interruption): a completed or dead job has
	// no next run. It reports a carry that cannot be stored.
	decide := func(o Outcome, err error, attachment json.RawMessage) *jobrun.End {
		req := e.outcomeReq(ctx, j, o, err, attachment, backoff)
		if sup != nil {
			supervise(req, sup)
		}
		return req
	}
	build := func(o Outcome, err error, c *C, attachment json.RawMessage) (*jobrun.End, error) {
		req := decide(o, err, attachment)
		req.Consumed = run.consumed
		if req.State == dbsqlc.VenturiJobStateCompleted {
			req.Flow = run.flowEnd()
		}
		// A run asked to stop that paused keeps its checkpoint: its job ends cancelled, with
		// the carry it reached.
		stoppedPause := req.State == dbsqlc.VenturiJobStateCancelled && j.StopEvent.Load() != nil && o.kind == outcomePause
		if !keepCarry || c == nil || (req.State != dbsqlc.VenturiJobStateAvailable && req.State != dbsqlc.VenturiJobStateScheduled &&
			req.State != dbsqlc.VenturiJobStateWaiting && !stoppedPause) {
			return req, nil
		}
		cb, cerr := encodeCarry(c)
		if cerr != nil {
			return req, cerr // the run fails, noted with what is wrong with its carry
		}
		req.Carry, req.SetCarry = cb, true
		return req, nil
	}
	var final *jobrun.End // what CompleteTx wrote
	run.finish = func(fctx context.Context, tx pgx.Tx, o Outcome, c *C, attachment json.RawMessage) error {
		req, err := build(o, nil, c, attachment)
		if err != nil {
			return fmt.Errorf("venturi: %w", err)
		}
		final = req
		// The result and, in the same round trip, a bound on how long the caller's
		// transaction may then sit idle: it holds the job's row until it ends, and rescue
		// skips a held row, so a caller cut off before its COMMIT must not keep it.
		var ids []pgtype.UUID
		b := &pgx.Batch{}
		dbsqlc.QueueBoundLocalIdleTimeout(b, idleTxBound(e.cfg.Lease).Milliseconds())
		completer.BeforeFinish(b, e.channel, []*jobrun.End{req})
		dbsqlc.QueueFinishRuns(b, completer.Params(e.cfg.ID, e.cfg.keep(), []*jobrun.End{req}), &ids)
		if err := tx.SendBatch(fctx, b).Close(); err != nil {
			return err
		}
		if len(ids) != 1 {
			return ErrLeaseLost
		}
		return completer.AfterFinish(fctx, tx, e.q, e.channel, []*jobrun.End{req}, ids, true, e.log())
	}
	if sup != nil {
		e.log().Info("venturi singleton started", "kind", j.Kind, "job_id", j.ID, "run", j.Runs,
			"owner", e.cfg.ID, "restart", sup.Restart.String())
	}
	var o Outcome
	if len(e.cfg.Middleware) == 0 {
		o, err = safeHandle(ctx, handle, task, run, state)
	} else {
		info := &JobInfo{ID: j.ID, Kind: j.Kind, Queue: j.Queue, Run: j.Runs, Token: j.Token, Worker: e.cfg.ID, Meta: j.Meta,
			Due: j.Due, StartedAt: j.Started}
		info.end = func(o Outcome, err error) Event {
			if err == nil && run.finalized { // CompleteTx wrote the result
				if final != nil {
					return Event(final.Entry.Event)
				}
				return EventCompleted
			}
			if req := decide(o, err, nil); !req.Lost {
				return Event(req.Entry.Event)
			}
			return ""
		}
		o, err = handleWith(ctx, e.cfg.Middleware, info, func(ctx context.Context) (Outcome, error) {
			return safeHandle(ctx, handle, task, run, state)
		})
	}
	if err == nil && run.finalized {
		req := &jobrun.End{Job: j, Finalized: true}
		if final != nil {
			req.State, req.Entry = final.State, final.Entry
		}
		if sup != nil {
			logSingletonStop(e.log(), j, req)
		}
		return req
	}
	req, cerr := build(o, err, &run.carry, run.attachment)
	if cerr != nil {
		// The carry cannot be stored: the run fails (retryably) and keeps the last stored
		// carry, so the next run resumes from the previous checkpoint.
		req, _ = build(Outcome{}, cerr, nil, run.attachment)
	}
	if sup != nil {
		logSingletonStop(e.log(), j, req)
	}
	return req
}

// endEvent is the in-process event of a run's end.
func endEvent(r *jobrun.End, worker string) JobEvent {
	return JobEvent{Event: Event(r.Entry.Event), JobID: r.Job.ID, Kind: r.Job.Kind, Queue: r.Job.Queue, Run: r.Job.Runs,
		State: State(r.State), Note: r.Entry.Note, Worker: worker, At: time.Now(), StartedAt: r.Job.Started,
		Delay: r.Entry.ResumeIn, Meta: r.Job.Meta}
}

// panicError is the error a recovered panic r becomes: its value and the stack (the
// first 8 KiB), recorded as the run's failure.
func panicError(r any) error {
	stack := debug.Stack()
	if len(stack) > 8<<10 {
		stack = stack[:8<<10]
	}
	return fmt.Errorf("panic: %v\n%s", r, stack)
}

// safeHandle runs handle and turns a panic into an error carrying the stack.
func safeHandle[T Task, S, C any](ctx context.Context, handle HandlerFunc[T, S, C], task T, run *Run[C], state S) (o Outcome, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = panicError(r)
		}
	}()
	return handle(ctx, task, run, state)
}

func deadReq(j *jobrun.Job, note string) *jobrun.End {
	return &jobrun.End{Job: j, State: dbsqlc.VenturiJobStateDead, Failed: true, Ended: time.Now(),
		Entry: journalenc.Entry{Event: string(EventDead), Note: cleanNote(note)}}
}

// outcomeReq turns a handler's result into the job's next state.
func (e *runner) outcomeReq(ctx context.Context, j *jobrun.Job, o Outcome, err error, attachment json.RawMessage, backoff Backoff) *jobrun.End {
	req := &jobrun.End{Job: j}
	entry := journalenc.Entry{Attachment: attachment}
	switch {
	case context.Cause(ctx) == ErrLeaseLost:
		req.Lost = true
	case j.StopEvent.Load() != nil && (err != nil || o.kind != outcomeCompleted):
		// Replaced by a newer job of its slot, or cancelled: not a failure, and not to be
		// run again. FinishRuns puts the request's reason before the note.
		entry.Event = *j.StopEvent.Load()
		switch {
		case err != nil:
			entry.Note = err.Error()
		default:
			entry.Note = o.note
		}
		req.State = dbsqlc.VenturiJobStateCancelled
	case err == nil && o.kind == outcomeCancel:
		entry.Event, entry.Note = string(EventCancelled), o.note
		req.State = dbsqlc.VenturiJobStateCancelled
	case err == nil && o.kind == outcomeWait:
		if werr := validWait(o.wait); werr != nil {
			return e.outcomeReq(ctx, j, Outcome{}, Permanent(werr), attachment, backoff)
		}
		entry.Event, entry.Note, entry.ResumeIn, entry.Wait = string(EventWaiting), o.note, o.resumeIn, o.wait
		req.State, req.Delay, req.Wait = dbsqlc.VenturiJobStateWaiting, o.resumeIn, o.wait
	case err == nil && o.kind == outcomePause:
		entry.Event, entry.Note, entry.ResumeIn = string(EventPaused), o.note, o.resumeIn
		req.State, req.Delay = pendingState(o.resumeIn), o.resumeIn
	case err == nil:
		entry.Event, entry.Note = string(EventCompleted), o.note
		req.State = dbsqlc.VenturiJobStateCompleted
	case context.Cause(ctx) == errShutdown:
		entry.Event, entry.Note = string(EventInterrupted), "interrupted by shutdown: "+err.Error()
		req.State = dbsqlc.VenturiJobStateAvailable
	default:
		if context.Cause(ctx) == errJobTimeout {
			err = fmt.Errorf("%w after %v: %w", errJobTimeout, e.cfg.JobTimeout, err)
		}
		failures := j.Failures + 1
		req.Failed = true
		entry.Note = err.Error()
		switch {
		case IsPermanent(err):
			entry.Event = string(EventDead)
			req.State = dbsqlc.VenturiJobStateDead
		case e.cfg.MaxFailures > 0 && failures >= e.cfg.MaxFailures:
			entry.Event = string(EventDead)
			entry.Note = fmt.Sprintf("backstop reached after %d failures: %s", failures, entry.Note)
			req.State = dbsqlc.VenturiJobStateDead
		default:
			d, explicit := retryDelay(err)
			if !explicit {
				d = retryBackoff(backoff, e.cfg.JitterFraction, j.ID, failures)
			}
			entry.Event, entry.ResumeIn = string(EventFailed), d
			req.State, req.Delay = pendingState(d), d
		}
	}
	entry.Note = cleanNote(entry.Note)
	req.Entry, req.Ended = entry, time.Now()
	return req
}

// cleanNote makes a note storable in jsonb: no NUL characters, valid UTF-8, bounded.
func cleanNote(s string) string {
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "\uFFFD")
	if len(s) > MaxNoteBytes {
		s = strings.ToValidUTF8(s[:MaxNoteBytes], "") + " …(truncated)"
	}
	return s
}

func pendingState(delay time.Duration) dbsqlc.VenturiJobState {
	if delay <= 0 {
		return dbsqlc.VenturiJobStateAvailable
	}
	return dbsqlc.VenturiJobStateScheduled
}

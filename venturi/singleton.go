package venturi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/jobrun"
)

// Supervised is implemented by task types that are supervised singleton services: a feed
// poller, a consumer loop, a sweeper. Such a kind has exactly one live job across the
// cluster, which every worker that registers the kind ensures at [Worker.Start] (and
// [Queue.EnsureSingleton] ensures on demand), and at most one run of it at once: its job
// takes the slot "venturi.singleton:<kind>" with limit 1. Singleton is called on the zero
// value at Register; the job's payload is the zero value too, so a service takes its
// configuration from the worker's state.
//
// A singleton's handler may run for hours: its lease is extended like any run's, the
// worker's JobTimeout does not apply to it, and [Run.Checkpoint] stores its carry while it
// runs. When its worker dies, the lease rescue returns the job and another worker takes it
// over (within the lease plus the maintenance and poll intervals) with the last stored
// carry; when its worker stops gracefully, the run sees [Run.Shutdown] and should return
// PauseIn(0): the job is available at once and another worker claims it without waiting for
// the lease. A run interrupted at the end of the grace period is released the same way.
//
// Producers cannot enqueue a singleton kind ([ErrSingleton]); cancelling its job
// ([Queue.Cancel]) or returning [Cancelled] stops the service until a worker starts (or
// EnsureSingleton is called) again.
type Supervised interface {
	Singleton() Singleton
}

// Singleton declares how a singleton service is supervised.
type Singleton struct {
	// Restart says what happens when a run ends.
	Restart RestartPolicy
	// Delay is the fixed wait before the next run under RestartAlways; 0 means
	// DefaultRestartDelay.
	Delay time.Duration
}

// DefaultRestartDelay is a RestartAlways singleton's Delay when it sets none.
const DefaultRestartDelay = time.Second

// RestartPolicy is what a singleton's job does when a run ends. Pauses, waits,
// interruptions by shutdown and runs abandoned by a dead worker are not ends: the job
// continues whatever the policy (that is the takeover), and an abandoned run is not
// counted as a failure (a dead worker is not the service's fault; the journal still
// records it as abandoned). A cancellation always stops it. A stored carry the running
// build cannot decode fails the run under the policy and is kept, so that a fix or a
// rollback resumes from it.
type RestartPolicy int8

// Restart policies (the seed Taskvisor's).
const (
	// RestartOnFailure retries a failed run with backoff, as for any job, and stops the
	// service (completed) when a run completes or (dead) when it fails permanently or
	// reaches the backstop.
	RestartOnFailure RestartPolicy = iota
	// RestartAlways runs the service again Delay after every run that ends, completed,
	// failed or dead alike: a completed run is the Taskvisor periodic, a failure restarts
	// after the same fixed delay instead of a backoff, and no failure ends the job.
	RestartAlways
	// RestartNever stops the service when a run ends: completed, or dead on any error
	// (no retry). It runs again when a worker starts or EnsureSingleton is called: as a
	// Taskvisor supervisor runs its tasks again when it starts, a worker's Start (a deploy,
	// a restart) starts the services it supervises. A service that must stay stopped
	// across deploys is one no worker registers.
	RestartNever
)

// String returns the policy's name: "on_failure", "always" or "never".
func (p RestartPolicy) String() string {
	switch p {
	case RestartOnFailure:
		return "on_failure"
	case RestartAlways:
		return "always"
	case RestartNever:
		return "never"
	}
	return fmt.Sprintf("RestartPolicy(%d)", int8(p))
}

// SingletonSlotPrefix starts the slot key of every singleton job: the slot of kind k is
// SingletonSlotPrefix + k. Another task type must not take such a slot.
const SingletonSlotPrefix = "venturi.singleton:"

// ErrSingleton is returned by an enqueue of a task type that implements [Supervised]:
// workers create its one job.
var ErrSingleton = errors.New("venturi: a singleton service is started by its workers, not enqueued (see Queue.EnsureSingleton)")

// singletonOf returns T's singleton declaration (nil when T is not Supervised), validated.
func singletonOf[T Task]() (*Singleton, error) {
	var zero T
	if t := reflect.TypeFor[T](); t.Kind() == reflect.Pointer {
		zero = reflect.New(t.Elem()).Interface().(T)
	}
	s, ok := any(zero).(Supervised)
	if !ok {
		return nil, nil
	}
	decl := s.Singleton()
	if decl.Restart < RestartOnFailure || decl.Restart > RestartNever || decl.Delay < 0 {
		return nil, fmt.Errorf("invalid Singleton %+v", decl)
	}
	if decl.Delay == 0 {
		decl.Delay = DefaultRestartDelay
	}
	if sl, ok := any(zero).(Slotter); ok && sl.Slot().Key != "" {
		return nil, errors.New("a singleton takes its own slot; it cannot declare Slot")
	}
	return &decl, nil
}

// EnsureSingleton creates the one job of the singleton kind of t (a [Supervised] task type,
// typically its zero value) unless a live one exists: it reports ActionInserted with the new
// job's ID, or ActionKept with the live job's. It is idempotent across any number of
// concurrent callers (a unique index admits one live job per singleton kind). Workers call
// it for their singleton kinds at Start; call it to restart a service that ended.
func (q *Queue) EnsureSingleton(ctx context.Context, t Task) (Result, error) {
	if _, ok := t.(Supervised); !ok {
		return Result{}, fmt.Errorf("venturi: EnsureSingleton(%T): not a Supervised task type", t)
	}
	return ensureSingleton(ctx, q.pool, q.q, t)
}

func ensureSingleton(ctx context.Context, db dbsqlc.DBTX, q *dbsqlc.Queries, t Task) (Result, error) {
	p, err := prepareTask(t, nil)
	if err != nil {
		return Result{}, err
	}
	params := dbsqlc.EnsureSingletonParams{
		ID: uuidOf(p.id), Kind: p.kind, Queue: p.queue, Priority: int16(p.priority),
		Payload: string(p.payload), SlotKey: SingletonSlotPrefix + p.kind, Events: p.events,
	}
	for range 3 {
		row, err := q.EnsureSingleton(ctx, db, params)
		if err != nil {
			return Result{}, err
		}
		if !row.JobID.Valid {
			continue // the live job committed after the statement's snapshot: read it again
		}
		if row.Inserted {
			return Result{ID: p.id, Action: ActionInserted}, nil
		}
		return Result{ID: ulidOf(row.JobID), Action: ActionKept}, nil
	}
	return Result{}, fmt.Errorf("venturi: ensure singleton %s: the live job kept changing", p.kind)
}

// SingletonStatus is a live singleton job as [Queue.Singletons] lists it.
type SingletonStatus struct {
	ID    ulid.ULID
	Kind  string
	State State
	Queue string
	// Owner is the ID of the worker running it; empty unless State is running.
	Owner string
	// StartedAt is when its current (or last) run was claimed (database clock); nil before
	// its first run.
	StartedAt *time.Time
	// RunAt is when it is due, for a pending job.
	RunAt    time.Time
	RunCount int
	Failures int
	// LeaseExpiresAt is when the owner's lease runs out unless extended; nil unless running.
	LeaseExpiresAt *time.Time
	// LastEntry is the newest journal entry: how the last run stopped (completed, failed,
	// paused, interrupted, abandoned...). Nil for a job that never ran.
	LastEntry *JournalEntry
}

// Singletons lists the live singleton jobs (one per singleton kind at most), by kind.
func (q *Queue) Singletons(ctx context.Context) ([]SingletonStatus, error) {
	rows, err := q.q.Singletons(ctx, q.pool)
	if err != nil {
		return nil, err
	}
	out := make([]SingletonStatus, 0, len(rows))
	for _, r := range rows {
		s := SingletonStatus{
			ID: ulidOf(r.ID), Kind: r.Kind, State: State(r.State), Queue: r.Queue,
			StartedAt: r.AttemptedAt, RunAt: r.RunAt, RunCount: int(r.Runs), Failures: int(r.Failures),
			LeaseExpiresAt: r.LeaseExpiresAt,
		}
		if s.State == StateRunning {
			s.Owner = r.WorkerID.String
		}
		if len(r.LastEntry) > 0 && string(r.LastEntry) != "null" {
			var e JournalEntry
			if err := json.Unmarshal(r.LastEntry, &e); err != nil {
				return nil, fmt.Errorf("venturi: decode journal of %s: %w", s.ID, err)
			}
			s.LastEntry = &e
		}
		out = append(out, s)
	}
	return out, nil
}

// supervise applies a singleton's restart policy to the end of one of its runs.
func supervise(req *jobrun.End, s *Singleton) {
	if req.Lost || req.Finalized {
		return
	}
	failedRetry := req.Failed && (req.State == dbsqlc.VenturiJobStateAvailable || req.State == dbsqlc.VenturiJobStateScheduled) &&
		req.Entry.Event == string(EventFailed)
	ended := req.State == dbsqlc.VenturiJobStateCompleted || req.State == dbsqlc.VenturiJobStateDead
	switch s.Restart {
	case RestartAlways:
		if ended || failedRetry {
			req.State, req.Delay = pendingState(s.Delay), s.Delay
			req.Entry.ResumeIn = s.Delay
			if req.Entry.Event == string(EventDead) {
				req.Entry.Event = string(EventFailed) // the run failed; the job does not end
			}
		}
	case RestartNever:
		if failedRetry {
			req.State, req.Delay = dbsqlc.VenturiJobStateDead, 0
			req.Entry.Event, req.Entry.ResumeIn = string(EventDead), 0
			req.Entry.Note = cleanNote("restart policy never: " + req.Entry.Note)
		}
	}
}

// logSingletonStop logs how a singleton's run ended and what its job does next.
func logSingletonStop(log *slog.Logger, j *jobrun.Job, req *jobrun.End) {
	if req.Lost {
		log.Warn("venturi singleton lost its lease", "kind", j.Kind, "job_id", j.ID, "run", j.Runs)
		return
	}
	if req.Finalized {
		log.Info("venturi singleton stopped", "kind", j.Kind, "job_id", j.ID, "run", j.Runs, "next", "written by CompleteTx")
		return
	}
	attrs := []any{"kind", j.Kind, "job_id", j.ID, "run", j.Runs, "event", Event(req.Entry.Event), "next", string(req.State)}
	if req.State == dbsqlc.VenturiJobStateScheduled || req.State == dbsqlc.VenturiJobStateWaiting {
		attrs = append(attrs, "in", req.Delay)
	}
	log.Info("venturi singleton stopped", attrs...)
}

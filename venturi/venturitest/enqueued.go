package venturitest

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/testhook"
)

// MaxJobsInspected bounds how many jobs of the kind (oldest first) one check reads.
const MaxJobsInspected = 1000

// pollInterval is how often a waiting check queries again.
const pollInterval = 20 * time.Millisecond

// EnqueuedOption adjusts [RequireEnqueued] and its variants; [WithWait], [WithStates] and
// [WithAnyState] make one.
type EnqueuedOption interface {
	applyEnqueued(*enqueuedOpts)
}

type enqueuedOpts struct {
	wait   time.Duration
	states []venturi.State
}

type enqueuedOptionFunc func(*enqueuedOpts)

func (f enqueuedOptionFunc) applyEnqueued(o *enqueuedOpts) { f(o) }

// WithWait makes [RequireEnqueued] wait up to d for a matching job to appear, for a job
// enqueued by another goroutine or process. [RequireNotEnqueued] instead watches for d and
// fails as soon as a matching job appears.
func WithWait(d time.Duration) EnqueuedOption {
	return enqueuedOptionFunc(func(o *enqueuedOpts) { o.wait = d })
}

// WithStates looks for jobs in the given states instead of the pending ones (scheduled and
// available).
func WithStates(states ...venturi.State) EnqueuedOption {
	return enqueuedOptionFunc(func(o *enqueuedOpts) { o.states = states })
}

// WithAnyState looks for jobs in every state, including running, completed and dead.
func WithAnyState() EnqueuedOption {
	return enqueuedOptionFunc(func(o *enqueuedOpts) { o.states = []venturi.State{} })
}

// RequireEnqueued finds a job of T's kind whose payload, decoded into a T, satisfies
// match (nil matches any), and returns the oldest such job. By default only pending jobs
// (scheduled and available) count; see [WithStates] and [WithAnyState]. Without a match it
// fails the test with a list of the jobs of that kind.
//
//	job := venturitest.RequireEnqueued(t, pool, func(f tasks.FetchBookmark) bool { return f.URL == u })
func RequireEnqueued[T venturi.Task](tb testing.TB, pool *pgxpool.Pool, match func(T) bool, opts ...EnqueuedOption) *venturi.Job {
	tb.Helper()
	return requireEnqueued(tb, pool, match, opts)
}

// RequireEnqueuedTx is [RequireEnqueued] inside tx: it sees the jobs tx enqueued and has
// not committed.
func RequireEnqueuedTx[T venturi.Task](tb testing.TB, tx pgx.Tx, match func(T) bool, opts ...EnqueuedOption) *venturi.Job {
	tb.Helper()
	return requireEnqueued(tb, tx, match, opts)
}

// RequireNotEnqueued fails the test if a job of T's kind in the chosen states (pending by
// default) has a payload that satisfies match (nil matches any). With [WithWait] it keeps
// checking for the whole duration.
func RequireNotEnqueued[T venturi.Task](tb testing.TB, pool *pgxpool.Pool, match func(T) bool, opts ...EnqueuedOption) {
	tb.Helper()
	requireNotEnqueued(tb, pool, match, opts)
}

// RequireNotEnqueuedTx is [RequireNotEnqueued] inside tx.
func RequireNotEnqueuedTx[T venturi.Task](tb testing.TB, tx pgx.Tx, match func(T) bool, opts ...EnqueuedOption) {
	tb.Helper()
	requireNotEnqueued(tb, tx, match, opts)
}

// search is one kind's jobs in the chosen states, and the first that matched.
type search[T venturi.Task] struct {
	kind   string
	states []string
	match  func(T) bool
	wait   time.Duration
}

func newSearch[T venturi.Task](match func(T) bool, opts []EnqueuedOption) *search[T] {
	o := enqueuedOpts{states: []venturi.State{venturi.StateScheduled, venturi.StateAvailable}}
	for _, opt := range opts {
		if opt != nil {
			opt.applyEnqueued(&o)
		}
	}
	s := &search[T]{kind: kindOf(*new(T)), match: match, wait: o.wait, states: []string{}}
	for _, st := range o.states {
		s.states = append(s.states, string(st))
	}
	return s
}

// find returns the first job that matches, or nil.
func (s *search[T]) find(ctx context.Context, db dbsqlc.DBTX) (*venturi.Job, error) {
	rows, err := dbsqlc.New().JobsOfKind(ctx, db, dbsqlc.JobsOfKindParams{Kind: s.kind, States: s.states, Max: MaxJobsInspected})
	if err != nil {
		return nil, err
	}
	for _, row := range rows {
		var t T
		if json.Unmarshal(row.Payload, &t) != nil {
			continue
		}
		if s.match == nil || s.match(t) {
			return jobOf(row)
		}
	}
	return nil, nil
}

// poll calls check until it reports done or the wait ends, querying every pollInterval.
func poll(ctx context.Context, wait time.Duration, check func() (bool, error)) error {
	done, err := check()
	if err != nil || done || wait <= 0 {
		return err
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-deadline.C:
			_, err := check() // a last look at the deadline
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
		if done, err := check(); err != nil || done {
			return err
		}
	}
}

func requireEnqueued[T venturi.Task](tb testing.TB, db dbsqlc.DBTX, match func(T) bool, opts []EnqueuedOption) *venturi.Job {
	tb.Helper()
	s := newSearch(match, opts)
	job := s.await(tb, db)
	if job == nil {
		tb.Fatalf("venturitest: no %s job%s matches%s%s", s.kind, s.statesText(), s.waitText(), s.listing(tb, db))
	}
	return job
}

func requireNotEnqueued[T venturi.Task](tb testing.TB, db dbsqlc.DBTX, match func(T) bool, opts []EnqueuedOption) {
	tb.Helper()
	s := newSearch(match, opts)
	if job := s.await(tb, db); job != nil {
		tb.Fatalf("venturitest: want no %s job%s to match, found %s %s %s%s",
			s.kind, s.statesText(), job.ID, job.State, job.Payload, s.listing(tb, db))
	}
}

// await polls for a matching job until one is found or the wait is over, and returns
// it (nil when none matched). A failed query fails the test.
func (s *search[T]) await(tb testing.TB, db dbsqlc.DBTX) *venturi.Job {
	tb.Helper()
	var job *venturi.Job
	err := poll(tb.Context(), s.wait, func() (bool, error) {
		j, err := s.find(tb.Context(), db)
		job = j
		return j != nil, err
	})
	if err != nil {
		tb.Fatalf("venturitest: look for %s jobs: %v", s.kind, err)
	}
	return job
}

func (s *search[T]) statesText() string {
	if len(s.states) == 0 {
		return " in any state"
	}
	return " in state " + strings.Join(s.states, " or ")
}

func (s *search[T]) waitText() string {
	if s.wait <= 0 {
		return ""
	}
	return fmt.Sprintf(" after waiting %v", s.wait)
}

// maxListed bounds the jobs a failure message lists.
const maxListed = 20

// listing describes the jobs of the kind in any state, for a failure message, and marks
// those whose payload matches.
func (s *search[T]) listing(tb testing.TB, db dbsqlc.DBTX) string {
	rows, err := dbsqlc.New().JobsOfKind(tb.Context(), db, dbsqlc.JobsOfKindParams{Kind: s.kind, States: []string{}, Max: MaxJobsInspected})
	if err != nil {
		return fmt.Sprintf("\n(listing the %s jobs failed: %v)", s.kind, err)
	}
	if len(rows) == 0 {
		return fmt.Sprintf("\nthere is no %s job in any state", s.kind)
	}
	var b strings.Builder
	more := ""
	if len(rows) == MaxJobsInspected {
		more = " or more"
	}
	fmt.Fprintf(&b, "\n%d%s %s job(s) in any state, oldest first:", len(rows), more, s.kind)
	for i, row := range rows {
		if i == maxListed {
			fmt.Fprintf(&b, "\n  … and %d%s more", len(rows)-maxListed, more)
			break
		}
		fmt.Fprintf(&b, "\n  %s %-9s %s", ulid.ULID(row.ID.Bytes), row.State, row.Payload)
		var t T
		switch err := json.Unmarshal(row.Payload, &t); {
		case err != nil:
			fmt.Fprintf(&b, " (does not decode into %s: %v)", reflect.TypeFor[T](), err)
		case s.match != nil && s.match(t):
			b.WriteString(" (matches)")
		}
	}
	return b.String()
}

// jobOf converts a row as Queue.Job does.
func jobOf(row *dbsqlc.JobsOfKindRow) (*venturi.Job, error) {
	j, err := testhook.JobOfKind(row)
	if err != nil {
		return nil, err
	}
	return j.(*venturi.Job), nil
}

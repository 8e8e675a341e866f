package venturi

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/awaiter"
	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// AwaitPoll is how often a process's awaiters look for ended jobs in one statement, as a
// fallback for the end notifications (and instead of them with QueueConfig.NoNotify).
const AwaitPoll = time.Second

// Await waits until job id has ended (completed, dead or cancelled) and returns it, from
// any process. A job that ended before the call returns at once. The end is notified by
// the database to this process's one listening connection, whoever ends the job; a poll
// every [AwaitPoll], one statement for all of the process's waiters, covers lost
// notifications. It returns ctx's error when ctx ends first, and [ErrNotFound] for an
// unknown job or one pruned before it was read.
func (q *Queue) Await(ctx context.Context, id ulid.ULID) (*Job, error) {
	return awaitEnd(ctx, q, q.awaiter(), id,
		func(ctx context.Context) (*Job, bool, error) {
			j, err := q.Job(ctx, id)
			return j, err == nil && j.ended(), err
		},
		func(ctx context.Context) error {
			_, err := q.q.AwaitJob(ctx, q.pool, dbsqlc.AwaitJobParams{Channel: q.doneChannel, ID: uuidOf(id)})
			return err
		})
}

// awaitEnd waits, as Await and AwaitWorkflow do, until what read reads of id has ended:
// read returns it and whether it ended (or an error, returned as is); mark registers the
// process's end channel on it, pgx.ErrNoRows when it ended (or is gone) before the mark.
// The waiter is registered with a (the process's awaiter of such ends) first, then marked,
// once the process listens: an end after the mark is notified to a waiter that already
// listens (or is polled).
func awaitEnd[T any](ctx context.Context, q *Queue, a *awaiter.Awaiter, id ulid.ULID,
	read func(context.Context) (T, bool, error), mark func(context.Context) error) (T, error) {
	v, ended, err := read(ctx)
	if err != nil || ended {
		return v, err
	}
	var zero T
	wake, done, listening := a.Add(id)
	defer done()
	// Mark once the process listens, so the end cannot be notified before that (then only
	// the poll would see it). Without notifications the poll serves.
	if !q.poll {
		t := time.NewTimer(AwaitPoll)
		select {
		case <-listening:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return zero, ctx.Err()
		}
		t.Stop()
	}
	if err := mark(ctx); errors.Is(err, pgx.ErrNoRows) {
		// It ended (or was pruned) between the first read and the mark: nobody will notify
		// the end, so read it now rather than wait for the poll.
		v, _, err := read(ctx)
		return v, err
	} else if err != nil {
		return zero, err
	}
	for {
		select {
		case <-wake:
		case <-ctx.Done():
			return zero, ctx.Err()
		}
		if v, ended, err = read(ctx); err != nil || ended {
			return v, err
		}
	}
}

// EnqueueAndAwait enqueues task and waits for the job that holds it (the one it merged
// into, for a dedup key) to end, as [Queue.Await] does.
func (q *Queue) EnqueueAndAwait(ctx context.Context, task Task, opts ...EnqueueOption) (Result, *Job, error) {
	r, err := q.Enqueue(ctx, task, opts...)
	if err != nil {
		return r, nil, err
	}
	j, err := q.Await(ctx, r.ID)
	return r, j, err
}

// ended reports whether the job is in a terminal state.
func (j *Job) ended() bool {
	return j.State == StateCompleted || j.State == StateDead || j.State == StateCancelled
}

// awaiter returns the Queue's awaiter (internal/awaiter): one subscription to the Queue's
// LISTEN connection (none with QueueConfig.NoNotify) and one poll for all of the
// process's Await calls, running while someone waits.
func (q *Queue) awaiter() *awaiter.Awaiter {
	q.awaitOnce.Do(func() {
		cfg := awaiter.Config{
			Channel: q.doneChannel, Poll: AwaitPoll, Linger: notifyLinger,
			Ended: func(ctx context.Context, ids []pgtype.UUID) ([]pgtype.UUID, error) {
				return q.q.EndedJobs(ctx, q.pool, ids)
			},
		}
		if !q.poll {
			cfg.Notifier = q.notifier()
		}
		q.await = awaiter.New(cfg)
	})
	return q.await
}

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
	j, err := q.Job(ctx, id)
	if err != nil || j.ended() {
		return j, err
	}
	a := q.awaiter()
	wake, done, listening := a.Add(id)
	defer done()
	// Mark the job once the process listens, so its end cannot be notified before that
	// (then only the poll would see it). Without notifications the poll serves.
	if !q.poll {
		t := time.NewTimer(AwaitPoll)
		select {
		case <-listening:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
		t.Stop()
	}
	// Registered first, then marked: an end after the mark is notified to a waiter that is
	// already listening (or polled).
	_, err = q.q.AwaitJob(ctx, q.pool, dbsqlc.AwaitJobParams{Channel: q.doneChannel, ID: uuidOf(id)})
	if errors.Is(err, pgx.ErrNoRows) {
		// The job ended (or was pruned) between the first read and the mark: nobody will
		// notify its end, so read it now rather than wait for the poll.
		return q.Job(ctx, id)
	}
	if err != nil {
		return nil, err
	}
	for {
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if j, err = q.Job(ctx, id); err != nil || j.ended() {
			return j, err
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

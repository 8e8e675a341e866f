package venturi

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"

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
	wake, done, listening := a.add(id)
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

// awaiter serves a Queue's Await calls: one subscription to the Queue's LISTEN connection
// and one poll for all of them. It runs while someone waits.
type awaiter struct {
	q         *Queue
	mu        sync.Mutex
	waiting   map[ulid.ULID][]chan struct{}
	running   bool
	listening chan struct{} // closed once the current run's connection listens
	idleSince time.Time     // when the last waiter left
}

func (q *Queue) awaiter() *awaiter {
	q.awaitOnce.Do(func() { q.await = &awaiter{q: q, waiting: map[ulid.ULID][]chan struct{}{}} })
	return q.await
}

// add registers a waiter for id; wake receives when id may have ended, and listening is
// closed once the process listens for ends.
func (a *awaiter) add(id ulid.ULID) (wake <-chan struct{}, done func(), listening <-chan struct{}) {
	ch := make(chan struct{}, 1)
	a.mu.Lock()
	a.waiting[id] = append(a.waiting[id], ch)
	if !a.running {
		a.running = true
		a.listening = make(chan struct{})
		go a.run(a.listening)
	}
	listening = a.listening
	a.mu.Unlock()
	return ch, func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		list := a.waiting[id]
		for i, c := range list {
			if c == ch {
				list = append(list[:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(a.waiting, id)
		} else {
			a.waiting[id] = list
		}
		if len(a.waiting) == 0 {
			a.idleSince = time.Now()
		}
	}, listening
}

// wake signals the waiters of id.
func (a *awaiter) wake(id ulid.ULID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range a.waiting[id] {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// ids returns the awaited jobs; stop is true when nobody has waited for notifyLinger.
func (a *awaiter) ids() (ids []pgtype.UUID, stop bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.waiting) == 0 {
		if time.Since(a.idleSince) < notifyLinger {
			return nil, false
		}
		a.running = false
		return nil, true
	}
	out := make([]pgtype.UUID, 0, len(a.waiting))
	for id := range a.waiting {
		out = append(out, uuidOf(id))
	}
	return out, false
}

// run listens for end notifications (on the Queue's LISTEN connection) and polls, until
// nobody has waited for notifyLinger.
func (a *awaiter) run(listening chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if !a.q.poll {
		sub := a.q.notifier().Listen(a.q.doneChannel, func(payload string) {
			if rest, ok := strings.CutPrefix(payload, donePrefix); ok {
				var u pgtype.UUID
				if err := u.Scan(rest); err == nil && u.Valid {
					a.wake(ulid.ULID(u.Bytes))
				}
			}
		})
		defer sub.Unlisten()
		go func() {
			select {
			case <-sub.Ready():
				close(listening)
			case <-ctx.Done():
			}
		}()
	}
	t := time.NewTicker(AwaitPoll)
	defer t.Stop()
	for range t.C {
		ids, stop := a.ids()
		if stop {
			return
		}
		if len(ids) == 0 {
			continue
		}
		pctx, pcancel := context.WithTimeout(ctx, AwaitPoll)
		ended, err := a.q.q.EndedJobs(pctx, a.q.pool, ids)
		pcancel()
		if err != nil {
			slog.Default().Debug("venturi: await poll failed", "err", err)
			continue
		}
		for _, u := range ended {
			a.wake(ulidOf(u))
		}
	}
}

// donePrefix starts the payload of a job's end notification.
const donePrefix = "\x1fdone:"

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

// awaiter serves a Queue's Await calls: one LISTEN connection and one poll for all of
// them. It runs while someone waits.
type awaiter struct {
	q         *Queue
	mu        sync.Mutex
	waiting   map[ulid.ULID][]chan struct{}
	running   bool
	listening chan struct{} // closed once the current run's connection listens
	idleSince time.Time     // when the last waiter left
}

// awaitLinger is how long an awaiter stays connected without waiters, so that bursts of
// Await calls do not connect and disconnect each time.
const awaitLinger = 30 * time.Second

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

// ids returns the awaited jobs; stop is true when nobody has waited for awaitLinger.
func (a *awaiter) ids() (ids []pgtype.UUID, stop bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.waiting) == 0 {
		if time.Since(a.idleSince) < awaitLinger {
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

// run listens for end notifications and polls, until nobody waits.
func (a *awaiter) run(listening chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if !a.q.poll {
		go a.listen(ctx, listening)
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

// listen holds the LISTEN connection until ctx ends, reconnecting after errors.
func (a *awaiter) listen(ctx context.Context, listening chan struct{}) {
	var once sync.Once
	ready := func() { once.Do(func() { close(listening) }) }
	for ctx.Err() == nil {
		if err := a.listenOnce(ctx, ready); err != nil && ctx.Err() == nil {
			sleepCtx(ctx, AwaitPoll) // the poll covers the gap
		}
	}
}

func (a *awaiter) listenOnce(ctx context.Context, ready func()) error {
	conn, err := pgx.ConnectConfig(ctx, a.q.pool.Config().ConnConfig)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{a.q.doneChannel}.Sanitize()); err != nil {
		return err
	}
	ready()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if rest, ok := strings.CutPrefix(n.Payload, donePrefix); ok {
			var u pgtype.UUID
			if err := u.Scan(rest); err == nil && u.Valid {
				a.wake(ulid.ULID(u.Bytes))
			}
		}
	}
}

// donePrefix starts the payload of a job's end notification.
const donePrefix = "\x1fdone:"

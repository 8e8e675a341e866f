// Package awaiter serves a process's waits for jobs to end (venturi's Queue.Await): one
// subscription to the process's LISTEN connection ([notifier.Notifier]) and one poll for
// all of the waiters. It runs while someone waits, and stops once nobody has waited for
// its linger period.
//
// A job's end is notified on [Config.Channel] with the payload [DonePrefix] followed by the
// job's ID (the database's triggers send it for jobs marked as awaited). Notifications are
// a wake-up, not a record: every [Config.Poll] the awaiter asks [Config.Ended] which of the
// awaited jobs have ended, which covers notifications lost while nobody listened. A woken
// waiter reads its job again to see whether it ended.
package awaiter

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/notifier"
)

// DonePrefix starts the payload of a job's end notification; the job's ID follows.
const DonePrefix = "\x1fdone:"

// WorkflowPrefix starts the payload of a workflow's end notification (its settle sends
// it); the workflow's ID follows.
const WorkflowPrefix = "\x1fworkflow:"

// Config configures an [Awaiter].
type Config struct {
	// Notifier is the process's LISTEN connection; nil polls only (no notifications, as
	// with connection poolers in transaction mode).
	Notifier *notifier.Notifier
	// Channel is the channel ends are notified on.
	Channel string
	// Prefix starts the payload of an end's notification, the ID following; default
	// DonePrefix (a job's end). WorkflowPrefix serves the waits for workflows.
	Prefix string
	// Poll is the interval of the poll for ended jobs. Required.
	Poll time.Duration
	// Linger is how long the awaiter keeps running after the last waiter left.
	Linger time.Duration
	// Ended reports which of ids have ended or are gone. Required.
	Ended func(ctx context.Context, ids []pgtype.UUID) ([]pgtype.UUID, error)
	// Logger receives the poll's failures (at debug level: the next poll retries).
	Logger *slog.Logger
}

// Awaiter wakes the waiters of jobs when the jobs may have ended. Build it with [New];
// each wait registers with [Awaiter.Add].
type Awaiter struct {
	cfg       Config
	mu        sync.Mutex
	waiting   map[ulid.ULID][]chan struct{}
	running   bool
	listening chan struct{} // closed once the current run's connection listens
	idleSince time.Time     // when the last waiter left
}

// New returns an awaiter configured by cfg. It starts running at the first [Awaiter.Add].
func New(cfg Config) *Awaiter {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DonePrefix
	}
	return &Awaiter{cfg: cfg, waiting: map[ulid.ULID][]chan struct{}{}}
}

// Add registers a waiter for id: wake receives when id may have ended, done unregisters
// the waiter, and listening is closed once the process listens for ends (never, when the
// awaiter polls only). A job marked as awaited after listening is closed has its end
// notified to this waiter.
func (a *Awaiter) Add(id ulid.ULID) (wake <-chan struct{}, done func(), listening <-chan struct{}) {
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

// Running reports whether the awaiter runs (someone waits, or waited within Linger).
func (a *Awaiter) Running() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.running
}

// wake signals the waiters of id.
func (a *Awaiter) wake(id ulid.ULID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range a.waiting[id] {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// ids returns the awaited jobs; stop is true when nobody has waited for Linger.
func (a *Awaiter) ids() (ids []pgtype.UUID, stop bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.waiting) == 0 {
		if time.Since(a.idleSince) < a.cfg.Linger {
			return nil, false
		}
		a.running = false
		return nil, true
	}
	out := make([]pgtype.UUID, 0, len(a.waiting))
	for id := range a.waiting {
		out = append(out, pgtype.UUID{Bytes: id, Valid: true})
	}
	return out, false
}

// run listens for end notifications (on the process's LISTEN connection) and polls, until
// nobody has waited for Linger.
func (a *Awaiter) run(listening chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if a.cfg.Notifier != nil {
		sub := a.cfg.Notifier.Listen(a.cfg.Channel, func(payload string) {
			if rest, ok := strings.CutPrefix(payload, a.cfg.Prefix); ok {
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
	t := time.NewTicker(a.cfg.Poll)
	defer t.Stop()
	for range t.C {
		ids, stop := a.ids()
		if stop {
			return
		}
		if len(ids) == 0 {
			continue
		}
		pctx, pcancel := context.WithTimeout(ctx, a.cfg.Poll)
		ended, err := a.cfg.Ended(pctx, ids)
		pcancel()
		if err != nil {
			a.cfg.Logger.Debug("venturi: await poll failed", "err", err)
			continue
		}
		for _, u := range ended {
			a.wake(ulid.ULID(u.Bytes))
		}
	}
}

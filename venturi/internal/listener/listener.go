// Package listener holds venturi's LISTEN listener ([Listener]): the worker's service
// that holds a dedicated LISTEN connection on the worker's notification channel and turns
// the notifications it hears into calls of the functions the worker gives it: a due or a
// delayed job of one of the worker's kinds was committed, a queue was paused, resumed or
// limited, a job's run is asked to stop.
//
// The connection is checked after 10s of silence; a dead one is replaced with backoff,
// and every (re)connect reports a wake-up so that a fetch picks up what the gap missed.
// Notifications are a wake-up, not a record: the worker polls as well.
//
// The payloads are a kind (a due job), [DelayedPrefix] and a kind (a delayed job),
// [QueuePrefix] and a queue's name, and [StopPrefix], an event and a job ID. The listener
// knows nothing of package venturi: events are plain strings.
package listener

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"
)

// Notification payloads besides kinds. QueuePrefix and StopPrefix start with U+001F,
// which no sane kind does; a kind that did would only cause extra wake-ups.
const (
	// DelayedPrefix starts the payload of a delayed job: DelayedPrefix + kind.
	DelayedPrefix = "@"
	// QueuePrefix starts the payload of a queue that was paused, resumed or limited:
	// QueuePrefix + queue name.
	QueuePrefix = "\x1fqueue:"
	// StopPrefix starts the payload of a run asked to stop: StopPrefix + event + ":" + job
	// ID (as PostgreSQL prints a uuid).
	StopPrefix = "\x1fstop:"
)

// Config configures a [Listener]. Every field is required.
type Config struct {
	// ConnConfig is the configuration of the listener's own connection.
	ConnConfig *pgx.ConnConfig
	// Channel is the notification channel to LISTEN on.
	Channel string
	// Kinds are the worker's kinds: notifications of other kinds are ignored.
	Kinds []string
	// Logger receives a warning when the connection is lost.
	Logger *slog.Logger
	// Notified is called when a due job of one of Kinds was committed, and after each
	// (re)connect.
	Notified func()
	// Delayed is called when a delayed job of one of Kinds was committed.
	Delayed func()
	// Queue is called with a queue's name when it was paused, resumed or limited.
	Queue func(name string)
	// Stop is called when a job's run is asked to stop, with the job's ID and the event
	// ("replaced", "cancelled").
	Stop func(id ulid.ULID, event string)
	// Also are further channels to LISTEN on, each with the function a notification on
	// it calls (and each (re)connect: a notification may have been missed).
	Also map[string]func()
}

// Listener holds a dedicated LISTEN connection and reports notifications for the
// worker's kinds. Make one with [New] and run it with [Listener.Run].
type Listener struct {
	connConfig *pgx.ConnConfig
	channel    string
	kinds      map[string]bool
	log        *slog.Logger
	notified   func()                           // a due job of one of kinds was committed, or the listener reconnected
	delayed    func()                           // a delayed job of one of kinds was committed
	queue      func(name string)                // a queue was paused, resumed or limited
	stop       func(id ulid.ULID, event string) // a job's run is asked to stop (replaced, cancelled)
	also       map[string]func()                // further channels and what a notification on each calls
}

// New returns a listener configured by cfg. It connects when it runs.
func New(cfg Config) *Listener {
	kinds := make(map[string]bool, len(cfg.Kinds))
	for _, k := range cfg.Kinds {
		kinds[k] = true
	}
	return &Listener{connConfig: cfg.ConnConfig, channel: cfg.Channel, kinds: kinds, log: cfg.Logger,
		notified: cfg.Notified, delayed: cfg.Delayed, queue: cfg.Queue, stop: cfg.Stop, also: cfg.Also}
}

// Run listens until ctx ends, reconnecting with backoff after each lost connection.
func (l *Listener) Run(ctx context.Context) {
	delay := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := l.listen(ctx)
		if ctx.Err() != nil {
			return
		}
		l.log.Warn("venturi: listener lost its connection; polling continues", "err", err)
		sleepCtx(ctx, delay)
		delay = min(delay*2, 5*time.Second)
	}
}

func (l *Listener) listen(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	conn, err := pgx.ConnectConfig(cctx, l.connConfig)
	cancel()
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	for ch := range l.also {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return err
		}
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.channel}.Sanitize()); err != nil {
		return err
	}
	for _, f := range l.also {
		f()
	}
	l.notified()
	for {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			if !errors.Is(err, context.DeadlineExceeded) {
				return err
			}
			// Quiet for 10s: make sure the connection is still alive.
			hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := conn.Exec(hctx, "SELECT 1")
			cancel()
			if err != nil {
				return fmt.Errorf("listener heartbeat: %w", err)
			}
			continue
		}
		if f := l.also[n.Channel]; f != nil && n.Channel != l.channel {
			f()
			continue
		}
		switch {
		case l.kinds[n.Payload]:
			l.notified()
		case strings.HasPrefix(n.Payload, DelayedPrefix) && l.kinds[n.Payload[len(DelayedPrefix):]]:
			l.delayed()
		case strings.HasPrefix(n.Payload, QueuePrefix):
			l.queue(n.Payload[len(QueuePrefix):])
		case strings.HasPrefix(n.Payload, StopPrefix): // StopPrefix + event + ":" + job ID
			ev, id, _ := strings.Cut(n.Payload[len(StopPrefix):], ":")
			var u pgtype.UUID
			if err := u.Scan(id); err == nil && u.Valid {
				l.stop(ulid.ULID(u.Bytes), ev)
			}
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

package venturi

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

// listener holds a dedicated LISTEN connection and reports notifications for the
// worker's kinds. The connection is checked after 10s of silence; a dead one is replaced
// with backoff, and every (re)connect reports a wake-up so that a fetch picks up what the
// gap missed.
type listener struct {
	connConfig *pgx.ConnConfig
	channel    string
	kinds      map[string]bool
	log        *slog.Logger
	notified   func()                 // a due job of one of kinds was committed, or the listener reconnected
	delayed    func()                 // a delayed job of one of kinds was committed
	queue      func(name string)      // a queue was paused, resumed or limited
	stop       func(ulid.ULID, Event) // a job's run is asked to stop (replaced, cancelled)
}

// Notification payloads besides kinds and delayedPrefix+kind. They start with U+001F,
// which no sane kind does; a kind that did would only cause extra wake-ups.
const (
	queuePrefix = "\x1fqueue:"
	stopPrefix  = "\x1fstop:"
)

func (l *listener) run(ctx context.Context) {
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

func (l *listener) listen(ctx context.Context) error {
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
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.channel}.Sanitize()); err != nil {
		return err
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
		switch {
		case l.kinds[n.Payload]:
			l.notified()
		case strings.HasPrefix(n.Payload, delayedPrefix) && l.kinds[n.Payload[len(delayedPrefix):]]:
			l.delayed()
		case strings.HasPrefix(n.Payload, queuePrefix):
			l.queue(n.Payload[len(queuePrefix):])
		case strings.HasPrefix(n.Payload, stopPrefix): // stopPrefix + event + ":" + job ID
			ev, id, _ := strings.Cut(n.Payload[len(stopPrefix):], ":")
			var u pgtype.UUID
			if err := u.Scan(id); err == nil && u.Valid {
				l.stop(ulid.ULID(u.Bytes), Event(ev))
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

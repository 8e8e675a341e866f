package venturi

import (
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/jobrun"
	"github.com/venturi-dev/venturi/internal/listener"
)

// Notification payloads besides kinds and delayedPrefix+kind (see internal/listener).
const (
	queuePrefix = listener.QueuePrefix
	stopPrefix  = listener.StopPrefix
)

// newListener returns the worker's LISTEN listener (internal/listener) on channel for
// kinds: a due job's notification (or a reconnect) calls notified, a delayed job's
// delayed, a queue's change queue, and a run asked to stop is stopped through tracker; a
// notification on a channel of also calls its function (the workflow resolver's wake).
func newListener(cc *pgx.ConnConfig, channel string, kinds []string, log *slog.Logger, notified, delayed func(), queue func(name string), tracker *jobrun.Tracker, also map[string]func()) *listener.Listener {
	return listener.New(listener.Config{
		ConnConfig: cc, Channel: channel, Kinds: kinds, Logger: log,
		Notified: notified, Delayed: delayed, Queue: queue, Also: also,
		Stop: func(id ulid.ULID, ev string) { tracker.RequestStop(id, ev) },
	})
}

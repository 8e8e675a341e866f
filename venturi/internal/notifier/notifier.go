// Package notifier gives a process one LISTEN connection for all of its waiters.
//
// A [Notifier] listens on the union of the channels its subscriptions name, on a
// connection of its own (never a pool's: a waiter must not hold a connection that other
// requests need while it waits). It connects on the first subscription, LISTENs and
// UNLISTENs as subscriptions come and go, reconnects after errors, checks a quiet
// connection every [Heartbeat], and disconnects once nobody has subscribed for its
// linger period. Each notification is handed to every subscription of its channel, on the
// notifier's goroutine: a subscription's function must not block.
//
// Notifications are a wake-up, not a record: PostgreSQL drops those sent while nobody
// listens, so a subscriber looks again (or polls) after [Subscription.Ready] and whenever
// its function is called with the empty payload, which the notifier sends after each
// (re)connection.
package notifier

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Heartbeat is how long a connection may stay silent before the notifier checks it with
// a statement (a half-open connection hears nothing, so only a statement finds it dead).
const Heartbeat = 10 * time.Second

// Notifier holds one LISTEN connection for its subscriptions. The zero value is not
// usable; make one with [New]. It is safe for concurrent use.
type Notifier struct {
	connect func(context.Context) (*pgx.Conn, error)
	log     *slog.Logger
	linger  time.Duration
	retry   time.Duration

	mu        sync.Mutex
	subs      map[string][]*Subscription // by channel
	running   bool
	idleSince time.Time     // when the last subscription left
	changed   chan struct{} // capacity 1: the subscriptions changed
}

// New returns a notifier that opens its connection with connect, stays connected for
// linger after its last subscription leaves, and waits retry between failed connections.
func New(connect func(context.Context) (*pgx.Conn, error), linger, retry time.Duration, log *slog.Logger) *Notifier {
	return &Notifier{connect: connect, log: log, linger: linger, retry: retry,
		subs: map[string][]*Subscription{}, changed: make(chan struct{}, 1)}
}

// Subscription is one listener's interest in a channel.
type Subscription struct {
	n       *Notifier
	channel string
	notify  func(payload string)
	ready   chan struct{}
	once    sync.Once
}

// Listen subscribes notify to channel. notify is called, on the notifier's goroutine, with
// the payload of each notification on the channel, and with the empty payload each time
// the connection listens anew (notifications may have been missed); it must not block.
// Call Unlisten when done.
func (n *Notifier) Listen(channel string, notify func(payload string)) *Subscription {
	s := &Subscription{n: n, channel: channel, notify: notify, ready: make(chan struct{})}
	n.mu.Lock()
	n.subs[channel] = append(n.subs[channel], s)
	if !n.running {
		n.running = true
		go n.run()
	}
	n.mu.Unlock()
	n.poke()
	return s
}

// Ready is closed once the notifier listens on the subscription's channel: a notification
// sent after that reaches it.
func (s *Subscription) Ready() <-chan struct{} { return s.ready }

// Unlisten ends the subscription. A dispatch already under way may still call notify once;
// none after that does.
func (s *Subscription) Unlisten() {
	n := s.n
	n.mu.Lock()
	list := n.subs[s.channel]
	for i, x := range list {
		if x == s {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(n.subs, s.channel)
	} else {
		n.subs[s.channel] = list
	}
	if len(n.subs) == 0 {
		n.idleSince = time.Now()
	}
	n.mu.Unlock()
	n.poke()
}

// Channels reports the channels that have subscriptions (for tests and metrics).
func (n *Notifier) Channels() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.subs)
}

func (n *Notifier) poke() {
	select {
	case n.changed <- struct{}{}:
	default:
	}
}

// wanted returns the channels that have subscriptions, or stop when there are none and the
// linger period has passed (the notifier is then no longer running).
func (n *Notifier) wanted() (channels map[string]bool, stop bool, lingerLeft time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.subs) == 0 {
		left := n.linger - time.Since(n.idleSince)
		if left <= 0 {
			n.running = false
			return nil, true, 0
		}
		return nil, false, left
	}
	channels = make(map[string]bool, len(n.subs))
	for ch := range n.subs {
		channels[ch] = true
	}
	return channels, false, 0
}

// dispatch hands payload to the subscriptions of channel.
func (n *Notifier) dispatch(channel, payload string) {
	for _, s := range n.subscriptions(channel) {
		s.notify(payload)
	}
}

// listened marks the subscriptions of channel ready; after a new LISTEN (fresh) it also
// tells each that notifications may have been missed.
func (n *Notifier) listened(channel string, fresh bool) {
	for _, s := range n.subscriptions(channel) {
		first := false
		s.once.Do(func() { close(s.ready); first = true })
		if fresh && !first {
			s.notify("")
		}
	}
}

func (n *Notifier) subscriptions(channel string) []*Subscription {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]*Subscription(nil), n.subs[channel]...)
}

// run keeps a connection while anyone subscribes (and for the linger period after).
func (n *Notifier) run() {
	for {
		err := n.session()
		if err == nil {
			return // nobody subscribes any more
		}
		n.log.Debug("venturi: notification connection lost; waiters poll meanwhile", "err", err)
		t := time.NewTimer(n.retry)
		<-t.C
		if _, stop, _ := n.wanted(); stop {
			return
		}
	}
}

// session connects and serves the subscriptions until nobody subscribes (nil) or the
// connection fails.
func (n *Notifier) session() error {
	ctx := context.Background()
	cctx, cancel := context.WithTimeout(ctx, Heartbeat)
	conn, err := n.connect(cctx)
	cancel()
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	listening := map[string]bool{}
	for {
		want, stop, lingerLeft := n.wanted()
		if stop {
			return nil
		}
		for ch := range listening {
			if !want[ch] {
				if _, err := conn.Exec(ctx, "UNLISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
					return err
				}
				delete(listening, ch)
			}
		}
		for ch := range want {
			fresh := !listening[ch]
			if fresh {
				if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
					return err
				}
				listening[ch] = true
			}
			n.listened(ch, fresh) // subscriptions made since the last pass become ready
		}
		wait := Heartbeat
		if len(want) == 0 {
			wait = lingerLeft
		}
		msg, err := n.wait(conn, wait)
		switch {
		case err == nil:
			n.dispatch(msg.Channel, msg.Payload)
		case errors.Is(err, errChanged):
		case pgconn.Timeout(err):
			if len(want) > 0 { // quiet: make sure the connection is alive
				hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, err := conn.Exec(hctx, "SELECT 1")
				cancel()
				if err != nil {
					return err
				}
			}
		default:
			return err
		}
	}
}

var errChanged = errors.New("subscriptions changed")

// wait waits up to d for a notification, returning errChanged early when the
// subscriptions change. An interrupted wait leaves the connection usable (pgx ends it by
// a read deadline).
func (n *Notifier) wait(conn *pgx.Conn, d time.Duration) (*pgconn.Notification, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	stop, changed := make(chan struct{}), make(chan bool, 1)
	go func() {
		select {
		case <-n.changed:
			cancel()
			changed <- true
		case <-stop:
			changed <- false
		}
	}()
	msg, err := conn.WaitForNotification(ctx)
	close(stop)
	if <-changed && err != nil {
		return nil, errChanged
	}
	return msg, err
}

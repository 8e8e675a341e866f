package venturi

import (
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// SubscribeConfig configures a [Subscription].
type SubscribeConfig struct {
	// Buffer is the channel's capacity: how many events may wait for the subscriber
	// before further ones are dropped (and counted). Default 256, at most 65,536.
	Buffer int
	// Events, when not empty, keeps only these events ([EventOverflow] is always
	// delivered).
	Events []Event
}

// DefaultSubscribeBuffer is a subscription's default buffer.
const DefaultSubscribeBuffer = 256

// maxSubscribeBuffer bounds a subscription's buffer.
const maxSubscribeBuffer = 1 << 16

// Subscription delivers lifecycle events in process (see [Worker.Subscribe] and
// [Queue.Subscribe]). Delivery never blocks the sender: when the buffer is full the event
// is dropped and counted, and as soon as there is room again the subscriber receives an
// [EventOverflow] event whose Dropped says how many it missed; the worker logs the first
// drop of each such episode. Close it when done.
type Subscription struct {
	ch      chan JobEvent
	filter  []Event
	hub     *eventHub
	dropped atomic.Uint64 // in all
	pending uint64        // dropped since the last overflow event; guarded by hub.mu
	warned  time.Time     // when the last drop was logged; guarded by hub.mu
	closed  bool          // guarded by hub.mu
}

// Events returns the channel the events arrive on. It is closed by [Subscription.Close].
func (s *Subscription) Events() <-chan JobEvent { return s.ch }

// Dropped reports how many events were dropped in all because the buffer was full.
func (s *Subscription) Dropped() uint64 { return s.dropped.Load() }

// Close ends the subscription and closes its channel. Events already buffered can still
// be read.
func (s *Subscription) Close() { s.hub.remove(s) }

func (s *Subscription) wants(e Event) bool {
	return len(s.filter) == 0 || slices.Contains(s.filter, e)
}

// eventHub fans events out to subscriptions. With none, publishing costs an atomic load.
type eventHub struct {
	log  *slog.Logger
	n    atomic.Int32
	mu   sync.Mutex
	subs []*Subscription
}

func (h *eventHub) subscribe(cfg SubscribeConfig) *Subscription {
	size := cfg.Buffer
	if size <= 0 {
		size = DefaultSubscribeBuffer
	}
	size = min(size, maxSubscribeBuffer)
	s := &Subscription{ch: make(chan JobEvent, size), filter: slices.Clone(cfg.Events), hub: h}
	h.mu.Lock()
	h.subs = append(h.subs, s)
	h.n.Store(int32(len(h.subs)))
	h.mu.Unlock()
	return s
}

func (h *eventHub) remove(s *Subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	h.subs = slices.DeleteFunc(h.subs, func(x *Subscription) bool { return x == s })
	h.n.Store(int32(len(h.subs)))
	close(s.ch)
}

// active reports whether anyone subscribes: callers skip building events otherwise.
func (h *eventHub) active() bool { return h != nil && h.n.Load() > 0 }

// publish delivers e to every subscription that wants it, without blocking.
func (h *eventHub) publish(e JobEvent) {
	if !h.active() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.subs {
		if !s.wants(e.Event) {
			continue
		}
		if s.pending > 0 {
			select {
			case s.ch <- JobEvent{Event: EventOverflow, Dropped: s.pending, At: time.Now()}:
				s.pending = 0
			default:
			}
		}
		if s.pending == 0 {
			select {
			case s.ch <- e:
				continue
			default:
			}
		}
		s.pending++
		s.dropped.Add(1)
		if s.pending == 1 && time.Since(s.warned) > 10*time.Second {
			s.warned = time.Now()
			h.logger().Warn("venturi: an event subscriber is not keeping up; dropping events (counted, and reported to it as an overflow event)",
				"buffer", cap(s.ch), "dropped_total", s.dropped.Load())
		}
	}
}

func (h *eventHub) logger() *slog.Logger {
	if h.log == nil {
		return slog.Default()
	}
	return h.log
}

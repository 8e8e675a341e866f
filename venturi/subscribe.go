package venturi

import (
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"
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
//
// A run's end is published by the completer once its result is durable; by then the job
// may be due again (a retry without delay) and claimed by this worker's next fetch, whose
// started event could overtake the end. So the executor marks each run it hands to the
// completer (endPending), and a started event of a job with an end still to come is held
// until that end is published (or given up): a subscriber sees each job's events in order.
type eventHub struct {
	log  *slog.Logger
	n    atomic.Int32
	mu   sync.Mutex
	subs []*Subscription
	// ends counts, per job, the runs handed to the completer whose end is not published
	// yet; held, the started events waiting for them. Both guarded by mu; pendingEnds is
	// their total, read without the lock.
	ends        map[ulid.ULID]int
	held        map[ulid.ULID][]JobEvent
	pendingEnds atomic.Int32
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
	h.deliver(e)
}

// endPending records that a run of job id was handed to the completer: its end is to come.
func (h *eventHub) endPending(id ulid.ULID) {
	if !h.active() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ends == nil {
		h.ends = map[ulid.ULID]int{}
	}
	h.ends[id]++
	h.pendingEnds.Add(1)
}

// tracksEnds reports whether a run's end must go through publishEnd: someone subscribes,
// or ends are pending (a subscriber left since).
func (h *eventHub) tracksEnds() bool {
	return h.active() || (h != nil && h.pendingEnds.Load() > 0)
}

// publishStart publishes a started event, or holds it while an end of the same job is
// still to come.
func (h *eventHub) publishStart(e JobEvent) {
	if !h.active() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ends[e.JobID] > 0 {
		if h.held == nil {
			h.held = map[ulid.ULID][]JobEvent{}
		}
		h.held[e.JobID] = append(h.held[e.JobID], e)
		return
	}
	h.deliver(e)
}

// publishEnd publishes the end of a run of job id that the completer settled (e nil: its
// result was given up, nothing to publish), then the started events it held back.
func (h *eventHub) publishEnd(id ulid.ULID, e *JobEvent) {
	if !h.tracksEnds() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if e != nil && len(h.subs) > 0 {
		h.deliver(*e)
	}
	n, ok := h.ends[id]
	if !ok {
		return // handed over while nobody subscribed
	}
	h.pendingEnds.Add(-1)
	if n > 1 {
		h.ends[id] = n - 1
		return
	}
	delete(h.ends, id)
	held := h.held[id]
	delete(h.held, id)
	for _, s := range held {
		if len(h.subs) > 0 {
			h.deliver(s)
		}
	}
}

// deliver sends e to the subscriptions that want it; h.mu is held.
func (h *eventHub) deliver(e JobEvent) {
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

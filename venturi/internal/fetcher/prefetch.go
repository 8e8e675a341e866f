package fetcher

import "time"

// prefetchWindow decides how many claimed jobs may wait in the fetcher's buffer for a
// free handler slot (see [Config].Prefetch). It is pure arithmetic over what the fetcher
// observes, so its policy is tested with tables:
//
//   - it starts at base = min(Concurrency, Prefetch) and never leaves [base, max];
//   - it doubles when a claim came back full while handlers had run through everything
//     the previous claim brought and slots were free: handlers are faster than claims;
//   - it halves (once per claim) when a buffered job waited more than four claim round
//     trips (and at least 10ms, and at most half of PrefetchWait) before it started:
//     handlers are the bottleneck, and other workers could run the jobs this one hoards.
//     The bound by PrefetchWait matters when claims are slow (a loaded database): four
//     round trips of 300ms exceed the wait after which buffered jobs are released, and
//     without it the window would never shrink and keep claiming jobs it then releases;
//   - it halves and closes when buffered jobs had to be released because no slot freed
//     in time (PrefetchWait), and reopens when a slot frees: a worker whose handlers are
//     all stuck claims nothing, instead of claiming jobs, holding them for PrefetchWait,
//     releasing them and claiming them again, which would keep them from idle workers.
type prefetchWindow struct {
	base, max int
	wait      time.Duration // PrefetchWait: a buffered job older than this is released
	limit     int           // the buffer's current limit
	rtt       time.Duration // how long the last claim took
	shrink    bool          // the limit may halve (once per claim)
	fed       int           // jobs started from the buffer since the last claim returned
	closed    bool          // stale jobs were released and no slot has freed since
}

func newPrefetchWindow(concurrency, prefetch int, wait time.Duration) prefetchWindow {
	base := min(concurrency, prefetch)
	return prefetchWindow{base: base, max: prefetch, limit: base, wait: wait}
}

// room is how many jobs a claim may ask for now.
func (p *prefetchWindow) room(freeSlots, buffered int) int {
	if p.closed {
		return freeSlots - buffered
	}
	return freeSlots + p.limit - buffered
}

// released records that buffered jobs waited too long for a slot and were released.
func (p *prefetchWindow) released() {
	p.closed, p.limit = true, max(p.limit/2, p.base)
}

// slotFreed records that a handler returned.
func (p *prefetchWindow) slotFreed() { p.closed = false }

// started records that a buffered job started after waiting for waited.
func (p *prefetchWindow) started(waited time.Duration) {
	if p.shrink && waited > min(max(4*p.rtt, 10*time.Millisecond), p.wait/2) {
		p.limit, p.shrink = max(p.limit/2, p.base), false
	}
	p.fed++
}

// claimed records a claim that asked for asked jobs, got got of them and took rtt.
// drained says the buffer was empty and slots were free when it returned. A claim round
// trip runs the gated claim and the plain one, each asked for the same room, so a queue
// with both kinds of jobs may return more than was asked: that is a full claim too.
func (p *prefetchWindow) claimed(asked, got int, rtt time.Duration, drained bool) {
	p.rtt, p.shrink = rtt, true
	if got >= asked && p.fed > 0 && drained {
		p.limit = min(p.limit*2, p.max)
	}
	p.fed = 0
}

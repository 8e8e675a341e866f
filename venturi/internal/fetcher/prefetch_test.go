package fetcher

import (
	"testing"
	"time"
)

func TestPrefetchWindow(t *testing.T) {
	const ms = time.Millisecond
	type step struct {
		op      string // "claim", "start", "release", "freed"
		asked   int    // claim: asked
		got     int    // claim: got
		rtt     time.Duration
		drained bool          // claim: buffer empty and slots free when it returned
		waited  time.Duration // start: how long the job waited in the buffer
		limit   int           // the window's limit after the step
	}
	for _, tc := range []struct {
		name                  string
		concurrency, prefetch int
		steps                 []step
		roomFree, roomBuf     int // room(free, buffered) at the end
		wantRoom              int
	}{
		{name: "starts at base", concurrency: 100, prefetch: 1000,
			steps: nil, roomFree: 100, roomBuf: 0, wantRoom: 200},
		{name: "a prefetch below concurrency is the base", concurrency: 100, prefetch: 10,
			steps: nil, roomFree: 100, roomBuf: 0, wantRoom: 110},
		{name: "grows when handlers drained a full claim", concurrency: 100, prefetch: 1000, steps: []step{
			{op: "claim", asked: 200, got: 200, rtt: 2 * ms, drained: true, limit: 100}, // nothing fed yet
			{op: "start", waited: ms, limit: 100},
			{op: "claim", asked: 200, got: 200, rtt: 2 * ms, drained: true, limit: 200},
			{op: "start", waited: ms, limit: 200},
			{op: "claim", asked: 300, got: 300, rtt: 2 * ms, drained: true, limit: 400},
		}, roomFree: 0, roomBuf: 0, wantRoom: 400},
		{name: "does not grow past Prefetch", concurrency: 100, prefetch: 150, steps: []step{
			{op: "start", limit: 100},
			{op: "claim", asked: 200, got: 200, rtt: ms, drained: true, limit: 150},
			{op: "start", limit: 150},
			{op: "claim", asked: 250, got: 250, rtt: ms, drained: true, limit: 150},
		}, roomFree: 0, roomBuf: 0, wantRoom: 150},
		{name: "no growth on a short claim (nothing more due)", concurrency: 10, prefetch: 1000, steps: []step{
			{op: "start", limit: 10},
			{op: "claim", asked: 20, got: 5, rtt: ms, drained: true, limit: 10},
		}, roomFree: 10, roomBuf: 5, wantRoom: 15},
		{name: "grows on a claim that got more than asked (gated and plain jobs together)", concurrency: 10, prefetch: 1000, steps: []step{
			{op: "start", limit: 10},
			{op: "claim", asked: 20, got: 35, rtt: ms, drained: true, limit: 20},
		}, roomFree: 10, roomBuf: 0, wantRoom: 30},
		{name: "no growth while jobs still wait in the buffer", concurrency: 10, prefetch: 1000, steps: []step{
			{op: "start", limit: 10},
			{op: "claim", asked: 20, got: 20, rtt: ms, drained: false, limit: 10},
		}, roomFree: 0, roomBuf: 20, wantRoom: -10},
		{name: "halves once per claim when jobs wait for slots", concurrency: 10, prefetch: 1000, steps: []step{
			{op: "start", limit: 10},
			{op: "claim", asked: 20, got: 20, rtt: ms, drained: true, limit: 20},
			{op: "start", limit: 20},
			{op: "claim", asked: 40, got: 40, rtt: ms, drained: true, limit: 40},
			{op: "start", waited: 50 * ms, limit: 20}, // 50ms > max(4*1ms, 10ms)
			{op: "start", waited: 50 * ms, limit: 20}, // once per claim
			{op: "claim", asked: 10, got: 10, rtt: ms, drained: false, limit: 20},
			{op: "start", waited: 50 * ms, limit: 10},
			{op: "claim", asked: 10, got: 10, rtt: ms, drained: false, limit: 10},
			{op: "start", waited: 50 * ms, limit: 10}, // never below base
		}, roomFree: 0, roomBuf: 0, wantRoom: 10},
		{name: "a wait within four round trips is not slow", concurrency: 10, prefetch: 1000, steps: []step{
			{op: "start", limit: 10},
			{op: "claim", asked: 20, got: 20, rtt: 20 * ms, drained: true, limit: 20},
			{op: "start", waited: 70 * ms, limit: 20}, // < 4 × 20ms
		}, roomFree: 0, roomBuf: 0, wantRoom: 20},
		{name: "a wait past half of prefetchWait is slow however slow the claims", concurrency: 10, prefetch: 1000, steps: []step{
			{op: "start", limit: 10},
			{op: "claim", asked: 20, got: 20, rtt: 400 * ms, drained: true, limit: 20},
			{op: "start", waited: 600 * ms, limit: 10}, // < 4 × 400ms, > 1s / 2
		}, roomFree: 0, roomBuf: 0, wantRoom: 10},
		{name: "closed after a stale release until a slot frees", concurrency: 4, prefetch: 1000, steps: []step{
			{op: "release", limit: 4},
		}, roomFree: 0, roomBuf: 0, wantRoom: 0},
		{name: "a stale release halves the window", concurrency: 10, prefetch: 1000, steps: []step{
			{op: "start", limit: 10},
			{op: "claim", asked: 20, got: 20, rtt: ms, drained: true, limit: 20},
			{op: "start", limit: 20},
			{op: "claim", asked: 40, got: 40, rtt: ms, drained: true, limit: 40},
			{op: "release", limit: 20},
			{op: "freed", limit: 20},
			{op: "release", limit: 10},
			{op: "release", limit: 10}, // never below base
		}, roomFree: 0, roomBuf: 0, wantRoom: 0},
		{name: "closed still fills free slots", concurrency: 4, prefetch: 1000, steps: []step{
			{op: "release", limit: 4},
		}, roomFree: 3, roomBuf: 1, wantRoom: 2},
		{name: "reopens when a slot frees", concurrency: 4, prefetch: 1000, steps: []step{
			{op: "release", limit: 4},
			{op: "freed", limit: 4},
		}, roomFree: 0, roomBuf: 0, wantRoom: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPrefetchWindow(tc.concurrency, tc.prefetch, time.Second)
			for i, s := range tc.steps {
				switch s.op {
				case "claim":
					p.claimed(s.asked, s.got, s.rtt, s.drained)
				case "start":
					p.started(s.waited)
				case "release":
					p.released()
				case "freed":
					p.slotFreed()
				}
				if p.limit != s.limit {
					t.Fatalf("step %d (%s): limit %d, want %d", i, s.op, p.limit, s.limit)
				}
			}
			if got := p.room(tc.roomFree, tc.roomBuf); got != tc.wantRoom {
				t.Fatalf("room(%d, %d) = %d, want %d", tc.roomFree, tc.roomBuf, got, tc.wantRoom)
			}
		})
	}
}

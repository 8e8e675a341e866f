package venturi

import (
	"encoding/binary"
	"hash/fnv"
	"math/bits"
	"time"

	"github.com/oklog/ulid/v2"
)

// Backoff is a Fibonacci retry policy: the delay before retry n (n = 1 after the first
// failure) is min(Base*(fib(n)-1), Cap), so the multipliers run 0, 0, 1, 2, 4, 7, 12, …:
// the first two retries are immediate and the curve climbs after that.
type Backoff struct {
	Base time.Duration
	Cap  time.Duration
}

// DefaultBackoff is the worker default: one second base, one hour cap.
var DefaultBackoff = Backoff{Base: time.Second, Cap: time.Hour}

// Delay returns the un-jittered delay before retry n (n ≥ 1).
func (b Backoff) Delay(n int) time.Duration {
	if n < 1 || b.Base <= 0 {
		return 0
	}
	limit := b.Cap
	if limit <= 0 {
		limit = time.Duration(1<<63 - 1)
	}
	// fib(1) = fib(2) = 1; stop as soon as the product reaches the cap, before overflow.
	prev, cur := uint64(0), uint64(1)
	for i := 1; i < n; i++ {
		prev, cur = cur, prev+cur
		if hi, lo := bits.Mul64(uint64(b.Base), cur-1); hi != 0 || lo >= uint64(limit) {
			return limit
		}
	}
	return min(time.Duration(uint64(b.Base)*(cur-1)), limit)
}

// merged fills b's zero fields from def.
func (b Backoff) merged(def Backoff) Backoff {
	if b.Base <= 0 {
		b.Base = def.Base
	}
	if b.Cap <= 0 {
		b.Cap = def.Cap
	}
	return b
}

// Jitter applies proportional jitter with fraction f to d: the result lies in
// [d*(1-f), d]. The offset is a hash of the job's ID and the attempt number, so a job's
// schedule is reproducible and no random-number generator is involved. ULIDs minted in
// one millisecond share most of their bytes, so all of them are hashed.
func Jitter(d time.Duration, f float64, id ulid.ULID, attempt int) time.Duration {
	if d <= 0 || !(f > 0) { // also NaN
		return d
	}
	f = min(f, 1)
	span := uint64(float64(d) * f)
	if span == 0 {
		return d
	}
	h := fnv.New64a()
	h.Write(id[:])
	var a [8]byte
	binary.BigEndian.PutUint64(a[:], uint64(attempt))
	h.Write(a[:])
	x := mix64(h.Sum64())
	// Map x uniformly onto [0, span] without modulo bias worth caring about.
	off, _ := bits.Mul64(x, span+1)
	return d - time.Duration(off)
}

// mix64 is the SplitMix64 finalizer: it spreads FNV's low-entropy differences over all bits.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// retryBackoff is the delay before the retry that follows failure number failures (1 for
// the first) of job id: the worker's, and Explain's.
func retryBackoff(b Backoff, f float64, id ulid.ULID, failures int) time.Duration {
	return Jitter(b.Delay(failures), f, id, failures)
}

// maxExplainRetries bounds a retry schedule that no backstop ends.
const maxExplainRetries = 100

// retrySchedule is the delay after each failure from failure number from until the one
// that reaches the backstop (which sends the job to dead, so it has no delay); with no
// backstop (0 or less), maxExplainRetries delays.
func retrySchedule(b Backoff, f float64, id ulid.ULID, from, backstop int) []time.Duration {
	last := backstop - 1
	if backstop <= 0 {
		last = from + maxExplainRetries - 1
	}
	var out []time.Duration
	for n := max(from, 1); n <= last; n++ {
		out = append(out, retryBackoff(b, f, id, n))
	}
	return out
}

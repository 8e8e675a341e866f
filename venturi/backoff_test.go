package venturi_test

import (
	"math"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// TestBackoffDelayFibonacciSchedule pins the documented curve min(base*(fib(n)-1), cap):
// multipliers 0, 0, 1, 2, 4, 7, 12, 20.
func TestBackoffDelayFibonacciSchedule(t *testing.T) {
	t.Parallel()
	b := venturi.Backoff{Base: time.Second, Cap: time.Hour}
	want := []time.Duration{0, 0, 1 * time.Second, 2 * time.Second, 4 * time.Second, 7 * time.Second, 12 * time.Second, 20 * time.Second}
	for i, w := range want {
		n := i + 1
		if got := b.Delay(n); got != w {
			t.Errorf("Delay(%d) = %v, want %v", n, got, w)
		}
	}
	for _, n := range []int{0, -1, math.MinInt} {
		if got := b.Delay(n); got != 0 {
			t.Errorf("Delay(%d) = %v, want 0", n, got)
		}
	}
	if got := venturi.DefaultBackoff; got != (venturi.Backoff{Base: time.Second, Cap: time.Hour}) {
		t.Errorf("DefaultBackoff = %+v, want 1s base, 1h cap", got)
	}
}

// TestBackoffDelayReachesCap: the curve climbs monotonically and stops at the cap.
func TestBackoffDelayReachesCap(t *testing.T) {
	t.Parallel()
	b := venturi.Backoff{Base: time.Second, Cap: time.Hour}
	// fib(18)-1 = 2583 < 3600 <= fib(19)-1 = 4180.
	if got := b.Delay(18); got != 2583*time.Second {
		t.Errorf("Delay(18) = %v, want 2583s", got)
	}
	prev := time.Duration(0)
	for n := 1; n <= 100; n++ {
		got := b.Delay(n)
		if got < prev {
			t.Fatalf("Delay(%d) = %v < Delay(%d) = %v: not monotonic", n, got, n-1, prev)
		}
		if got > b.Cap {
			t.Fatalf("Delay(%d) = %v exceeds the cap %v", n, got, b.Cap)
		}
		if n >= 19 && got != b.Cap {
			t.Fatalf("Delay(%d) = %v, want the cap %v", n, got, b.Cap)
		}
		prev = got
	}
	small := venturi.Backoff{Base: time.Second, Cap: 10 * time.Second}
	if got := small.Delay(7); got != 10*time.Second { // 12s capped
		t.Errorf("Delay(7) with a 10s cap = %v, want 10s", got)
	}
	if got := small.Delay(6); got != 7*time.Second {
		t.Errorf("Delay(6) with a 10s cap = %v, want 7s", got)
	}
}

// TestBackoffDelayNoOverflow: far attempts and huge bases saturate instead of wrapping.
func TestBackoffDelayNoOverflow(t *testing.T) {
	t.Parallel()
	if got := (venturi.Backoff{Base: time.Second, Cap: time.Hour}).Delay(200); got != time.Hour {
		t.Errorf("Delay(200) = %v, want 1h", got)
	}
	// No cap: saturates at the largest Duration.
	for _, base := range []time.Duration{1, time.Millisecond, time.Second, time.Hour, math.MaxInt64 / 3, math.MaxInt64} {
		b := venturi.Backoff{Base: base}
		prev := time.Duration(0)
		for n := 1; n <= 200; n++ {
			got := b.Delay(n)
			if got < 0 || got < prev {
				t.Fatalf("base %v: Delay(%d) = %v after %v: overflowed", base, n, got, prev)
			}
			prev = got
		}
		if prev != math.MaxInt64 {
			t.Errorf("base %v: Delay(200) without a cap = %v, want MaxInt64", base, prev)
		}
	}
	if got := (venturi.Backoff{Base: math.MaxInt64, Cap: time.Hour}).Delay(3); got != time.Hour {
		t.Errorf("huge base: Delay(3) = %v, want the 1h cap", got)
	}
	if got := (venturi.Backoff{Base: 0, Cap: time.Hour}).Delay(10); got != 0 {
		t.Errorf("zero base: Delay(10) = %v, want 0", got)
	}
	if got := (venturi.Backoff{Base: -time.Second, Cap: time.Hour}).Delay(10); got != 0 {
		t.Errorf("negative base: Delay(10) = %v, want 0", got)
	}
}

var pinnedID = ulid.MustParse("01HZX3V5T8Q6YB2K9M4N7P0RSW")

// TestJitterPinnedValues pins the jitter of a fixed ULID: a job's retry schedule must not
// change between releases.
func TestJitterPinnedValues(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		d       time.Duration
		f       float64
		id      ulid.ULID
		attempt int
		want    time.Duration
	}{
		{time.Hour, 0.25, pinnedID, 1, 2922319685706},
		{time.Hour, 0.25, pinnedID, 2, 3122103191410},
		{time.Hour, 0.25, pinnedID, 3, 3579257330260},
		{time.Hour, 0.25, pinnedID, 4, 3318442201065},
		{time.Hour, 0.25, pinnedID, 5, 2740061733260},
		{20 * time.Second, 0.5, pinnedID, 8, 10687998767},
		{time.Second, 1, ulid.ULID{}, 0, 572623829},
	} {
		if got := venturi.Jitter(c.d, c.f, c.id, c.attempt); got != c.want {
			t.Errorf("Jitter(%v, %v, %s, %d) = %d, want %d", c.d, c.f, c.id, c.attempt, int64(got), int64(c.want))
		}
	}
}

// TestJitterReproducible: the same job and attempt always get the same delay.
func TestJitterReproducible(t *testing.T) {
	t.Parallel()
	for i := 0; i < 200; i++ {
		id := ulid.Make()
		for attempt := 1; attempt <= 5; attempt++ {
			a := venturi.Jitter(time.Minute, 0.3, id, attempt)
			b := venturi.Jitter(time.Minute, 0.3, id, attempt)
			if a != b {
				t.Fatalf("Jitter(%s, %d) gave %v then %v", id, attempt, a, b)
			}
		}
	}
}

// TestJitterWithinBounds: over many ULIDs (most minted in the same millisecond, so they
// share their time bytes) the result lies in [d*(1-f), d] and spreads over that range.
func TestJitterWithinBounds(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		d time.Duration
		f float64
	}{
		{time.Hour, 0.25},
		{7 * time.Second, 0.5},
		{time.Millisecond, 0.1},
		{3, 0.9},
		{time.Second, 1},
		{time.Second, 5}, // clamped to 1
	} {
		f := math.Min(c.f, 1)
		lo := c.d - time.Duration(float64(c.d)*f)
		minSeen, maxSeen := c.d, time.Duration(0)
		for i := 0; i < 5000; i++ {
			id := ulid.Make()
			got := venturi.Jitter(c.d, c.f, id, 1+i%7)
			if got < lo || got > c.d {
				t.Fatalf("Jitter(%v, %v, %s) = %v, outside [%v, %v]", c.d, c.f, id, got, lo, c.d)
			}
			minSeen, maxSeen = min(minSeen, got), max(maxSeen, got)
		}
		span := c.d - lo
		if span >= 100 && (minSeen-lo > span/10 || c.d-maxSeen > span/10) {
			t.Errorf("Jitter(%v, %v) spread only over [%v, %v] of [%v, %v]", c.d, c.f, minSeen, maxSeen, lo, c.d)
		}
	}
}

// TestJitterDiffersByAttempt: the attempt number is part of the hash.
func TestJitterDiffersByAttempt(t *testing.T) {
	t.Parallel()
	for i := 0; i < 50; i++ {
		id := ulid.Make()
		seen := map[time.Duration]int{}
		for attempt := 1; attempt <= 30; attempt++ {
			got := venturi.Jitter(time.Hour, 0.25, id, attempt)
			if prev, dup := seen[got]; dup {
				t.Fatalf("Jitter(%s) gave %v for attempts %d and %d", id, got, prev, attempt)
			}
			seen[got] = attempt
		}
	}
	// And the ID is part of it too: consecutive ULIDs do not share their delays.
	a, b := ulid.Make(), ulid.Make()
	same := 0
	for attempt := 1; attempt <= 10; attempt++ {
		if venturi.Jitter(time.Hour, 0.25, a, attempt) == venturi.Jitter(time.Hour, 0.25, b, attempt) {
			same++
		}
	}
	if same == 10 {
		t.Errorf("ULIDs %s and %s get identical jitter", a, b)
	}
}

// TestJitterDisabled: f <= 0 and d <= 0 return d unchanged.
func TestJitterDisabled(t *testing.T) {
	t.Parallel()
	id := ulid.Make()
	for _, f := range []float64{0, -0.25, -1, math.Inf(-1)} {
		if got := venturi.Jitter(time.Hour, f, id, 3); got != time.Hour {
			t.Errorf("Jitter(1h, %v) = %v, want 1h", f, got)
		}
	}
	for _, d := range []time.Duration{0, -time.Second} {
		if got := venturi.Jitter(d, 0.5, id, 3); got != d {
			t.Errorf("Jitter(%v, 0.5) = %v, want %v", d, got, d)
		}
	}
}

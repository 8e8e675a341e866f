package venturi_test

import (
	"math"
	"math/big"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// FuzzJitter: for any delay, fraction, job ID and attempt, the jittered delay lies in
// [d*(1-f), d] and is the same every time it is computed.
func FuzzJitter(f *testing.F) {
	f.Add(int64(time.Hour), uint16(2500), pinnedID[:], int64(1))
	f.Add(int64(time.Second), uint16(10000), make([]byte, 16), int64(0))
	f.Add(int64(math.MaxInt64), uint16(10000), []byte("0123456789abcdef"), int64(-1))
	f.Add(int64(3), uint16(65535), []byte{}, int64(math.MaxInt64))
	f.Add(int64(-5), uint16(5000), []byte{1}, int64(2))
	f.Fuzz(func(t *testing.T, d int64, permyriad uint16, idBytes []byte, attempt int64) {
		var id ulid.ULID
		copy(id[:], idBytes)
		frac := float64(permyriad) / 10000 // 0 to 6.5535: beyond 1 is clamped
		dur := time.Duration(d)
		got := venturi.Jitter(dur, frac, id, int(attempt))
		if again := venturi.Jitter(dur, frac, id, int(attempt)); again != got {
			t.Fatalf("Jitter(%v, %v, %s, %d) gave %v then %v", dur, frac, id, attempt, got, again)
		}
		if dur <= 0 || frac == 0 {
			if got != dur {
				t.Fatalf("Jitter(%v, %v) = %v, want it unchanged", dur, frac, got)
			}
			return
		}
		f := math.Min(frac, 1)
		// The lower bound in exact arithmetic, less one float rounding step.
		lo := float64(dur)*(1-f) - float64(dur)*1e-15 - 1
		if got > dur || float64(got) < lo || got < 0 {
			t.Fatalf("Jitter(%v, %v, %s, %d) = %v, outside [%v, %v]", dur, frac, id, attempt, got, time.Duration(lo), dur)
		}
	})
}

// FuzzBackoffDelay checks Delay against min(base*(fib(n)-1), cap) in exact arithmetic.
func FuzzBackoffDelay(f *testing.F) {
	f.Add(int64(time.Second), int64(time.Hour), 8)
	f.Add(int64(time.Second), int64(time.Hour), 200)
	f.Add(int64(1), int64(0), 93)
	f.Add(int64(math.MaxInt64), int64(0), 3)
	f.Add(int64(0), int64(time.Hour), 5)
	f.Add(int64(time.Millisecond), int64(-1), 1)
	f.Fuzz(func(t *testing.T, base, cap int64, n int) {
		n %= 400 // keeps the exact Fibonacci cheap
		b := venturi.Backoff{Base: time.Duration(base), Cap: time.Duration(cap)}
		got := b.Delay(n)
		want := big.NewInt(0)
		if n >= 1 && base > 0 {
			prev, cur := big.NewInt(0), big.NewInt(1) // fib(1) = 1
			for i := 1; i < n; i++ {
				prev, cur = cur, new(big.Int).Add(prev, cur)
			}
			want.Mul(big.NewInt(base), cur.Sub(cur, big.NewInt(1)))
			limit := big.NewInt(math.MaxInt64)
			if cap > 0 {
				limit = big.NewInt(cap)
			}
			if want.Cmp(limit) > 0 {
				want = limit
			}
		}
		if big.NewInt(int64(got)).Cmp(want) != 0 {
			t.Fatalf("Backoff{%v, %v}.Delay(%d) = %d, want %s", b.Base, b.Cap, n, int64(got), want)
		}
	})
}

// FuzzKeyOf: KeyOf joins the formatted parts with '/'.
func FuzzKeyOf(f *testing.F) {
	f.Add("user", "profile", int64(42))
	f.Add("", "", int64(0))
	f.Add("a/b", "c", int64(-1))
	f.Add("\x00", "\xff", int64(math.MinInt64))
	f.Fuzz(func(t *testing.T, a, b string, n int64) {
		if got := venturi.KeyOf(); got != "" {
			t.Fatalf("KeyOf() = %q", got)
		}
		if got := venturi.KeyOf(a); string(got) != a {
			t.Fatalf("KeyOf(%q) = %q", a, got)
		}
		if got := venturi.KeyOf(a, b); string(got) != a+"/"+b || len(got) != len(a)+len(b)+1 {
			t.Fatalf("KeyOf(%q, %q) = %q", a, b, got)
		}
		want := a + "/" + strconv.FormatInt(n, 10) + "/" + b
		if got := venturi.KeyOf(a, n, b); string(got) != want || venturi.KeyOf(a, n, b) != got {
			t.Fatalf("KeyOf(%q, %d, %q) = %q, want %q", a, n, b, got, want)
		}
		if got := venturi.KeyOf(a, b, a); strings.Count(string(got), "/") != 2*strings.Count(a, "/")+strings.Count(b, "/")+2 {
			t.Fatalf("KeyOf(%q, %q, %q) = %q: separators", a, b, a, got)
		}
	})
}

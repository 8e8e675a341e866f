package lograte

import (
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	now := time.Unix(1000, 0)
	l := &Limiter{Every: 10 * time.Second, Now: func() time.Time { return now }}
	step := func(d time.Duration, wantLog bool, wantSkipped int) {
		t.Helper()
		now = now.Add(d)
		if log, skipped := l.Fail(); log != wantLog || skipped != wantSkipped {
			t.Fatalf("at +%v: Fail() = %v, %d; want %v, %d", d, log, skipped, wantLog, wantSkipped)
		}
	}
	step(0, true, 0) // the first failure is logged at once
	for range 39 {   // a tick every 250ms
		step(250*time.Millisecond, false, 0)
	}
	step(250*time.Millisecond, true, 39) // ten seconds later: one line for the 39 held back
	step(time.Second, false, 0)
	l.OK()
	step(time.Second, true, 0) // after a success, the next failure at once
}

func TestLimiterZeroValue(t *testing.T) {
	var l Limiter
	if log, _ := l.Fail(); !log {
		t.Fatal("the first failure of a zero Limiter was not logged")
	}
	if log, _ := l.Fail(); log {
		t.Fatal("a second failure at once was logged")
	}
}

func TestLimiterWarn(t *testing.T) {
	var buf strings.Builder
	log := slog.New(slog.NewTextHandler(&buf, nil))
	now := time.Unix(1000, 0)
	l := &Limiter{Every: time.Second, Now: func() time.Time { return now }}
	l.Warn(log, "loop failed", "err", "boom")
	l.Warn(log, "loop failed", "err", "boom")
	now = now.Add(time.Second)
	l.Warn(log, "loop failed", "err", "boom")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "failed_since_last_logged=0") || !strings.Contains(lines[1], "failed_since_last_logged=1") {
		t.Fatalf("logged:\n%s", buf.String())
	}
}

// Package lograte keeps a loop that fails on every tick (the database is gone) from
// logging on every tick: the first failure is logged at once, then at most one every
// interval while the failures go on, each saying how many failures it stands for. A
// success makes the next failure log at once again.
package lograte

import (
	"log/slog"
	"sync"
	"time"
)

// DefaultEvery is how often a Limiter with no Every lets a failure through while the
// failures go on.
const DefaultEvery = 10 * time.Second

// Limiter is one loop's (or one message's) limit. The zero value is ready to use.
type Limiter struct {
	// Every is the least time between two logged failures (0: DefaultEvery).
	Every time.Duration
	// Now reads the clock (nil: time.Now); tests set it.
	Now func() time.Time

	mu      sync.Mutex
	last    time.Time // when the last failure was logged (zero: none since a success)
	skipped int       // failures since then that were not
}

// Fail records a failure and reports whether to log it, and how many failures before it
// were not logged since the last one that was.
func (l *Limiter) Fail() (log bool, skipped int) {
	now := time.Now
	if l.Now != nil {
		now = l.Now
	}
	every := l.Every
	if every <= 0 {
		every = DefaultEvery
	}
	t := now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() && t.Sub(l.last) < every {
		l.skipped++
		return false, 0
	}
	skipped, l.skipped, l.last = l.skipped, 0, t
	return true, skipped
}

// Warn records a failure and, when Fail lets it through, logs msg with args on log and
// the number of failures it stands for besides itself (failed_since_last_logged).
func (l *Limiter) Warn(log *slog.Logger, msg string, args ...any) {
	if ok, skipped := l.Fail(); ok {
		log.Warn(msg, append(args, "failed_since_last_logged", skipped)...)
	}
}

// OK records a success: the next failure is logged at once.
func (l *Limiter) OK() {
	l.mu.Lock()
	l.last, l.skipped = time.Time{}, 0
	l.mu.Unlock()
}

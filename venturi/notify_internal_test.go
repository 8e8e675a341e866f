package venturi

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestChannelNameCutsAtACharacterBoundary(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"venturi_insert.public", "venturi_insert.public"},
		{strings.Repeat("a", 63), strings.Repeat("a", 63)},
		{strings.Repeat("a", 64), strings.Repeat("a", 63)},
		// "é" is two bytes; byte 63 would fall inside the last one.
		{strings.Repeat("a", 62) + "é", strings.Repeat("a", 62)},
		{strings.Repeat("a", 61) + "é" + "z", strings.Repeat("a", 61) + "é"},
		{"venturi_insert." + strings.Repeat("日本", 20), "venturi_insert." + strings.Repeat("日本", 8)},
	} {
		got := channelName(tc.in)
		if got != tc.want || len(got) > 63 || !utf8.ValidString(got) {
			t.Errorf("channelName(%q) = %q (%d bytes), want %q", tc.in, got, len(got), tc.want)
		}
	}
}

// TestDelayedNotifyDoesNotSuppressDue: due and delayed jobs of one kind are debounced
// apart, so a delayed enqueue right before a due one cannot swallow the due job's wake-up.
func TestDelayedNotifyDoesNotSuppressDue(t *testing.T) {
	t.Parallel()
	l := &notifyLimiter{every: time.Hour, last: map[string]time.Time{}}
	if !l.allow(notifyPayload("k", false)) || !l.allow(notifyPayload("k", true)) {
		t.Fatal("a delayed notification suppressed a due one")
	}
	if l.allow(notifyPayload("k", true)) || l.allow(notifyPayload("k", false)) {
		t.Fatal("no debounce within the interval")
	}
	if got := notifyPayload("k", false); got != delayedPrefix+"k" {
		t.Fatalf("delayed payload %q", got)
	}
}

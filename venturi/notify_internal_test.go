package venturi

import (
	"strings"
	"testing"
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

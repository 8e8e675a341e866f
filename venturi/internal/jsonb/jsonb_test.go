package jsonb

import (
	"errors"
	"strings"
	"testing"
)

var (
	errInvalid  = errors.New("invalid")
	errTooLarge = errors.New("too large")
)

func TestMarshal(t *testing.T) {
	cases := []struct {
		name string
		v    any
		max  int
		want error
	}{
		{"a value", map[string]string{"a": "b"}, 100, nil},
		{"text with an escaped backslash before u0000", `a\u0000`, 100, nil},
		{"NUL", "a\x00b", 100, errInvalid},
		{"NUL after an escaped backslash", "\\\x00", 100, errInvalid},
		{"does not encode", make(chan int), 100, errInvalid},
		{"at the limit", strings.Repeat("x", 8), 10, nil},
		{"over the limit", strings.Repeat("x", 9), 10, errTooLarge},
	}
	for _, c := range cases {
		_, err := Marshal(c.v, c.max, errInvalid, errTooLarge)
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

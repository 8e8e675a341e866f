// Package jsonb encodes Go values for venturi's jsonb columns (payloads, carries, step
// results, signal payloads, metadata), refusing what PostgreSQL would reject instead of
// letting the statement fail: values that do not encode, encodings over a size limit, and
// the NUL character, which jsonb cannot store. Package venturi and venturi/venturitest
// both encode through it, so a test refuses what an enqueue refuses.
package jsonb

import (
	"encoding/json"
	"fmt"
)

// Marshal encodes v as JSON for a jsonb column. invalid is the error returned (wrapped)
// when v does not encode or holds a NUL character, tooLarge the one returned when its
// encoding is longer than max bytes: the caller's errors, which name what v is.
func Marshal(v any, max int, invalid, tooLarge error) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", invalid, err)
	}
	if len(b) > max {
		return nil, tooLarge
	}
	if HasEscapedNUL(b) {
		return nil, fmt.Errorf("%w: strings containing NUL (\\u0000) cannot be stored in jsonb", invalid)
	}
	return b, nil
}

// HasEscapedNUL reports whether the JSON text b holds the NUL character, which
// encoding/json writes as \u0000 and jsonb refuses. An escaped backslash followed by
// "u0000" is text, not NUL.
func HasEscapedNUL(b []byte) bool {
	const esc = `\u0000`
	for i := 0; i+len(esc) <= len(b); i++ {
		if b[i] == '\\' && string(b[i:i+len(esc)]) == esc {
			n := 0 // the backslashes just before this one
			for j := i - 1; j >= 0 && b[j] == '\\'; j-- {
				n++
			}
			if n%2 == 0 {
				return true
			}
		}
	}
	return false
}

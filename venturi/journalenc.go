package venturi

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// appendEntry appends e as encoding/json would marshal it (same names, same omissions).
func appendEntry(buf []byte, e *JournalEntry) []byte {
	buf = append(buf, `{"event":`...)
	buf = appendJSONString(buf, string(e.Event))
	buf = appendIntField(buf, `,"run":`, int64(e.Run))
	buf = appendStringField(buf, `,"note":`, e.Note)
	if len(e.Attachment) > 0 {
		buf = append(buf, `,"attachment":`...)
		buf = append(buf, e.Attachment...) // JSON from encodeJSON
	}
	buf = appendIntField(buf, `,"token":`, e.Token)
	buf = appendStringField(buf, `,"worker":`, e.Worker)
	buf = appendTimeField(buf, `,"started_at":"`, e.StartedAt)
	buf = appendTimeField(buf, `,"at":"`, e.At)
	buf = appendIntField(buf, `,"resume_in":`, int64(e.ResumeIn))
	buf = appendStringField(buf, `,"merge":`, e.Merge)
	buf = appendStringField(buf, `,"due":`, e.Due)
	buf = appendTimeField(buf, `,"due_before":"`, e.DueBefore)
	buf = appendTimeField(buf, `,"due_after":"`, e.DueAfter)
	if len(e.Wait) > 0 {
		buf = append(buf, `,"wait":[`...)
		for i, name := range e.Wait {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = appendJSONString(buf, name)
		}
		buf = append(buf, ']')
	}
	return append(buf, '}')
}

// appendIntField appends prefix and v, unless v is zero (omitempty).
func appendIntField(buf []byte, prefix string, v int64) []byte {
	if v == 0 {
		return buf
	}
	return strconv.AppendInt(append(buf, prefix...), v, 10)
}

// appendStringField appends prefix and s as a JSON string, unless s is empty (omitempty).
func appendStringField(buf []byte, prefix, s string) []byte {
	if s == "" {
		return buf
	}
	return appendJSONString(append(buf, prefix...), s)
}

// appendTimeField appends prefix and t as time.Time marshals to JSON, unless t is zero.
func appendTimeField(buf []byte, prefix string, t time.Time) []byte {
	if t.IsZero() {
		return buf
	}
	buf = append(buf, prefix...)
	buf = t.AppendFormat(buf, time.RFC3339Nano)
	return append(buf, '"')
}

// appendJSONString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD, as with
// encoding/json; NUL characters are dropped, because jsonb cannot store them.
func appendJSONString(buf []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	buf = append(buf, '"')
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			buf = append(buf, s[start:i]...)
			switch b {
			case '"', '\\':
				buf = append(buf, '\\', b)
			case '\n':
				buf = append(buf, '\\', 'n')
			case '\r':
				buf = append(buf, '\\', 'r')
			case '\t':
				buf = append(buf, '\\', 't')
			case 0:
			default:
				buf = append(buf, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			buf = append(buf, s[start:i]...)
			buf = append(buf, "\ufffd"...)
			i += size
			start = i
			continue
		}
		i += size
	}
	buf = append(buf, s[start:]...)
	return append(buf, '"')
}

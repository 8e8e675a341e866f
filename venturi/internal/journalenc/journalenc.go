// Package journalenc encodes journal entries for the hot path: [Append] writes an [Entry]
// as encoding/json would marshal venturi.JournalEntry (same names, same omissions), by
// hand into the caller's buffer, so that a batch of hundreds of run ends costs a handful
// of allocations instead of several per entry. The worker's run ends (FinishRuns) and the
// merged entries of enqueues are written with it.
//
// Entry mirrors venturi.JournalEntry with plain types (Event is a string), so that the
// internal packages that write entries need not import package venturi; the root converts
// where the two meet.
package journalenc

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

// Entry is one journal entry as it is stored: venturi.JournalEntry's fields, in its
// order, with the event as a plain string. See venturi.JournalEntry for what each means.
type Entry struct {
	// Event is how the run ended ("completed", "failed", ...), or "merged".
	Event string
	// Run is the run's number; zero for merged entries.
	Run int
	// Note is the run's conclusion: the outcome's note, or the error's message.
	Note string
	// Attachment is the run's structured evidence: JSON, copied as it is.
	Attachment json.RawMessage
	// Token is the run's fencing token.
	Token int64
	// Worker is the ID of the worker that ran it.
	Worker string
	// StartedAt is when the run was claimed (database clock).
	StartedAt time.Time
	// At is when the run ended.
	At time.Time
	// ResumeIn is the requested delay of a pause or the backoff of a retry.
	ResumeIn time.Duration
	// Merge is the decision of a merged entry.
	Merge string
	// Due is the due-time policy a merged entry applied; DueBefore and DueAfter the job's
	// due time before and after the merge.
	Due       string
	DueBefore time.Time
	DueAfter  time.Time
	// Wait names the signals a waiting entry's run waits for.
	Wait []string
}

// Append appends e as encoding/json would marshal it (same names, same omissions).
func Append(buf []byte, e *Entry) []byte {
	buf = append(buf, `{"event":`...)
	buf = AppendString(buf, e.Event)
	buf = appendIntField(buf, `,"run":`, int64(e.Run))
	buf = appendStringField(buf, `,"note":`, e.Note)
	if len(e.Attachment) > 0 {
		buf = append(buf, `,"attachment":`...)
		buf = append(buf, e.Attachment...) // JSON already: the attachment as the run encoded it
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
			buf = AppendString(buf, name)
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
	return AppendString(append(buf, prefix...), s)
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

// AppendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD, as with
// encoding/json; NUL characters are dropped, because jsonb cannot store them.
func AppendString(buf []byte, s string) []byte {
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

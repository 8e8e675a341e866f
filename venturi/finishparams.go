package venturi

import (
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// finishParams builds one FinishRuns statement. Each journal entry is complete: the run's
// start is the claim's database time and its end that time plus the measured duration.
// The entries are written by hand into one buffer and sliced out of a single string, so
// a batch of hundreds of runs costs a handful of allocations instead of several per run.
// (One JSON parameter read with jsonb_to_recordset allocated even less, but cost the
// server a quarter more CPU per run than these arrays: bench/FINDINGS.md.)
func finishParams(worker string, reqs []*finishReq) dbsqlc.FinishRunsParams {
	n := len(reqs)
	p := dbsqlc.FinishRunsParams{
		Ids: make([]pgtype.UUID, n), Tokens: make([]int64, n), States: make([]string, n),
		DelaysUs: make([]int64, n), Failed: make([]bool, n), SetCarry: make([]bool, n),
		Carries: make([]string, n), Entries: make([]string, n),
	}
	var buf []byte
	ends := make([]int, n)
	for i, r := range reqs {
		e := r.entry
		e.Run, e.Token, e.Worker, e.StartedAt = r.job.runs, r.job.token, worker, r.job.started
		if !r.job.started.IsZero() {
			e.At = r.job.started.Add(r.ended.Sub(r.job.sent))
		}
		buf = append(buf, '[')
		buf = appendEntry(buf, &e)
		buf = append(buf, ']')
		ends[i] = len(buf)
		p.Ids[i], p.Tokens[i], p.States[i] = uuidOf(r.job.id), r.job.token, string(r.state)
		p.DelaysUs[i], p.Failed[i], p.SetCarry[i] = delayOf(r.delay), r.failed, r.setCarry
		p.Carries[i] = string(r.carry)
	}
	all, start := string(buf), 0
	for i, end := range ends {
		p.Entries[i], start = all[start:end], end
	}
	return p
}

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

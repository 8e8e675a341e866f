package venturi

import (
	"encoding/hex"
	"strconv"
	"time"
	"unicode/utf8"
)

// appendFinishRuns appends the FinishRuns parameter for reqs to buf: a JSON array with
// one object per run, which the statement reads with jsonb_to_recordset. It is written by
// hand into a reused buffer because the finisher sends hundreds of runs per statement and
// encoding them through reflection and eight parameter arrays was most of the worker's
// garbage. Each journal entry is complete: the run's start is the claim's database time
// and its end that time plus the measured duration.
func appendFinishRuns(buf []byte, worker string, reqs []*finishReq) []byte {
	buf = append(buf, '[')
	for i, r := range reqs {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, `{"id":"`...)
		buf = appendUUID(buf, r.job.id)
		buf = append(buf, `","token":`...)
		buf = strconv.AppendInt(buf, r.job.token, 10)
		buf = append(buf, `,"state":"`...)
		buf = append(buf, r.state...)
		buf = append(buf, `","delay_us":`...)
		buf = strconv.AppendInt(buf, delayOf(r.delay), 10)
		buf = append(buf, `,"failed":`...)
		buf = strconv.AppendBool(buf, r.failed)
		buf = append(buf, `,"set_carry":`...)
		buf = strconv.AppendBool(buf, r.setCarry)
		buf = append(buf, `,"carry":`...)
		if len(r.carry) == 0 {
			buf = append(buf, "null"...)
		} else {
			buf = append(buf, r.carry...) // JSON from encodeJSON
		}
		e := r.entry
		e.Run, e.Token, e.Worker, e.StartedAt = r.job.runs, r.job.token, worker, r.job.started
		if !r.job.started.IsZero() {
			e.At = r.job.started.Add(r.ended.Sub(r.job.sent))
		}
		buf = append(buf, `,"entry":[`...)
		buf = appendEntry(buf, &e)
		buf = append(buf, "]}"...)
	}
	return append(buf, ']')
}

// appendEntry appends e as encoding/json would marshal it (same names, same omissions).
func appendEntry(buf []byte, e *JournalEntry) []byte {
	buf = append(buf, `{"event":`...)
	buf = appendJSONString(buf, string(e.Event))
	if e.Run != 0 {
		buf = append(buf, `,"run":`...)
		buf = strconv.AppendInt(buf, int64(e.Run), 10)
	}
	if e.Note != "" {
		buf = append(buf, `,"note":`...)
		buf = appendJSONString(buf, e.Note)
	}
	if len(e.Attachment) > 0 {
		buf = append(buf, `,"attachment":`...)
		buf = append(buf, e.Attachment...) // JSON from encodeJSON
	}
	if e.Token != 0 {
		buf = append(buf, `,"token":`...)
		buf = strconv.AppendInt(buf, e.Token, 10)
	}
	if e.Worker != "" {
		buf = append(buf, `,"worker":`...)
		buf = appendJSONString(buf, e.Worker)
	}
	if !e.StartedAt.IsZero() {
		buf = append(buf, `,"started_at":"`...)
		buf = e.StartedAt.AppendFormat(buf, time.RFC3339Nano)
		buf = append(buf, '"')
	}
	if !e.At.IsZero() {
		buf = append(buf, `,"at":"`...)
		buf = e.At.AppendFormat(buf, time.RFC3339Nano)
		buf = append(buf, '"')
	}
	if e.ResumeIn != 0 {
		buf = append(buf, `,"resume_in":`...)
		buf = strconv.AppendInt(buf, int64(e.ResumeIn), 10)
	}
	if e.Merge != "" {
		buf = append(buf, `,"merge":`...)
		buf = appendJSONString(buf, e.Merge)
	}
	return append(buf, '}')
}

// appendUUID appends id in the canonical 8-4-4-4-12 hex form.
func appendUUID(buf []byte, id [16]byte) []byte {
	var s [36]byte
	hex.Encode(s[0:8], id[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], id[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], id[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], id[8:10])
	s[23] = '-'
	hex.Encode(s[24:36], id[10:16])
	return append(buf, s[:]...)
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

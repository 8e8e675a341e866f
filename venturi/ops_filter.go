package venturi

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/oklog/ulid/v2"
)

// Bounds of a job filter.
const (
	// MaxFilterBytes bounds a filter's text (ParseJobFilter's input, and a JobFilter's
	// String): enough for a page of MaxListPage job IDs.
	MaxFilterBytes = 64 << 10
	// MaxFilterValueBytes bounds one value of a filter (a kind, a note, a path match).
	MaxFilterValueBytes = 1024
)

// ErrInvalidFilter is the error (wrapped, with the reason) of a filter that cannot be
// parsed or used.
var ErrInvalidFilter = errors.New("venturi: invalid job filter")

// filterError names the term or field of a filter that is wrong.
func filterError(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidFilter, fmt.Sprintf(format, args...))
}

// ParseJobFilter parses the filter grammar: terms separated by spaces, each key:value,
// a value in double quotes when it holds spaces or quotes (Go string syntax). Keys: id,
// state (blocked included), kind, queue, workflow (a workflow's or batch's ID: its jobs),
// key (dedup key), after and before (RFC 3339 times), within (a Go duration: created less
// than that long ago), note, payload.PATH and attachment.PATH (PATH: keys separated by
// dots). A repeated id, state, kind or queue key adds an alternative; any other repeated
// key adds a condition. An unknown key, a bad value or an empty term is an error that
// names it.
//
// A condition that a JobFilter holds once combines with its repetition: two after terms
// keep the later time, two before or within terms the earlier bound; two key, note or
// workflow terms with different values are an error (no job could match both). A PATH
// segment may be quoted too (payload."a.b".c:x) when it holds a dot, a colon, a space or
// a quote. A value may be empty only when quoted, and only in a path match. The text, and
// every value once unquoted, must be valid UTF-8 without NUL characters (PostgreSQL
// stores no NUL in text). Errors wrap [ErrInvalidFilter].
func ParseJobFilter(s string) (JobFilter, error) {
	var f JobFilter
	if len(s) > MaxFilterBytes {
		return f, filterError("%d bytes; at most %d", len(s), MaxFilterBytes)
	}
	if !utf8.ValidString(s) {
		return f, filterError("not valid UTF-8")
	}
	if containsNUL(s) {
		return f, filterError("a NUL character (the database stores no NUL in text)")
	}
	terms, err := splitTerms(s)
	if err != nil {
		return f, err
	}
	for _, t := range terms {
		if err := f.addTerm(t); err != nil {
			return JobFilter{}, err
		}
	}
	return f, nil
}

// splitTerms cuts s at unquoted white space.
func splitTerms(s string) ([]string, error) {
	var terms []string
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if unicode.IsSpace(r) {
			i += n
			continue
		}
		start := i
		for i < len(s) {
			r, n := utf8.DecodeRuneInString(s[i:])
			if unicode.IsSpace(r) {
				break
			}
			if r == '"' {
				end, err := quoteEnd(s, i)
				if err != nil {
					return nil, err
				}
				i = end
				continue
			}
			i += n
		}
		terms = append(terms, s[start:i])
	}
	return terms, nil
}

// quoteEnd returns the index after the Go string literal that starts at s[i] == '"'.
func quoteEnd(s string, i int) (int, error) {
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case '"':
			return j + 1, nil
		}
	}
	return 0, filterError("term %q: unterminated quote", s[i:])
}

// cutUnquoted cuts t at the first sep outside quotes.
func cutUnquoted(t string, sep byte) (before, after string, found bool, err error) {
	for i := 0; i < len(t); i++ {
		switch t[i] {
		case '"':
			end, err := quoteEnd(t, i)
			if err != nil {
				return "", "", false, err
			}
			i = end - 1
		case sep:
			return t[:i], t[i+1:], true, nil
		}
	}
	return t, "", false, nil
}

// unquoteValue reads a bare or quoted value; quoted reports the latter.
func unquoteValue(term, v string) (s string, quoted bool, err error) {
	if !strings.HasPrefix(v, `"`) {
		if strings.Contains(v, `"`) {
			return "", false, filterError("term %q: a value with a quote must be quoted whole", term)
		}
		return v, false, nil
	}
	u, err := strconv.Unquote(v)
	if err != nil {
		return "", false, filterError("term %q: bad quoted value %s", term, v)
	}
	if !utf8.ValidString(u) {
		return "", false, filterError("term %q: value is not valid UTF-8", term)
	}
	if containsNUL(u) {
		return "", false, filterError("term %q: value holds a NUL character (the database stores no NUL in text)", term)
	}
	return u, true, nil
}

// splitPath reads PATH: segments separated by unquoted dots, each bare or quoted.
func splitPath(term, p string) ([]string, error) {
	var out []string
	for {
		seg, rest, more, err := cutUnquoted(p, '.')
		if err != nil {
			return nil, err
		}
		s, quoted, err := unquoteValue(term, seg)
		if err != nil {
			return nil, err
		}
		if s == "" && !quoted {
			return nil, filterError("term %q: empty path segment (quote it: \"\")", term)
		}
		out = append(out, s)
		if !more {
			return out, nil
		}
		p = rest
	}
}

// addTerm adds one key:value term to f.
func (f *JobFilter) addTerm(t string) error {
	k, v, ok, err := cutUnquoted(t, ':')
	if err != nil {
		return err
	}
	if !ok || k == "" {
		return filterError("term %q: want key:value", t)
	}
	key, path, hasPath := strings.Cut(k, ".")
	val, quoted, err := unquoteValue(t, v)
	if err != nil {
		return err
	}
	if val == "" && !(quoted && (key == "payload" || key == "attachment")) {
		return filterError("term %q: empty value", t)
	}
	if len(val) > MaxFilterValueBytes && key != "key" && key != "id" {
		return filterError("term %q: value over %d bytes", t, MaxFilterValueBytes)
	}
	if hasPath != (key == "payload" || key == "attachment") {
		if hasPath {
			return filterError("term %q: unknown key %q", t, k)
		}
		return filterError("term %q: %s needs a path (%s.PATH:value)", t, key, key)
	}
	switch key {
	case "id":
		id, err := ulid.ParseStrict(val)
		if err != nil {
			return filterError("term %q: bad job ID: %v", t, err)
		}
		if !slices.Contains(f.IDs, id) {
			f.IDs = append(f.IDs, id)
		}
	case "state":
		s := State(val)
		if !validState(s) {
			return filterError("term %q: unknown state %q", t, val)
		}
		if !slices.Contains(f.States, s) {
			f.States = append(f.States, s)
		}
	case "kind":
		if len(val) > 128 {
			return filterError("term %q: a kind is at most 128 bytes", t)
		}
		if !slices.Contains(f.Kinds, val) {
			f.Kinds = append(f.Kinds, val)
		}
	case "queue":
		if !validQueue(val) {
			return filterError("term %q: bad queue name", t)
		}
		if !slices.Contains(f.Queues, val) {
			f.Queues = append(f.Queues, val)
		}
	case "workflow":
		id, err := ulid.ParseStrict(val)
		if err != nil {
			return filterError("term %q: bad workflow ID: %v", t, err)
		}
		if f.Workflow != (ulid.ULID{}) && f.Workflow != id {
			return filterError("term %q: a second, different workflow matches no job", t)
		}
		f.Workflow = id
	case "key":
		if len(val) > MaxDedupKeyBytes {
			return filterError("term %q: a dedup key is at most %d bytes", t, MaxDedupKeyBytes)
		}
		if f.DedupKey != "" && string(f.DedupKey) != val {
			return filterError("term %q: a second, different dedup key matches no job", t)
		}
		f.DedupKey = DedupKey(val)
	case "after", "before":
		at, err := time.Parse(time.RFC3339Nano, val)
		if err != nil {
			return filterError("term %q: want an RFC 3339 time, such as 2026-01-02T15:04:05Z", t)
		}
		at = at.UTC()
		if key == "after" && (f.CreatedAfter.IsZero() || at.After(f.CreatedAfter)) {
			f.CreatedAfter = at
		}
		if key == "before" && (f.CreatedBefore.IsZero() || at.Before(f.CreatedBefore)) {
			f.CreatedBefore = at
		}
	case "within":
		d, err := time.ParseDuration(val)
		if err != nil || d <= 0 {
			return filterError("term %q: want a positive Go duration, such as 90m", t)
		}
		if f.CreatedWithin == 0 || d < f.CreatedWithin {
			f.CreatedWithin = d
		}
	case "note":
		if f.Note != "" && f.Note != val {
			return filterError("term %q: a second, different note: give one (quoted when it has spaces)", t)
		}
		f.Note = val
	case "payload", "attachment":
		p, err := splitPath(t, path)
		if err != nil {
			return err
		}
		m := PathMatch{Path: p, Value: val}
		if key == "payload" {
			f.Payload = append(f.Payload, m)
		} else {
			f.Attachment = append(f.Attachment, m)
		}
	default:
		return filterError("term %q: unknown key %q (want id, state, kind, queue, workflow, key, after, before, within, note, payload.PATH or attachment.PATH)", t, key)
	}
	return nil
}

// validState reports whether s is one of the eight states: the seven the stats count,
// and blocked (a workflow's job that waits for what it needs).
func validState(s State) bool {
	return s == StateBlocked || statsIndex(string(s)) >= 0
}

// String writes f in the grammar of [ParseJobFilter], keys in a fixed order: parsing the
// result gives f back.
func (f JobFilter) String() string {
	var b strings.Builder
	term := func(k, v string) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k)
		b.WriteByte(':')
		b.WriteString(quoteIfNeeded(v, false))
	}
	for _, id := range f.IDs {
		term("id", id.String())
	}
	for _, s := range f.States {
		term("state", string(s))
	}
	for _, k := range f.Kinds {
		term("kind", k)
	}
	for _, q := range f.Queues {
		term("queue", q)
	}
	if f.Workflow != (ulid.ULID{}) {
		term("workflow", f.Workflow.String())
	}
	if f.DedupKey != "" {
		term("key", string(f.DedupKey))
	}
	if !f.CreatedAfter.IsZero() {
		term("after", f.CreatedAfter.UTC().Format(time.RFC3339Nano))
	}
	if !f.CreatedBefore.IsZero() {
		term("before", f.CreatedBefore.UTC().Format(time.RFC3339Nano))
	}
	if f.CreatedWithin > 0 {
		term("within", f.CreatedWithin.String())
	}
	if f.Note != "" {
		term("note", f.Note)
	}
	for _, p := range []struct {
		key string
		ms  []PathMatch
	}{{"payload", f.Payload}, {"attachment", f.Attachment}} {
		for _, m := range p.ms {
			k := p.key
			for _, seg := range m.Path {
				k += "." + quoteIfNeeded(seg, true)
			}
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(k)
			b.WriteByte(':')
			b.WriteString(quoteIfNeeded(m.Value, false))
		}
	}
	return b.String()
}

// quoteIfNeeded quotes v (Go syntax) unless it can be written bare: in a path segment,
// dots and colons need quotes too.
func quoteIfNeeded(v string, segment bool) string {
	if v == "" || !utf8.ValidString(v) {
		return strconv.Quote(v)
	}
	for _, r := range v {
		if r == '"' || unicode.IsSpace(r) || !strconv.IsPrint(r) || (segment && (r == '.' || r == ':')) {
			return strconv.Quote(v)
		}
	}
	return v
}

// validate checks a filter built in code as ParseJobFilter checks a parsed one: every text
// is valid UTF-8 without NUL (what PostgreSQL's text takes), so that a bad value is
// ErrInvalidFilter, never a database error.
func (f *JobFilter) validate() error {
	for _, s := range f.States {
		if !validState(s) {
			return filterError("unknown state %q", s)
		}
	}
	for _, q := range f.Queues {
		if !validQueue(q) {
			return filterError("bad queue name %q", q)
		}
	}
	for _, k := range f.Kinds {
		if k == "" || len(k) > 128 || !utf8.ValidString(k) || containsNUL(k) {
			return filterError("bad kind %q", k)
		}
	}
	if len(f.DedupKey) > MaxDedupKeyBytes || !utf8.ValidString(string(f.DedupKey)) || containsNUL(string(f.DedupKey)) {
		return filterError("bad dedup key")
	}
	if f.CreatedWithin < 0 {
		return filterError("negative CreatedWithin %v", f.CreatedWithin)
	}
	if len(f.Note) > MaxFilterValueBytes || !utf8.ValidString(f.Note) || containsNUL(f.Note) {
		return filterError("bad note (at most %d bytes of UTF-8 text)", MaxFilterValueBytes)
	}
	for _, m := range slices.Concat(f.Payload, f.Attachment) {
		if len(m.Path) == 0 {
			return filterError("a path match without a path")
		}
		for _, seg := range m.Path {
			if !utf8.ValidString(seg) || containsNUL(seg) || strings.ContainsRune(seg, pathSep) {
				return filterError("bad path segment %q", seg)
			}
		}
		if len(m.Value) > MaxFilterValueBytes || !utf8.ValidString(m.Value) || containsNUL(m.Value) {
			return filterError("bad value of path %q", strings.Join(m.Path, "."))
		}
	}
	if n := len(f.String()); n > MaxFilterBytes {
		return filterError("%d bytes as text; at most %d", n, MaxFilterBytes)
	}
	return nil
}

// pathSep joins a path's segments for the database (string_to_array).
const pathSep = '\x1f'

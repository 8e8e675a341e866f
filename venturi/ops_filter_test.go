package venturi_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

func TestParseJobFilterReadsEveryKey(t *testing.T) {
	t.Parallel()
	id := ulid.MustParse("01JQ0000000000000000000000")
	wf := ulid.MustParse("01JQ0000000000000000000009")
	f, err := venturi.ParseJobFilter(`id:` + id.String() + ` state:dead state:cancelled state:blocked kind:fetch_page kind:resize
		queue:media workflow:` + wf.String() + ` key:user/42 after:2026-01-02T15:04:05+01:00 before:2026-02-01T00:00:00Z within:90m
		note:"connection refused" payload.user.id:42 payload."a.b".c:"x y" attachment.status:503`)
	if err != nil {
		t.Fatal(err)
	}
	want := venturi.JobFilter{
		IDs: []ulid.ULID{id}, States: []venturi.State{venturi.StateDead, venturi.StateCancelled, venturi.StateBlocked},
		Kinds: []string{"fetch_page", "resize"}, Queues: []string{"media"}, Workflow: wf, DedupKey: "user/42",
		CreatedAfter:  time.Date(2026, 1, 2, 14, 4, 5, 0, time.UTC),
		CreatedBefore: time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC),
		CreatedWithin: 90 * time.Minute, Note: "connection refused",
		Payload:    []venturi.PathMatch{{Path: []string{"user", "id"}, Value: "42"}, {Path: []string{"a.b", "c"}, Value: "x y"}},
		Attachment: []venturi.PathMatch{{Path: []string{"status"}, Value: "503"}},
	}
	if !filtersEqual(f, want) {
		t.Fatalf("got  %#v\nwant %#v", f, want)
	}
	again, err := venturi.ParseJobFilter(f.String())
	if err != nil || !filtersEqual(again, f) {
		t.Fatalf("String %q parses to %#v, %v", f.String(), again, err)
	}
	if got := f.String(); !strings.HasPrefix(got, "id:"+id.String()+" state:dead state:cancelled state:blocked kind:fetch_page") ||
		!strings.Contains(got, "queue:media workflow:"+wf.String()+" key:user/42") ||
		!strings.Contains(got, `note:"connection refused"`) || !strings.Contains(got, `payload."a.b".c:"x y"`) {
		t.Fatalf("String = %q", got)
	}
}

// TestParseJobFilterRepeatsCombine: repeated alternatives accumulate (without duplicates);
// repeated conditions keep the tighter bound or must agree.
func TestParseJobFilterRepeatsCombine(t *testing.T) {
	t.Parallel()
	f, err := venturi.ParseJobFilter("state:dead state:dead after:2026-01-01T00:00:00Z after:2026-03-01T00:00:00Z " +
		"before:2026-05-01T00:00:00Z before:2026-04-01T00:00:00Z within:2h within:1h key:a key:a payload.x:1 payload.x:2")
	if err != nil {
		t.Fatal(err)
	}
	if len(f.States) != 1 || f.CreatedAfter.Month() != time.March || f.CreatedBefore.Month() != time.April ||
		f.CreatedWithin != time.Hour || f.DedupKey != "a" || len(f.Payload) != 2 {
		t.Fatalf("%#v", f)
	}
	if f, err := venturi.ParseJobFilter("  \t"); err != nil || !filtersEqual(f, venturi.JobFilter{}) || f.String() != "" {
		t.Fatalf("blank filter: %#v, %v", f, err)
	}
}

func TestParseJobFilterNamesWhatIsWrong(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, says string }{
		{"kind", `"kind": want key:value`},
		{":x", "want key:value"},
		{"colour:red", `unknown key "colour"`},
		{"kind:", "empty value"},
		{`kind:""`, "empty value"},
		{"state:sleeping", `unknown state "sleeping"`},
		{"id:nope", "bad job ID"},
		{"after:yesterday", "RFC 3339"},
		{"within:-5m", "positive Go duration"},
		{"within:5", "positive Go duration"},
		{`note:"open`, "unterminated quote"},
		{`note:a"b"`, "quoted whole"},
		{`note:a"b`, "unterminated quote"},
		{"key:a key:b", "different dedup key"},
		{"workflow:nope", "bad workflow ID"},
		{"workflow:01JQ0000000000000000000000 workflow:01JQ0000000000000000000001", "different workflow"},
		{"note:a note:b", "different note"},
		{"payload:x", "needs a path"},
		{"payload..a:x", "empty path segment"},
		{"kind.x:y", `unknown key "kind.x"`},
		{"queue:" + strings.Repeat("q", 129), "bad queue name"},
		{"note:" + strings.Repeat("n", venturi.MaxFilterValueBytes+1), "over 1024 bytes"},
		{strings.Repeat("kind:k ", venturi.MaxFilterBytes/7+1), "bytes; at most"},
		{"note:\xff", "not valid UTF-8"},
	} {
		_, err := venturi.ParseJobFilter(tc.in)
		if !errors.Is(err, venturi.ErrInvalidFilter) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("ParseJobFilter(%.40q) = %v; want an ErrInvalidFilter saying %q", tc.in, err, tc.says)
		}
	}
}

// TestJobFilterStringQuotesWhatNeedsIt: a filter built in code writes text that parses
// back to it, whatever its values hold.
func TestJobFilterStringQuotesWhatNeedsIt(t *testing.T) {
	t.Parallel()
	f := venturi.JobFilter{Kinds: []string{`we"ird kind`}, Note: "tab\there", DedupKey: "a b",
		Payload:    []venturi.PathMatch{{Path: []string{"", "x:y", "é"}, Value: ""}},
		Attachment: []venturi.PathMatch{{Path: []string{"a"}, Value: "\x01"}}}
	got, err := venturi.ParseJobFilter(f.String())
	if err != nil || !filtersEqual(got, f) {
		t.Fatalf("%q parses to %#v, %v", f.String(), got, err)
	}
}

// FuzzParseJobFilter: whatever parses, its String parses to the same filter.
func FuzzParseJobFilter(f *testing.F) {
	for _, s := range []string{
		"", "state:dead", `kind:a kind:"b c" queue:q key:k note:"x y"`, "after:2026-01-02T15:04:05.123456789+02:00",
		"before:2026-01-02T15:04:05Z within:1h30m", `payload.a.b:1 payload."x.y":"" attachment.s:"\u00e9"`,
		"id:01JQ0000000000000000000000 id:01JQ0000000000000000000001", `payload."":"\"" note:\`,
		"state:blocked workflow:01JQ0000000000000000000000",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := venturi.ParseJobFilter(s)
		if err != nil {
			return
		}
		text := p.String()
		again, err := venturi.ParseJobFilter(text)
		if err != nil {
			t.Fatalf("ParseJobFilter(%q) = %#v, whose String %q fails: %v", s, p, text, err)
		}
		if !filtersEqual(again, p) {
			t.Fatalf("ParseJobFilter(%q) = %#v; its String %q parses to %#v", s, p, text, again)
		}
	})
}

// filtersEqual compares filters, times by instant.
func filtersEqual(a, b venturi.JobFilter) bool {
	if !a.CreatedAfter.Equal(b.CreatedAfter) || !a.CreatedBefore.Equal(b.CreatedBefore) {
		return false
	}
	a.CreatedAfter, a.CreatedBefore, b.CreatedAfter, b.CreatedBefore = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}

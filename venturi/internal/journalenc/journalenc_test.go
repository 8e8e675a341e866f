package journalenc_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/internal/journalenc"
)

// journalEntry is e as the public type.
func journalEntry(e journalenc.Entry) venturi.JournalEntry {
	return venturi.JournalEntry{
		Event: venturi.Event(e.Event), Run: e.Run, Note: e.Note, Attachment: e.Attachment, Token: e.Token,
		Worker: e.Worker, StartedAt: e.StartedAt, At: e.At, ResumeIn: e.ResumeIn, Merge: e.Merge, Due: e.Due,
		DueBefore: e.DueBefore, DueAfter: e.DueAfter, Wait: e.Wait,
	}
}

// TestEntryMirrorsJournalEntry: Entry has venturi.JournalEntry's stored fields, with the
// same names, in the same order, of the same types (but the event, a plain string), so
// that Append writes what encoding/json would and a field added to one is added to the
// other.
func TestEntryMirrorsJournalEntry(t *testing.T) {
	pub, enc := reflect.TypeFor[venturi.JournalEntry](), reflect.TypeFor[journalenc.Entry]()
	var stored []reflect.StructField
	for i := range pub.NumField() {
		if f := pub.Field(i); f.Tag.Get("json") != "-" {
			stored = append(stored, f)
		}
	}
	if len(stored) != enc.NumField() {
		t.Fatalf("JournalEntry stores %d fields, Entry has %d", len(stored), enc.NumField())
	}
	for i, p := range stored {
		e := enc.Field(i)
		want := p.Type
		if p.Name == "Event" {
			want = reflect.TypeFor[string]()
		}
		if e.Name != p.Name || e.Type != want {
			t.Errorf("field %d: Entry has %s %v, JournalEntry %s %v", i, e.Name, e.Type, p.Name, p.Type)
		}
	}
}

// TestAppendMatchesEncodingJSON: each hand-written entry decodes, with encoding/json, to
// the entry encoding/json would have written (but for NUL characters, which are dropped).
func TestAppendMatchesEncodingJSON(t *testing.T) {
	at := time.Date(2026, 11, 29, 10, 0, 0, 123456000, time.UTC)
	for _, e := range []journalenc.Entry{
		{},
		{Event: "completed", Run: 1, Token: 1001, Worker: `host-1-"odd"\worker`, StartedAt: at, At: at.Add(1500 * time.Microsecond)},
		{Event: "failed", Run: 2, ResumeIn: 3 * time.Second,
			Note: "quote \" backslash \\ newline \n tab \t ctl \x01 nul \x00 bad \xff ok é 😀 <>&"},
		{Event: "paused", Attachment: json.RawMessage(`{"a":[1,2,{"b":null}]}`)},
		{Event: "waiting", ResumeIn: time.Hour, Wait: []string{"approved", "paid \"now\""}},
		{Event: "merged", Merge: "replace", Due: "earliest", DueBefore: at, DueAfter: at.Add(-time.Minute),
			Note: strings.Repeat("é", 100), At: at.In(time.FixedZone("x", 3600))},
	} {
		buf := journalenc.Append([]byte("prefix"), &e)
		if !strings.HasPrefix(string(buf), "prefix") {
			t.Fatalf("Append dropped what the buffer held: %s", buf)
		}
		var got venturi.JournalEntry
		if err := json.Unmarshal(buf[len("prefix"):], &got); err != nil {
			t.Fatalf("entry is not JSON: %v\n%s", err, buf)
		}
		ref, err := json.Marshal(journalEntry(e))
		if err != nil {
			t.Fatal(err)
		}
		var want venturi.JournalEntry
		if err := json.Unmarshal(ref, &want); err != nil {
			t.Fatal(err)
		}
		want.Note = strings.ReplaceAll(want.Note, "\x00", "") // jsonb cannot store NUL
		if !reflect.DeepEqual(got, want) {
			t.Errorf("entry\n got %+v\nwant %+v", got, want)
		}
		var fields, refFields map[string]json.RawMessage
		_ = json.Unmarshal(buf[len("prefix"):], &fields)
		_ = json.Unmarshal(ref, &refFields)
		if len(fields) != len(refFields) {
			t.Errorf("%d fields written, encoding/json writes %d (omissions differ):\n%s\n%s", len(fields), len(refFields), buf, ref)
		}
	}
}

func TestAppendStringMatchesEncodingJSON(t *testing.T) {
	for _, s := range []string{"", "plain", "\"\\/", "\x00\x01\x1f\x7f", "\xff\xfe", "a\xc3", "é😀", "\u2028\u2029", "<script>&"} {
		var got string
		if err := json.Unmarshal(journalenc.AppendString(nil, s), &got); err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		ref, _ := json.Marshal(strings.ReplaceAll(s, "\x00", ""))
		var want string
		_ = json.Unmarshal(ref, &want)
		if got != want {
			t.Errorf("%q: decoded %q, encoding/json gives %q", s, got, want)
		}
	}
}

package tasks

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/venturi-dev/venturi"
)

// FuzzTaskPayloadDecode decodes arbitrary bytes the way the worker does (json.Unmarshal
// into the payload and carry types, which the worker's handler functions take as they
// are, and into the outputs an import's summary reads) and exercises every enqueue-time policy on what decoded. Properties: nothing
// panics; a decoded value survives an encode/decode round trip unchanged; merging two
// rebuilds never loses a request (Requests is at least each side's, with no overflow to a
// negative count) and yields sorted, unique tags, at most MaxRebuildTags of them; Size is always from 1 to 1000; dedup keys
// are valid UTF-8 text.
func FuzzTaskPayloadDecode(f *testing.F) {
	for _, s := range []string{
		`{"bookmark_id":"01J0000000000000000000000A","url":"https://example.com/"}`,
		`{"bookmark_id":"x","url":"HTTP://EXAMPLE.com.:8080/","import_id":"01J0000000000000000000000A"}`,
		`{"url":"http://[::1]:80/"}`, `{"url":"https://%ff%fe.example/"}`, `{"url":"https://a%1fb.example/"}`,
		`{"url":"http://` + strings.Repeat("é", 200) + `/"}`,
		`{"import_id":"01J0000000000000000000000A","page_size":50}`,
		`{"tags":["db","go"],"requests":3}`,
		`{"all":true,"requests":1}`,
		`{"next":100,"imported":90,"skipped":10,"pages":2}`,
		`{"merged":2}`,
		`{"status":"failed","reason":"http_status","http_status":410}`, `{"status":"fetched","title_found":true}`,
		`{}`, `null`, `[]`, `""`, `5`, `{"bookmark_id":5}`, `{"url":null}`, `{"page_size":"50"}`,
		`{"page_size":1e999}`, `{"page_size":-9223372036854775808}`, `{"page_size":9223372036854775807}`,
		`{"requests":9223372036854775807,"tags":["a"]}`, `{"requests":-9223372036854775808}`,
		`{"next":18446744073709551616}`, `{"tags":["","b","a","b"]}`, `{"tags":[1]}`, `{"tags":{"a":1}}`,
		`{"bookmark_id":"\u0000","url":"\ud800"}`, `{"bookmark_id":"` + "\xff\xfe" + `"}`,
		`{"import_id":"标题🚀"}`, `{"a":{"b":{"c":[[[[[[[[1]]]]]]]]}}}`, `{"bookmark_id":"x"} trailing`,
		"\x00", "\xef\xbb\xbf{}", `{"BOOKMARK_ID":"case"}`, `{"bookmark_id":"a","bookmark_id":"b"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fb FetchBookmark
		if json.Unmarshal(data, &fb) == nil {
			roundTrip(t, fb)
			if k := string(fb.DedupKey()); !utf8.ValidString(k) {
				t.Fatalf("dedup key %q is not valid UTF-8", k)
			}
			_ = fb.Merge(venturi.Pending[FetchBookmark, FetchCarry]{Payload: fb}).Decision()
			// Whatever the URL, its slot and partition are what venturi accepts, so that no
			// enqueue fails on them (ErrInvalidSlot, ErrInvalidPartition).
			if s := fb.Slot(); s.Key != "" && (!flowText(s.Key, venturi.MaxSlotKeyBytes) || s.Limit < 1) {
				t.Fatalf("slot %+v of %q is not valid", s, fb.URL)
			}
			if p := fb.Partition(); !flowText(p, venturi.MaxPartitionBytes) || (p == "") != (fb.Slot().Key == "") {
				t.Fatalf("partition %q of %q is not valid, or disagrees with slot %q", p, fb.URL, fb.Slot().Key)
			}
			if q := fb.Queue(); q != venturi.DefaultQueue && q != QueueImports {
				t.Fatalf("queue %q", q)
			}
		}
		var ib ImportBookmarks
		if json.Unmarshal(data, &ib) == nil {
			roundTrip(t, ib)
			if n := ib.Size(); n < 1 || n > 1000 {
				t.Fatalf("Size() = %d for page_size %d", n, ib.PageSize)
			}
			_ = ib.DedupKey()
			_ = ib.Priority()
			_ = ib.Merge(venturi.Pending[ImportBookmarks, ImportCarry]{Payload: ib}).Decision()
		}
		var rb RebuildTagIndex
		if json.Unmarshal(data, &rb) == nil {
			roundTrip(t, rb)
			_ = rb.DedupKey()
			_ = rb.Priority()
			other := NewRebuildTagIndex("go")
			merge := func(existing, incoming RebuildTagIndex) RebuildTagIndex {
				m := incoming.Merge(venturi.Pending[RebuildTagIndex, TagIndexCarry]{Payload: existing})
				if m.Decision() != venturi.ActionMerged || m.Carry().Merged != 1 {
					t.Fatalf("Merge = %v with carry %+v, want with and one merge counted", m.Decision(), m.Carry())
				}
				return m.Task()
			}
			for _, m := range []RebuildTagIndex{merge(other, rb), merge(rb, other), merge(rb, rb)} {
				if m.Requests < max(rb.Requests, 1) || m.Requests < 1 {
					t.Fatalf("merged requests %d < %d: a merge lost requests", m.Requests, rb.Requests)
				}
				for i := 1; i < len(m.Tags); i++ {
					if m.Tags[i-1] >= m.Tags[i] {
						t.Fatalf("merged tags %q are not sorted and unique", m.Tags)
					}
				}
				if m.All && m.Tags != nil {
					t.Fatalf("a rebuild of all tags lists tags %q", m.Tags)
				}
				if len(m.Tags) > MaxRebuildTags {
					t.Fatalf("a merge kept %d tags, over MaxRebuildTags", len(m.Tags))
				}
			}
		}
		var ic ImportCarry
		if json.Unmarshal(data, &ic) == nil {
			roundTrip(t, ic)
		}
		var tc TagIndexCarry
		if json.Unmarshal(data, &tc) == nil {
			roundTrip(t, tc)
			_ = rb.Merge(venturi.Pending[RebuildTagIndex, TagIndexCarry]{Payload: rb, Carry: tc}).Decision()
		}
		var fc FetchCarry
		_ = json.Unmarshal(data, &fc)
		var fib FetchImportedBookmarks
		if json.Unmarshal(data, &fib) == nil {
			roundTrip(t, fib)
		}
		var si SummarizeImport
		if json.Unmarshal(data, &si) == nil {
			roundTrip(t, si)
		}
		var fo FetchOutput
		if json.Unmarshal(data, &fo) == nil {
			roundTrip(t, fo)
		}
	})
}

// flowText reports whether s is a valid slot key or partition: at most n bytes of UTF-8
// without NUL or U+001F (venturi's rule).
func flowText(s string, n int) bool {
	return len(s) <= n && utf8.ValidString(s) && !strings.ContainsAny(s, "\x00\x1f")
}

// roundTrip checks that v encodes and decodes back to itself: what the worker decodes is
// what it would store again.
func roundTrip[T any](t *testing.T, v T) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("encode %#v: %v", v, err)
	}
	var back T
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	if !reflect.DeepEqual(normalize(v), normalize(back)) {
		t.Fatalf("round trip changed %#v into %#v", v, back)
	}
}

// normalize treats a nil and an empty tag list alike (omitempty drops both).
func normalize(v any) any {
	if r, ok := v.(RebuildTagIndex); ok && len(r.Tags) == 0 {
		r.Tags = nil
		return r
	}
	return v
}

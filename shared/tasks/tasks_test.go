package tasks

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/venturi-dev/venturi"
)

func TestFetchBookmarkPolicy(t *testing.T) {
	t.Parallel()
	a := FetchBookmark{BookmarkID: "01J0000000000000000000000A", URL: "https://example.com/"}
	if got, want := a.DedupKey(), venturi.DedupKey("bookmark/01J0000000000000000000000A"); got != want {
		t.Fatalf("DedupKey = %q, want %q", got, want)
	}
	if d := a.Merge(venturi.Pending[FetchBookmark, FetchCarry]{Payload: a}).Decision(); d != venturi.ActionReplaced {
		t.Fatalf("Merge = %v, want replace", d)
	}
	b, _ := json.Marshal(a)
	if string(b) != `{"bookmark_id":"01J0000000000000000000000A","url":"https://example.com/"}` {
		t.Fatalf("payload = %s", b)
	}
	imported := FetchBookmark{BookmarkID: a.BookmarkID, URL: a.URL, ImportID: "01J0000000000000000000000B"}
	if b, _ := json.Marshal(imported); string(b) != `{"bookmark_id":"01J0000000000000000000000A","url":"https://example.com/","import_id":"01J0000000000000000000000B"}` {
		t.Fatalf("imported payload = %s", b)
	}
	// Interactive fetches and imported ones have queues of their own; a fetch pending in
	// the other queue is not merged into (a merge would keep its queue).
	if a.Queue() != venturi.DefaultQueue || imported.Queue() != QueueImports {
		t.Fatalf("queues %q and %q", a.Queue(), imported.Queue())
	}
	for _, tt := range []struct {
		existing, incoming FetchBookmark
		want               venturi.Action
	}{
		{a, a, venturi.ActionReplaced},
		{imported, imported, venturi.ActionReplaced},
		{imported, a, venturi.ActionIndependent}, // a refetch while the import's fetch waits
		{a, imported, venturi.ActionIndependent},
	} {
		if d := tt.incoming.Merge(venturi.Pending[FetchBookmark, FetchCarry]{Payload: tt.existing}).Decision(); d != tt.want {
			t.Errorf("merge of %q into %q = %v, want %v", tt.incoming.Queue(), tt.existing.Queue(), d, tt.want)
		}
	}
	// Politeness: the host's slot and partition, and per-host limits.
	if got, want := a.Slot(), (venturi.Slot{Key: "host:example.com", Limit: 2, Policy: venturi.SlotQueue}); got != want {
		t.Fatalf("Slot = %+v, want %+v", got, want)
	}
	if a.Partition() != "example.com" {
		t.Fatalf("Partition = %q", a.Partition())
	}
	want := venturi.Limits{
		Rate:    venturi.Rate{N: 1, Per: time.Second, PerPartition: true},
		Breaker: venturi.Breaker{Failures: 5, Cooldown: time.Minute, PerPartition: true},
	}
	if got := (FetchBookmark{}).Limits(); got != want {
		t.Fatalf("Limits = %+v, want %+v", got, want)
	}
	if s := (FetchBookmark{URL: "not a url"}).Slot(); s != (venturi.Slot{}) {
		t.Fatalf("a URL without a host takes slot %+v", s)
	}
}

func TestFetchHost(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 300) + ".example"
	for _, tt := range []struct{ url, host string }{
		{"https://example.com/", "example.com"},
		{"HTTPS://Example.COM:8443/path?q=1", "example.com"}, // case and port do not matter
		{"http://example.com./", "example.com"},              // nor a trailing dot
		{"http://user@example.com/", "example.com"},
		{"  https://example.com/  ", "example.com"},
		{"http://[2001:DB8::1]:8080/", "2001:db8::1"},
		{"http://127.0.0.1/", "127.0.0.1"},
		{"https://bücher.example/", "bücher.example"},
		{"https://xn--bcher-kva.example/", "xn--bcher-kva.example"}, // punycode is another spelling
		{"https://b%C3%BCcher.example/", "bücher.example"},
		{"https://%ff.example/", "\ufffd.example"}, // invalid UTF-8, replaced
		{"https://" + long + "/", long[:venturi.MaxPartitionBytes]},
		{"javascript:alert(1)", ""},
		{"/relative", ""},
		{"", ""},
		{"http://[::1", ""},
	} {
		if got := FetchHost(tt.url); got != tt.host {
			t.Errorf("FetchHost(%q) = %q, want %q", tt.url, got, tt.host)
		}
	}
	if k := FetchSlotKey(long); len(k) != venturi.MaxSlotKeyBytes || !strings.HasPrefix(k, "host:aaa") {
		t.Fatalf("slot key of a long host: %d bytes", len(k))
	}
	if k := FetchSlotKey("é" + strings.Repeat("é", 200)); !utf8.ValidString(k) || len(k) > venturi.MaxSlotKeyBytes {
		t.Fatalf("slot key %q cut inside a character", k)
	}
}

func TestImportBookmarksPolicy(t *testing.T) {
	t.Parallel()
	task := ImportBookmarks{ImportID: "imp"}
	existing := venturi.Pending[ImportBookmarks, ImportCarry]{Payload: task, Carry: ImportCarry{Next: 100}}
	if d := task.Merge(existing).Decision(); d != venturi.ActionKept {
		t.Fatalf("Merge = %v, want keep (the checkpoint must survive)", d)
	}
	if task.Size() != DefaultImportPageSize || (ImportBookmarks{PageSize: 5}).Size() != 5 || (ImportBookmarks{PageSize: 1 << 20}).Size() != 1000 {
		t.Fatal("Size does not apply the default and the cap")
	}
	if task.Priority() != venturi.PriorityLow {
		t.Fatal("imports must run below fetches")
	}
	if task.Queue() != QueueImports {
		t.Fatalf("imports run in queue %q", task.Queue())
	}
}

func TestRebuildTagIndexMergeUnions(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name          string
		existing, new RebuildTagIndex
		carry         TagIndexCarry
		want          RebuildTagIndex
		wantCarry     TagIndexCarry
	}{
		{"union", NewRebuildTagIndex("go", "db"), NewRebuildTagIndex("web", "go"), TagIndexCarry{},
			RebuildTagIndex{Tags: []string{"db", "go", "web"}, Requests: 2}, TagIndexCarry{Merged: 1}},
		{"all wins", NewRebuildTagIndex("go"), RebuildTagIndex{All: true, Requests: 1}, TagIndexCarry{Merged: 4},
			RebuildTagIndex{All: true, Requests: 2}, TagIndexCarry{Merged: 5}},
		{"requests add up", RebuildTagIndex{Tags: []string{"a"}, Requests: 9}, NewRebuildTagIndex("a"), TagIndexCarry{Merged: 8},
			RebuildTagIndex{Tags: []string{"a"}, Requests: 10}, TagIndexCarry{Merged: 9}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := venturi.Pending[RebuildTagIndex, TagIndexCarry]{Payload: tt.existing, Carry: tt.carry}
			m := tt.new.Merge(p)
			if d := m.Decision(); d != venturi.ActionMerged {
				t.Fatalf("Merge = %v, want with", d)
			}
			if got := m.Task(); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("merged = %+v, want %+v", got, tt.want)
			}
			if got := m.Carry(); got != tt.wantCarry {
				t.Fatalf("merged carry = %+v, want %+v", got, tt.wantCarry)
			}
		})
	}
	if (RebuildTagIndex{Requests: BoostAfter}).Priority() != venturi.PriorityHigh || NewRebuildTagIndex("x").Priority() != venturi.PriorityNormal {
		t.Fatal("a long burst must raise the priority")
	}
	if got := NewRebuildTagIndex("b", "", "a", "b").Tags; !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Fatalf("tags = %v", got)
	}
}

// TestRebuildTagIndexMergeIsBounded: a burst of 100,000 merges, each bringing a new tag,
// keeps the pending job's payload small. Each merge goes through JSON as in the queue (the
// stored payload is decoded, merged, encoded again); once the union passes MaxRebuildTags
// the rebuild covers all tags, so no request is lost, and the payload stops growing.
func TestRebuildTagIndexMergeIsBounded(t *testing.T) {
	t.Parallel()
	const merges = 100_000
	stored, _ := json.Marshal(NewRebuildTagIndex("t0"))
	carry := TagIndexCarry{}
	largest := len(stored)
	for i := 1; i <= merges; i++ {
		var existing RebuildTagIndex
		if err := json.Unmarshal(stored, &existing); err != nil {
			t.Fatal(err)
		}
		incoming := NewRebuildTagIndex(fmt.Sprintf("tag-%06d-%s", i, strings.Repeat("x", MaxTagLen-11)))
		m := incoming.Merge(venturi.Pending[RebuildTagIndex, TagIndexCarry]{Payload: existing, Carry: carry})
		if m.Decision() != venturi.ActionMerged {
			t.Fatalf("merge %d: %v, want with", i, m.Decision())
		}
		stored, _ = json.Marshal(m.Task())
		carry = m.Carry()
		largest = max(largest, len(stored))
	}
	var final RebuildTagIndex
	_ = json.Unmarshal(stored, &final)
	if !final.All || final.Tags != nil || final.Requests != merges+1 || carry.Merged != merges {
		t.Fatalf("after %d merges: all=%v, %d tags, requests %d, merged %d; want all tags, every request counted",
			merges, final.All, len(final.Tags), final.Requests, carry.Merged)
	}
	// The bound: MaxRebuildTags tags of MaxTagLen bytes, quoted and separated, plus the
	// other fields.
	if bound := MaxRebuildTags*(MaxTagLen+3) + 64; largest > bound {
		t.Fatalf("the payload reached %d bytes, over the bound of %d", largest, bound)
	}
	t.Logf("largest payload over %d merges: %d bytes; final %s", merges, largest, stored)
}

func TestRebuildTagIndexBounds(t *testing.T) {
	t.Parallel()
	tags := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("t%03d", i)
		}
		return out
	}
	if r := NewRebuildTagIndex(tags(MaxRebuildTags)...); r.All || len(r.Tags) != MaxRebuildTags {
		t.Fatalf("%d tags: all=%v with %d tags, want the tags listed", MaxRebuildTags, r.All, len(r.Tags))
	}
	if r := NewRebuildTagIndex(tags(MaxRebuildTags + 1)...); !r.All || r.Tags != nil {
		t.Fatalf("%d tags: all=%v with %d tags, want a rebuild of all tags", MaxRebuildTags+1, r.All, len(r.Tags))
	}
	if r := NewRebuildTagIndex("ok", strings.Repeat("x", MaxTagLen+1)); !r.All {
		t.Fatal("a tag over MaxTagLen must turn the rebuild into one of all tags")
	}
	// A merge exactly at the cap keeps the list; one past it does not.
	existing := venturi.Pending[RebuildTagIndex, TagIndexCarry]{Payload: NewRebuildTagIndex(tags(MaxRebuildTags - 1)...)}
	if m := NewRebuildTagIndex("zzz").Merge(existing).Task(); m.All || len(m.Tags) != MaxRebuildTags {
		t.Fatalf("merge to the cap: all=%v with %d tags", m.All, len(m.Tags))
	}
	existing.Payload = NewRebuildTagIndex(tags(MaxRebuildTags)...)
	if m := NewRebuildTagIndex("zzz").Merge(existing).Task(); !m.All || m.Tags != nil || m.Requests != 2 {
		t.Fatalf("merge past the cap = %+v, want all tags and 2 requests", m)
	}
}

// TestMergeDueTimes: a refetch keeps the pending fetch's due time (throttle); a tag-index
// request with QuietMS debounces with the maximum wait, and one without keeps venturi's
// default (the earliest due time).
func TestMergeDueTimes(t *testing.T) {
	t.Parallel()
	f := FetchBookmark{BookmarkID: "01J0000000000000000000000A", URL: "https://example.com/"}
	if due := f.Merge(venturi.Pending[FetchBookmark, FetchCarry]{Payload: f}).Due(); due.Policy != venturi.DueKeep {
		t.Fatalf("fetch merge due = %+v, want keep", due)
	}
	r := NewRebuildTagIndex("go")
	r.QuietMS = 2000
	due := r.Merge(venturi.Pending[RebuildTagIndex, TagIndexCarry]{Payload: NewRebuildTagIndex("db")}).Due()
	if due != (venturi.Due{Policy: venturi.DueDebounce, Delay: 2 * time.Second, MaxWait: TagIndexMaxWait}) {
		t.Fatalf("debounced rebuild due = %+v", due)
	}
	plain := NewRebuildTagIndex("go")
	if due := plain.Merge(venturi.Pending[RebuildTagIndex, TagIndexCarry]{Payload: plain}).Due(); due.Policy != venturi.DueEarliest {
		t.Fatalf("plain rebuild due = %+v", due)
	}
	if s := (LinkChecker{}).Singleton(); s.Restart != venturi.RestartAlways || s.Delay != LinkCheckerRestartDelay {
		t.Fatalf("LinkChecker.Singleton() = %+v", s)
	}
}

func TestRefetchStalePolicy(t *testing.T) {
	t.Parallel()
	r := RefetchStale{StaleAfterS: 7 * 24 * 3600, Batch: 500, MaxBatches: 20}
	if err := r.Validate(); err != nil || r.StaleAfter() != 7*24*time.Hour || r.Kind() != "refetch_stale" || r.DedupKey() != "refetch_stale" {
		t.Fatalf("%+v: %v", r, err)
	}
	if b, _ := json.Marshal(r); string(b) != `{"stale_after_s":604800,"batch":500,"max_batches":20}` {
		t.Fatalf("payload = %s", b)
	}
	for _, bad := range []RefetchStale{{Batch: 1, MaxBatches: 1}, {StaleAfterS: 1, MaxBatches: 1}, {StaleAfterS: 1, Batch: MaxRefetchBatch + 1, MaxBatches: 1},
		{StaleAfterS: 1, Batch: 1}, {StaleAfterS: 1, Batch: 1, MaxBatches: MaxRefetchBatches + 1}} {
		if bad.Validate() == nil {
			t.Errorf("%+v validated", bad)
		}
	}
}

// TestImportWorkflowPolicy: an import's workflow is keyed by the import, its fetch and
// summary nodes run in the imports queue, and the outputs its nodes store keep their JSON
// form (a stored format, as payloads are).
func TestImportWorkflowPolicy(t *testing.T) {
	t.Parallel()
	if k := ImportWorkflowKey("01J0000000000000000000000A"); k != "import/01J0000000000000000000000A" {
		t.Fatalf("workflow key %q", k)
	}
	if NewImportWorkflow(ImportBookmarks{ImportID: "01J0000000000000000000000A"}, []string{"go"}) == nil {
		t.Fatal("no workflow")
	}
	f, s := FetchImportedBookmarks{ImportID: "x"}, SummarizeImport{ImportID: "x"}
	if f.Kind() != KindFetchImportedBookmarks || f.Queue() != QueueImports || s.Kind() != KindSummarizeImport || s.Queue() != QueueImports {
		t.Fatalf("fetch node %q in %q, summary node %q in %q", f.Kind(), f.Queue(), s.Kind(), s.Queue())
	}
	for _, tt := range []struct {
		v    any
		want string
	}{
		{f, `{"import_id":"x"}`},
		{s, `{"import_id":"x"}`},
		{FetchOutput{Status: FetchStatusFetched, HTTPStatus: 200, TitleFound: true}, `{"status":"fetched","http_status":200,"title_found":true}`},
		{FetchOutput{Status: FetchStatusFailed, Reason: "http_status", HTTPStatus: 410}, `{"status":"failed","reason":"http_status","http_status":410}`},
		{ImportFetchesOutput{Fetches: 3}, `{"fetches":3}`},
		{TagIndexOutput{Tags: 2, Chunk: 5}, `{"tags":2,"chunk":5}`},
		{ImportSummary{Fetches: 2, Fetched: 1, TitlesFound: 1, Failed: 1, Failures: map[string]int{"dns": 1}, TagIndex: TagIndexRebuilt},
			`{"fetches":2,"fetched":1,"titles_found":1,"failed":1,"failures":{"dns":1},"gave_up":0,"superseded":0,"tag_index":"rebuilt"}`},
	} {
		if b, err := json.Marshal(tt.v); err != nil || string(b) != tt.want {
			t.Errorf("%T encodes as %s (%v), want %s", tt.v, b, err, tt.want)
		}
	}
}

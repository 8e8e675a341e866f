package tasks

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/venturi-dev/venturi"
)

func TestFetchBookmarkPolicy(t *testing.T) {
	t.Parallel()
	a := FetchBookmark{BookmarkID: "01J0000000000000000000000A", URL: "https://example.com/"}
	if got, want := a.DedupKey(), venturi.DedupKey("bookmark/01J0000000000000000000000A"); got != want {
		t.Fatalf("DedupKey = %q, want %q", got, want)
	}
	if d := a.Merge(venturi.Pending[FetchBookmark, FetchCarry]{Payload: a}).Decision(); d != venturi.Replace {
		t.Fatalf("Merge = %v, want replace", d)
	}
	b, _ := json.Marshal(a)
	if string(b) != `{"bookmark_id":"01J0000000000000000000000A","url":"https://example.com/"}` {
		t.Fatalf("payload = %s", b)
	}
}

func TestImportBookmarksPolicy(t *testing.T) {
	t.Parallel()
	task := ImportBookmarks{ImportID: "imp"}
	existing := venturi.Pending[ImportBookmarks, ImportCarry]{Payload: task, Carry: ImportCarry{Next: 100}}
	if d := task.Merge(existing).Decision(); d != venturi.Keep {
		t.Fatalf("Merge = %v, want keep (the checkpoint must survive)", d)
	}
	if task.Size() != DefaultImportPageSize || (ImportBookmarks{PageSize: 5}).Size() != 5 || (ImportBookmarks{PageSize: 1 << 20}).Size() != 1000 {
		t.Fatal("Size does not apply the default and the cap")
	}
	if task.Priority() != venturi.PriorityLow {
		t.Fatal("imports must run below fetches")
	}
}

func TestRebuildTagIndexMergeUnions(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name          string
		existing, new RebuildTagIndex
		want          RebuildTagIndex
	}{
		{"union", NewRebuildTagIndex("go", "db"), NewRebuildTagIndex("web", "go"),
			RebuildTagIndex{Tags: []string{"db", "go", "web"}, Requests: 2}},
		{"all wins", NewRebuildTagIndex("go"), RebuildTagIndex{All: true, Requests: 1},
			RebuildTagIndex{All: true, Requests: 2}},
		{"requests add up", RebuildTagIndex{Tags: []string{"a"}, Requests: 9}, NewRebuildTagIndex("a"),
			RebuildTagIndex{Tags: []string{"a"}, Requests: 10}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := tt.new.mergedInto(tt.existing)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("merged = %+v, want %+v", got, tt.want)
			}
			p := venturi.Pending[RebuildTagIndex, TagIndexCarry]{Payload: tt.existing}
			if d := tt.new.Merge(p).Decision(); d != venturi.With {
				t.Fatalf("Merge = %v, want with", d)
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

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
	if d := a.Merge(venturi.Pending[FetchBookmark, FetchCarry]{Payload: a}).Decision(); d != venturi.ActionReplaced {
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
	if d := task.Merge(existing).Decision(); d != venturi.ActionKept {
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

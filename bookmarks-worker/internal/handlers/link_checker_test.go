package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/bookmarks/shared/tasks"
	"github.com/venturi-dev/venturi"
)

// checkerCarry reads the link checker's job and its checkpoint.
func (b *testBundle) checkerCarry(t *testing.T) (venturi.SingletonStatus, tasks.LinkCheckerCarry) {
	t.Helper()
	list, err := b.queue.Singletons(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Kind != tasks.KindLinkChecker {
		t.Fatalf("singletons: %+v", list)
	}
	var c tasks.LinkCheckerCarry
	j := b.job(t, list[0].ID)
	if len(j.Carry) > 0 {
		if err := json.Unmarshal(j.Carry, &c); err != nil {
			t.Fatal(err)
		}
	}
	return list[0], c
}

// TestLinkCheckerRefetchesStaleBookmarks: two workers run one link checker, which walks the
// bookmarks two per step and refetches exactly the ones whose fetch went stale, through
// FetchBookmark jobs; its position is its checkpoint.
func TestLinkCheckerRefetchesStaleBookmarks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.app.LinkCheck = LinkCheck{PageSize: 2, Interval: 10 * time.Millisecond, StaleAfter: time.Hour}
	var ids []ulid.ULID
	for _, u := range []string{"https://a.example/", "https://b.example/", "https://c.example/", "https://d.example/", "https://e.example/"} {
		id, _ := b.bookmark(t, u)
		ids = append(ids, id)
	}
	b.start(t)
	b.start(t) // a second worker: still one checker
	eventually(t, "every bookmark fetched", func() (bool, string) {
		for _, id := range ids {
			if status, _, _, _ := b.row(t, id); status != "fetched" {
				return false, "bookmark " + id.String() + " is " + status
			}
		}
		return true, ""
	})
	// Three of them went stale.
	stale := map[ulid.ULID]bool{ids[0]: true, ids[2]: true, ids[4]: true}
	for id := range stale {
		if _, err := b.pool.Exec(context.Background(), `UPDATE bookmark SET fetched_at = now() - interval '2 hours' WHERE id = $1`, uuidOf(id)); err != nil {
			t.Fatal(err)
		}
	}
	_, before := b.checkerCarry(t)
	// Two passes later, every stale bookmark was seen by a whole pass.
	eventually(t, "two more passes and the refetches", func() (bool, string) {
		s, c := b.checkerCarry(t)
		if c.Pass < before.Pass+2 {
			return false, fmt.Sprintf("the checker is in pass %d on %q", c.Pass, s.Owner)
		}
		for _, id := range ids {
			if status, _, _, _ := b.row(t, id); status != "fetched" {
				return false, "a refetch is pending"
			}
		}
		return true, ""
	})
	for _, id := range ids {
		_, _, _, attempts := b.row(t, id)
		if want := map[bool]int{true: 2, false: 1}[stale[id]]; attempts != want {
			t.Errorf("bookmark %s (stale %v) fetched %d times, want %d", id, stale[id], attempts, want)
		}
	}
	s, c := b.checkerCarry(t)
	if c.Refetched != 3 || c.Checked < 15 {
		t.Fatalf("checker carry %+v", c)
	}
	if s.State != venturi.StateRunning || s.Owner == "" {
		t.Fatalf("checker %+v", s)
	}
	var jobs int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM venturi_job WHERE kind = $1`, tasks.KindLinkChecker).Scan(&jobs); err != nil {
		t.Fatal(err)
	}
	if jobs != 1 {
		t.Fatalf("%d link checker jobs, want 1", jobs)
	}
}

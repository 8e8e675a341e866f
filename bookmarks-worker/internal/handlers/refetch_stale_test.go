package handlers

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/bookmarks/shared/tasks"
	"github.com/venturi-dev/venturi"
)

// fireRefetchNow makes the refetch schedule's pending fire due now, as if its time had
// come, and waits for the sweep it enqueued to complete. It returns the sweep's job.
func (b *testBundle) fireRefetchNow(t *testing.T) *venturi.Job {
	t.Helper()
	ctx := context.Background()
	before, err := b.queue.ScheduleFires(ctx, tasks.RefetchStaleSchedule, time.Time{}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `UPDATE venturi_cron SET next_fire = now() WHERE name = $1`, tasks.RefetchStaleSchedule); err != nil {
		t.Fatal(err)
	}
	var fire venturi.Fire
	eventually(t, "the schedule to fire", func() (bool, string) {
		fs, err := b.queue.ScheduleFires(ctx, tasks.RefetchStaleSchedule, time.Time{}, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(fs) == len(before) {
			return false, "no new fire"
		}
		fire = fs[0]
		return true, ""
	})
	if fire.Action != venturi.ActionInserted {
		t.Fatalf("fire %+v", fire)
	}
	return b.waitJob(t, fire.JobID, venturi.StateCompleted)
}

// TestRefetchScheduleRefetchesStaleBookmarks: two replicas register the daily refetch at
// once (one schedule, daily at 03:00 UTC); a fire's sweep walks the bookmarks two per
// batch and refetches exactly the stale ones through FetchBookmark jobs. A changed
// setting (one batch per sweep) takes effect from the next fire, which stops after its
// first batch.
func TestRefetchScheduleRefetchesStaleBookmarks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	// The link checker walks too; keep it away from these bookmarks.
	b.app.LinkCheck = LinkCheck{Interval: time.Hour, StaleAfter: 100 * 365 * 24 * time.Hour}
	b.app.Refetch = Refetch{Batch: 2}
	var ids []ulid.ULID
	for _, u := range []string{"https://a.example/", "https://b.example/", "https://c.example/", "https://d.example/",
		"https://e.example/", "https://f.example/", "https://g.example/"} {
		id, _ := b.bookmark(t, u)
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(x, y ulid.ULID) int { return x.Compare(y) })

	var wg sync.WaitGroup
	for range 2 { // two replicas start at once
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := RegisterRefetchSchedule(ctx, b.queue, b.app.Refetch); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	all, err := b.queue.Schedules(ctx)
	if err != nil || len(all) != 1 {
		t.Fatalf("schedules %+v, %v", all, err)
	}
	si := all[0]
	if si.Name != tasks.RefetchStaleSchedule || si.Cron != "0 3 * * *" || si.TimeZone != "UTC" || si.Kind != tasks.KindRefetchStale ||
		si.NextFire.UTC().Hour() != 3 || si.NextFire.Minute() != 0 || si.Missed != venturi.MissedOnce {
		t.Fatalf("schedule %+v", si)
	}
	var payload tasks.RefetchStale
	if err := json.Unmarshal(si.Payload, &payload); err != nil || payload != (tasks.RefetchStale{StaleAfterS: 7 * 24 * 3600, Batch: 2, MaxBatches: 200}) {
		t.Fatalf("payload %s: %v", si.Payload, err)
	}

	b.start(t)
	eventually(t, "every bookmark fetched", func() (bool, string) {
		for _, id := range ids {
			if status, _, _, _ := b.row(t, id); status != "fetched" {
				return false, "bookmark " + id.String() + " is " + status
			}
		}
		return true, ""
	})
	makeStale := func(ids ...ulid.ULID) {
		for _, id := range ids {
			if _, err := b.pool.Exec(ctx, `UPDATE bookmark SET fetched_at = now() - interval '8 days' WHERE id = $1`, uuidOf(id)); err != nil {
				t.Fatal(err)
			}
		}
	}
	stale := map[ulid.ULID]bool{ids[0]: true, ids[1]: true, ids[3]: true, ids[6]: true}
	for id := range stale {
		makeStale(id)
	}
	j := b.fireRefetchNow(t)
	if note := j.Journal[len(j.Journal)-1].Note; note != "refetched 4 stale bookmarks in 4 batches" {
		t.Errorf("sweep note %q", note)
	}
	waitFetched := func(want map[ulid.ULID]int) {
		t.Helper()
		eventually(t, "the refetches", func() (bool, string) {
			for _, id := range ids {
				status, _, _, attempts := b.row(t, id)
				if status != "fetched" || attempts != want[id] {
					return false, "bookmark " + id.String() + " is " + status
				}
			}
			return true, ""
		})
	}
	want := map[ulid.ULID]int{}
	for _, id := range ids {
		want[id] = map[bool]int{true: 2, false: 1}[stale[id]]
	}
	waitFetched(want)

	// One batch per sweep from now on: the next sweep handles the first two bookmarks only.
	b.app.Refetch.MaxBatches = 1
	res, err := b.queue.Schedule(ctx, b.app.Refetch.Schedule())
	if err != nil || !res.Changed || !res.NextFire.Equal(si.NextFire) {
		t.Fatalf("re-registration %+v, %v", res, err)
	}
	makeStale(ids...)
	j = b.fireRefetchNow(t)
	if note := j.Journal[len(j.Journal)-1].Note; !strings.HasPrefix(note, "refetched 2 stale bookmarks; stopped after 1 batches") {
		t.Errorf("sweep note %q", note)
	}
	want[ids[0]]++
	want[ids[1]]++
	waitFetched(want)
	if si, err := b.queue.ScheduleByName(ctx, tasks.RefetchStaleSchedule); err != nil || si.Fires != 2 || !si.NextFire.After(time.Now()) {
		t.Fatalf("schedule after two fires: %+v, %v", si, err)
	}
}

// TestRefetchStaleRefusesBadSettings: a sweep whose payload is out of bounds dies at once,
// without touching a bookmark.
func TestRefetchStaleRefusesBadSettings(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.start(t)
	res, err := b.queue.Enqueue(context.Background(), tasks.RefetchStale{StaleAfterS: 60, Batch: tasks.MaxRefetchBatch + 1, MaxBatches: 1})
	if err != nil {
		t.Fatal(err)
	}
	j := b.waitJob(t, res.ID, venturi.StateDead)
	if note := j.Journal[len(j.Journal)-1].Note; !strings.Contains(note, "batch must be 1 to 5000") {
		t.Fatalf("note %q", note)
	}
}

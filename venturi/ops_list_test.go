package venturi_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// seedJob is one job written straight into the table, in any state.
type seedJob struct {
	kind, queue, state string
	prio               int
	part, key          string
	runAt              time.Duration // from now
	finished           time.Duration // from now, for finished states
	lease              time.Duration // from now, for running
	payload, journal   string
	created            time.Duration // from now
}

// seed inserts jobs (IDs minted in order, so the last is the newest) and returns their IDs.
func seed(t *testing.T, pool *pgxpool.Pool, jobs ...seedJob) []ulid.ULID {
	t.Helper()
	ids := make([]ulid.ULID, len(jobs))
	for i, j := range jobs {
		// An ID minted when the job was created, as a producer mints it.
		ids[i] = ulid.MustNew(ulid.Timestamp(time.Now().Add(j.created)), ulid.DefaultEntropy())
		if j.kind == "" {
			j.kind = "ops"
		}
		if j.queue == "" {
			j.queue = venturi.DefaultQueue
		}
		if j.payload == "" {
			j.payload = "{}"
		}
		if j.journal == "" {
			j.journal = "[]"
		}
		if _, err := pool.Exec(context.Background(), `
			INSERT INTO venturi_job (id, kind, queue, state, priority, part, dedup_key, payload, journal, run_at, created_at,
			                         finished_at, lease_token, lease_expires_at, worker_id, runs, attempted_at)
			VALUES ($1, $2, $3, $4::text::venturi_job_state, $5, NULLIF($6, ''), NULLIF($7, ''), $8::jsonb, $9::jsonb,
			        now() + $10 * interval '1 microsecond', now() + $13 * interval '1 microsecond',
			        CASE WHEN $4 IN ('completed', 'dead', 'cancelled') THEN now() + $11 * interval '1 microsecond' END,
			        CASE WHEN $4 = 'running' THEN nextval('venturi_lease_token_seq') END,
			        CASE WHEN $4 = 'running' THEN now() + $12 * interval '1 microsecond' END,
			        CASE WHEN $4 = 'running' THEN 'seeder' END,
			        CASE WHEN $4 IN ('scheduled', 'available') THEN 0 ELSE 1 END,
			        CASE WHEN $4 NOT IN ('scheduled', 'available') THEN now() END)`,
			ids[i][:], j.kind, j.queue, j.state, j.prio, j.part, j.key, j.payload, j.journal,
			j.runAt.Microseconds(), j.finished.Microseconds(), j.lease.Microseconds(), j.created.Microseconds()); err != nil {
			t.Fatalf("seed %+v: %v", j, err)
		}
	}
	return ids
}

func summaryIDs(jobs []venturi.JobSummary) []ulid.ULID {
	out := make([]ulid.ULID, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

// TestListJobsOrdersEachStateByItsIndex: a one-state filter lists in that state's order
// (claim order for available, queue by queue, plain before gated partitions), any other
// newest first; pages of two walk the whole order without repeats.
func TestListJobsOrdersEachStateByItsIndex(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	s := time.Second
	id := seed(t, pool,
		seedJob{state: "available", prio: 0, runAt: -5 * s},                   // 0
		seedJob{state: "available", prio: 10, runAt: -1 * s},                  // 1
		seedJob{state: "available", prio: 0, runAt: -9 * s},                   // 2
		seedJob{state: "available", prio: 0, runAt: -9 * s, part: "b"},        // 3
		seedJob{state: "available", prio: 5, runAt: -1 * s, part: "a"},        // 4
		seedJob{state: "available", prio: 0, runAt: -3 * s, part: "a"},        // 5
		seedJob{state: "available", queue: "alpha", runAt: -1 * s},            // 6
		seedJob{state: "available", queue: "alpha", runAt: -2 * s, part: "z"}, // 7
		seedJob{state: "scheduled", runAt: 3 * s},                             // 8
		seedJob{state: "scheduled", runAt: 1 * s},                             // 9
		seedJob{state: "waiting", runAt: 5 * s},                               // 10
		seedJob{state: "waiting", runAt: 4 * s},                               // 11
		seedJob{state: "running", lease: 9 * s},                               // 12
		seedJob{state: "running", lease: 2 * s},                               // 13
		seedJob{state: "completed", finished: -5 * s},                         // 14
		seedJob{state: "completed", finished: -1 * s},                         // 15
		seedJob{state: "dead", finished: -7 * s},                              // 16
		seedJob{state: "dead", finished: -2 * s},                              // 17
		seedJob{state: "cancelled", finished: -1 * s},                         // 18
		seedJob{state: "cancelled", finished: -1 * s},                         // 19: same time, newer ID first
	)
	for _, tc := range []struct {
		filter string
		want   []int
	}{
		{"state:available", []int{6, 7, 1, 2, 0, 4, 5, 3}},
		{"state:available queue:default queue:alpha", []int{6, 7, 1, 2, 0, 4, 5, 3}},
		{"state:available queue:default", []int{1, 2, 0, 4, 5, 3}},
		{"state:scheduled", []int{9, 8}},
		{"state:waiting", []int{11, 10}},
		{"state:running", []int{13, 12}},
		{"state:completed", []int{15, 14}},
		{"state:dead", []int{17, 16}},
		{"state:cancelled", []int{19, 18}},
		{"state:dead state:completed", []int{17, 16, 15, 14}},
		{"", []int{19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0}},
	} {
		for _, limit := range []int{2, 3, 100} {
			got := summaryIDs(listAll(t, q, mustFilter(t, tc.filter), limit))
			var want []ulid.ULID
			for _, i := range tc.want {
				want = append(want, id[i])
			}
			if !slices.Equal(got, want) {
				t.Errorf("%q in pages of %d: got %v, want %v", tc.filter, limit, indexesOf(got, id), tc.want)
			}
		}
	}
}

// indexesOf maps IDs back to their seed positions, for readable failures.
func indexesOf(got, ids []ulid.ULID) []int {
	out := make([]int, len(got))
	for i, g := range got {
		out[i] = slices.Index(ids, g)
	}
	return out
}

// TestListJobsStableUnderConcurrentInserts: jobs enqueued between pages never make a
// listing repeat or skip a job that was there.
func TestListJobsStableUnderConcurrentInserts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, q := newQueue(t)
	var before []ulid.ULID
	for i := range 12 {
		before = append(before, enqueue(t, q, opsTask{N: i}).ID)
	}
	for _, filter := range []string{"", "state:available", "kind:ops"} {
		f := mustFilter(t, filter)
		seen := map[ulid.ULID]int{}
		cursor := ""
		for {
			page, err := q.ListJobs(ctx, f, cursor, 5)
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range page.Jobs {
				seen[j.ID]++
			}
			// Concurrent enqueues: newer (behind the newest-first cursor) and, for the claim
			// order, due earlier than everything listed so far.
			enqueue(t, q, opsTask{N: 100})
			enqueue(t, q, opsTask{N: 101}, venturi.At(time.Now().Add(-time.Hour)))
			if page.Next == "" {
				break
			}
			cursor = page.Next
		}
		for _, id := range before {
			if seen[id] != 1 {
				t.Errorf("%q: job %s listed %d times", filter, id, seen[id])
			}
		}
		for id, n := range seen {
			if n != 1 {
				t.Errorf("%q: job %s listed %d times", filter, id, n)
			}
		}
	}
}

func TestListJobsFilters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	s := time.Second
	id := seed(t, pool,
		seedJob{state: "dead", kind: "fetch", queue: "net", key: "host/a", finished: -s, created: -3 * time.Hour,
			payload: `{"url": "https://a", "try": 3, "opt": null, "tags": ["x", "y"], "user": {"id": 42}}`,
			journal: `[{"event": "failed", "run": 1, "note": "Connection Refused", "attachment": {"status": 503}},
			           {"event": "dead", "run": 2, "note": "gave up 100%_done"}]`},
		seedJob{state: "completed", kind: "fetch", queue: "net", key: "host/b", finished: -s, created: -time.Hour,
			payload: `{"url": "https://b", "try": "3", "user": {"id": 7}}`,
			journal: `[{"event": "completed", "run": 1, "note": "ok", "attachment": {"status": 200}}]`},
		seedJob{state: "available", kind: "resize", payload: `{"url": "https://a"}`, created: -10 * time.Minute},
	)
	for _, tc := range []struct {
		filter string
		want   []int
	}{
		{"kind:fetch", []int{1, 0}},
		{"kind:fetch kind:resize", []int{2, 1, 0}},
		{"queue:net state:dead", []int{0}},
		{"key:host/b", []int{1}},
		{"id:" + id[2].String() + " id:" + id[0].String(), []int{2, 0}},
		{"note:refused", []int{0}},
		{`note:"100%_"`, []int{0}},
		{"note:%", []int{0}},
		{"note:_done", []int{0}},
		{"note:ok", []int{1}},
		{"payload.url:https://a", []int{2, 0}},
		{"payload.try:3", []int{1, 0}}, // the string "3" and the number 3 both read 3
		{"payload.opt:null", []int{0}},
		{"payload.tags.1:y", []int{0}},
		{"payload.user.id:42", []int{0}},
		{`payload.user:"{\"id\": 7}"`, []int{1}},
		{"payload.url:https://a payload.try:3", []int{0}},
		{"payload.missing:x", nil},
		{"attachment.status:503", []int{0}},
		{"attachment.status:503 attachment.status:200", nil},
		{"within:2h", []int{2, 1}},
		{"within:30m", []int{2}},
		{"after:" + time.Now().Add(-2*time.Hour).UTC().Format(time.RFC3339), []int{2, 1}},
		{"before:" + time.Now().Add(-30*time.Minute).UTC().Format(time.RFC3339), []int{1, 0}},
		{"after:" + time.Now().Add(-2*time.Hour).UTC().Format(time.RFC3339) + " before:" +
			time.Now().Add(-30*time.Minute).UTC().Format(time.RFC3339), []int{1}},
	} {
		got := summaryIDs(listAll(t, q, mustFilter(t, tc.filter), 50))
		var want []ulid.ULID
		for _, i := range tc.want {
			want = append(want, id[i])
		}
		if !slices.Equal(got, want) {
			t.Errorf("%q: got %v, want %v", tc.filter, indexesOf(got, id), tc.want)
		}
	}
	page, err := q.ListJobs(ctx, mustFilter(t, "kind:fetch state:dead"), "", 0)
	if err != nil || len(page.Jobs) != 1 {
		t.Fatalf("%+v, %v", page, err)
	}
	if j := page.Jobs[0]; j.Kind != "fetch" || j.Queue != "net" || j.State != venturi.StateDead || j.DedupKey != "host/a" ||
		j.LastEvent != venturi.EventDead || j.LastNote != "gave up 100%_done" || j.FinishedAt == nil || j.RunCount != 1 {
		t.Fatalf("summary %+v", j)
	}
}

func TestListJobsRefusesBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, q := newQueue(t)
	for i := range 3 {
		enqueue(t, q, opsTask{N: i})
	}
	page, err := q.ListJobs(ctx, venturi.JobFilter{}, "", 2)
	if err != nil || page.Next == "" {
		t.Fatalf("%+v, %v", page, err)
	}
	if _, err := q.ListJobs(ctx, mustFilter(t, "state:available"), page.Next, 2); !errors.Is(err, venturi.ErrInvalidListCursor) {
		t.Fatalf("a cursor of another order: %v", err)
	}
	for _, c := range []string{"garbage!", "e30", strings.Repeat("A", 5000)} {
		if _, err := q.ListJobs(ctx, venturi.JobFilter{}, c, 2); !errors.Is(err, venturi.ErrInvalidListCursor) {
			t.Fatalf("cursor %.10q: %v", c, err)
		}
	}
	for _, f := range []venturi.JobFilter{
		{States: []venturi.State{"sleeping"}},
		{Queues: []string{""}},
		{Payload: []venturi.PathMatch{{Value: "x"}}},
		{CreatedWithin: -time.Second},
		{Note: strings.Repeat("n", venturi.MaxFilterValueBytes+1)},
	} {
		if _, err := q.ListJobs(ctx, f, "", 2); !errors.Is(err, venturi.ErrInvalidFilter) {
			t.Errorf("filter %+v: %v", f, err)
		}
	}
	page, err = q.ListJobs(ctx, venturi.JobFilter{}, "", venturi.MaxListPage+1)
	if err != nil || len(page.Jobs) != 3 || page.Next != "" {
		t.Fatalf("%+v, %v", page, err)
	}
}

package venturi_test

import (
	"context"
	"encoding/base64"
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

// TestListJobsRefusesWhatPostgreSQLRefuses: a NUL character or invalid UTF-8 in any text
// of a filter (parsed or built in code) or of a cursor is ErrInvalidFilter or
// ErrInvalidListCursor, never a database error; the bulk actions refuse such a filter alike.
func TestListJobsRefusesWhatPostgreSQLRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, q := newQueue(t)
	enqueue(t, q, opsTask{N: 1})
	for _, text := range []string{
		"kind:a\x00b", `kind:"a\x00b"`, `kind:"a\u0000"`, `kind:"\xff"`,
		"queue:a\x00", `queue:"\u0000"`, "key:k\x00", `key:"\x00"`, "note:n\x00", `note:"\x00"`,
		"payload.a\x00:x", `payload."\x00":x`, "payload.a:\x00", `payload.a:"\x00"`, `payload.a:"\xff"`,
		"attachment.a\x00:x", `attachment.a:"\u0000"`, "state:dead\x00", "id:\x00",
	} {
		_, err := venturi.ParseJobFilter(text)
		if !errors.Is(err, venturi.ErrInvalidFilter) {
			t.Errorf("ParseJobFilter(%q) = %v; want ErrInvalidFilter", text, err)
		}
	}
	for _, f := range []venturi.JobFilter{
		{Kinds: []string{"a\x00b"}},
		{Kinds: []string{"\xff"}},
		{Queues: []string{"q\x00"}},
		{DedupKey: "k\x00"},
		{Note: "\x00"},
		{Payload: []venturi.PathMatch{{Path: []string{"a\x00"}, Value: "x"}}},
		{Attachment: []venturi.PathMatch{{Path: []string{"a"}, Value: "\x00"}}},
	} {
		if _, err := q.ListJobs(ctx, f, "", 2); !errors.Is(err, venturi.ErrInvalidFilter) {
			t.Errorf("ListJobs(%#v) = %v; want ErrInvalidFilter", f, err)
		}
		if _, err := q.RetryJobs(ctx, f, venturi.BulkOptions{DryRun: true}); !errors.Is(err, venturi.ErrInvalidFilter) {
			t.Errorf("RetryJobs(%#v) dry run = %v; want ErrInvalidFilter", f, err)
		}
	}
	// Cursors written by hand: a listing of available jobs resumes in the cursor's queue and
	// partition, which must be text the database takes.
	id := ulid.Make().String()
	available := mustFilter(t, "state:available")
	for _, c := range []string{
		`{"o":"available","s":"available","i":"` + id + `","q":"de\u0000fault"}`,
		`{"o":"available","s":"available","i":"` + id + `","q":"default","p":"x\u0000"}`,
		`{"o":"available","s":"available","i":"` + id + `","q":"` + strings.Repeat("q", 129) + `"}`,
		`{"o":"available","s":"available","i":"` + id + `","q":""}`,
	} {
		cur := base64.RawURLEncoding.EncodeToString([]byte(c))
		if _, err := q.ListJobs(ctx, available, cur, 2); !errors.Is(err, venturi.ErrInvalidListCursor) {
			t.Errorf("cursor %s: %v; want ErrInvalidListCursor", c, err)
		}
	}
	// A well-formed cursor still lists.
	ok := base64.RawURLEncoding.EncodeToString([]byte(`{"o":"available","s":"available","i":"` + id + `","q":"default"}`))
	if _, err := q.ListJobs(ctx, available, ok, 2); err != nil {
		t.Fatalf("a valid cursor: %v", err)
	}
}

// seedMany inserts n jobs of one state and kind "ops" in one statement, IDs in order (the
// last the newest), all due at one time (a batch) and, when finished, finished in ID
// order; job i (from 0) has the payload {"n": i} and, if match(i), the journal note
// "needle" (others "hay").
func seedMany(t *testing.T, pool *pgxpool.Pool, n int, state string, queue string, match func(i int) bool) []ulid.ULID {
	t.Helper()
	var needles []int32
	for i := range n {
		if match(i) {
			needles = append(needles, int32(i))
		}
	}
	ids := make([]ulid.ULID, n)
	base := ulid.Timestamp(time.Now())
	raw := make([][]byte, n)
	for i := range ids {
		ids[i] = ulid.MustNew(base, ulid.DefaultEntropy())
		if i > 0 && ids[i].Compare(ids[i-1]) <= 0 { // the same millisecond: keep the order
			ids[i] = ulid.MustNew(base+uint64(i), ulid.DefaultEntropy())
		}
		raw[i] = ids[i][:]
	}
	if _, err := pool.Exec(context.Background(), `
		INSERT INTO venturi_job (id, kind, queue, state, payload, journal, run_at, created_at, finished_at, runs, attempted_at)
		SELECT x.id, 'ops', $2, $3::text::venturi_job_state, jsonb_build_object('n', x.i - 1),
		       CASE WHEN $3 IN ('completed', 'dead') THEN jsonb_build_array(jsonb_build_object('event', $3, 'run', 1,
		            'note', CASE WHEN x.i - 1 = ANY($4::int[]) THEN 'needle' ELSE 'hay' END)) ELSE '[]'::jsonb END,
		       date_trunc('second', now()) + interval '1 hour' * (CASE WHEN $3 = 'scheduled' THEN 1 ELSE 0 END),
		       now(), CASE WHEN $3 IN ('completed', 'dead') THEN now() - interval '1 millisecond' * ($5::int - x.i) END,
		       CASE WHEN $3 IN ('completed', 'dead') THEN 1 ELSE 0 END, CASE WHEN $3 IN ('completed', 'dead') THEN now() END
		FROM unnest($1::uuid[]) WITH ORDINALITY AS x(id, i)`, raw, queue, state, needles, n); err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestListJobsSearchesInWindows: a note or payload match (no index serves it) over more
// jobs than one search window: a page reads at most ListSearchWindow jobs and ends early
// when its window does (Partial, with a cursor after the window), and walking the pages
// finds every match once and in order, in the finished, the available and the newest
// first orders; a bulk action walks the same windows; its dry run counts the matches.
func TestListJobsSearchesInWindows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	n := 2*venturi.ListSearchWindow + 500
	sparse := func(i int) bool { return i%7000 == 3 } // 4 matches, windows apart
	completed := seedMany(t, pool, n, "completed", venturi.DefaultQueue, sparse)
	available := seedMany(t, pool, n, "available", "media", func(int) bool { return false })
	var wantCompleted, wantAvailable []ulid.ULID
	for i := range n {
		if sparse(i) {
			wantCompleted = append(wantCompleted, completed[i])
		}
		if i%5000 == 1 {
			wantAvailable = append(wantAvailable, available[i])
		}
	}
	slices.Reverse(wantCompleted)                        // newest finished first
	walk := func(s string, want []ulid.ULID, jobs int) { // jobs: how many the indexed predicates leave
		t.Helper()
		f := mustFilter(t, s)
		var got []ulid.ULID
		pages, partial := 0, 0
		cursor := ""
		for {
			page, err := q.ListJobs(ctx, f, cursor, 3)
			if err != nil {
				t.Fatalf("%s: %v", s, err)
			}
			pages++
			if page.Partial {
				partial++
			}
			got = append(got, summaryIDs(page.Jobs)...)
			if page.Next == "" {
				break
			}
			cursor = page.Next
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: listed %d jobs %v, want %d %v", s, len(got), got, len(want), want)
		}
		// Each window ends a page (partial) unless the page filled first: the walk reads
		// about one window per page, and at most one page per window more than it needs.
		windows := jobs/venturi.ListSearchWindow + 1
		if partial == 0 || pages > windows+len(want)/3+1 {
			t.Fatalf("%s: %d pages, %d partial, for %d jobs in windows of %d", s, pages, partial, jobs, venturi.ListSearchWindow)
		}
	}
	walk("state:completed note:needle", wantCompleted, n)
	// The available order: payload matches within one queue's plain jobs, oldest due first.
	if _, err := pool.Exec(ctx, `UPDATE venturi_job SET payload = payload || '{"m": "x"}' WHERE queue = 'media' AND (payload->>'n')::int % 5000 = 1`); err != nil {
		t.Fatal(err)
	}
	walk("state:available queue:media payload.m:x", wantAvailable, n)
	// Newest first over every state (the available jobs are newer, and none matches).
	all := slices.SortedFunc(slices.Values(wantCompleted), func(a, b ulid.ULID) int { return b.Compare(a) })
	walk("note:needle", all, 2*n)
	walk("key:nothing", nil, 2*n) // a dedup key without a kind: searched too

	f := mustFilter(t, "note:needle")
	dry, err := q.DeleteJobs(ctx, f, venturi.BulkOptions{DryRun: true})
	if err != nil || dry != (venturi.BulkResult{Matched: len(wantCompleted), Eligible: len(wantCompleted)}) {
		t.Fatalf("dry run: %+v, %v", dry, err)
	}
	res, err := q.DeleteJobs(ctx, f, venturi.BulkOptions{})
	if err != nil || res.Changed != len(wantCompleted) || res.Matched != len(wantCompleted) {
		t.Fatalf("delete: %+v, %v", res, err)
	}
	if left := countJobs(t, pool, "journal @> '[{\"note\": \"needle\"}]'"); left != 0 {
		t.Fatalf("%d matching jobs left after the bulk delete", left)
	}
}

package venturi_test

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// opsHold is a kind no worker of these tests serves: its jobs stay available, and the
// workflows they are in stay open.
type opsHold struct {
	N int `json:"n"`
}

func (opsHold) Kind() string { return "ops_hold" }

// opsWorkflowState waits until workflow id is in state want.
func opsWorkflowState(t *testing.T, q *venturi.Queue, id ulid.ULID, want venturi.WorkflowState) {
	t.Helper()
	eventually(t, within, "workflow "+id.String()+" "+string(want), func() bool {
		w, err := q.Workflow(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return w.State == want
	})
}

// enqueueFlow enqueues a workflow of one node running task, or fails the test.
func enqueueFlow(t *testing.T, q *venturi.Queue, name string, task venturi.Task) venturi.WorkflowResult {
	t.Helper()
	wf := venturi.NewWorkflow(name)
	wf.Add("only", task)
	res, err := q.EnqueueWorkflow(context.Background(), wf)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// listAllWorkflows walks every page of a workflow listing.
func listAllWorkflows(t *testing.T, q *venturi.Queue, f venturi.WorkflowFilter, limit int) (all []venturi.WorkflowSummary, pages int) {
	t.Helper()
	cursor := ""
	for range 1000 {
		page, err := q.ListWorkflows(context.Background(), f, cursor, limit)
		if err != nil {
			t.Fatalf("list workflows %+v after %q: %v", f, cursor, err)
		}
		pages++
		all = append(all, page.Workflows...)
		if page.Next == "" {
			return all, pages
		}
		if len(page.Workflows) != limit && !page.Partial {
			t.Fatalf("a page of %d workflows (limit %d) with a next cursor, not partial", len(page.Workflows), limit)
		}
		cursor = page.Next
	}
	t.Fatal("the listing does not end")
	return nil, 0
}

func workflowIDs(ws []venturi.WorkflowSummary) []ulid.ULID {
	out := make([]ulid.ULID, len(ws))
	for i, w := range ws {
		out[i] = w.ID
	}
	return out
}

// TestListWorkflowsFiltersAndPages: workflows and batches in every state list newest
// first, filtered by state, kind, name prefix and creation time, and page through a
// cursor; a filter or cursor the listing did not write is refused.
func TestListWorkflowsFiltersAndPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	startOpsWorker(t, pool, fastConfig())

	succeeded := enqueueFlow(t, q, "import a", opsTask{N: 1}).ID
	failed := enqueueFlow(t, q, "import b", opsTask{N: 2, Fail: 1, Dead: true}).ID
	b := venturi.NewBatch("news c")
	b.Add(opsTask{N: 3})
	br, err := q.EnqueueBatch(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	batch := br.ID
	open := enqueueFlow(t, q, "other d", opsHold{N: 4}).ID
	cancelled := enqueueFlow(t, q, "other e", opsHold{N: 5}).ID
	if err := q.CancelWorkflow(ctx, cancelled, "not needed"); err != nil {
		t.Fatal(err)
	}
	opsWorkflowState(t, q, succeeded, venturi.WorkflowSucceeded)
	opsWorkflowState(t, q, failed, venturi.WorkflowFailed)
	opsWorkflowState(t, q, batch, venturi.WorkflowSucceeded)
	opsWorkflowState(t, q, cancelled, venturi.WorkflowCancelled)

	newestFirst := []ulid.ULID{cancelled, open, batch, failed, succeeded}
	for _, tt := range []struct {
		name string
		f    venturi.WorkflowFilter
		want []ulid.ULID
	}{
		{"all", venturi.WorkflowFilter{}, newestFirst},
		{"open", venturi.WorkflowFilter{States: []venturi.WorkflowState{venturi.WorkflowOpen}}, []ulid.ULID{open}},
		{"failed or cancelled", venturi.WorkflowFilter{States: []venturi.WorkflowState{venturi.WorkflowFailed, venturi.WorkflowCancelled}},
			[]ulid.ULID{cancelled, failed}},
		{"batches", venturi.WorkflowFilter{Kind: venturi.WorkflowKindBatch}, []ulid.ULID{batch}},
		{"workflows", venturi.WorkflowFilter{Kind: venturi.WorkflowKindGraph}, []ulid.ULID{cancelled, open, failed, succeeded}},
		{"name prefix", venturi.WorkflowFilter{NamePrefix: "import "}, []ulid.ULID{failed, succeeded}},
		{"succeeded workflows", venturi.WorkflowFilter{Kind: venturi.WorkflowKindGraph, States: []venturi.WorkflowState{venturi.WorkflowSucceeded}},
			[]ulid.ULID{succeeded}},
		{"within", venturi.WorkflowFilter{CreatedWithin: time.Hour}, newestFirst},
		{"after", venturi.WorkflowFilter{CreatedAfter: time.Now().Add(time.Hour)}, nil},
		{"before", venturi.WorkflowFilter{CreatedBefore: time.Now().Add(-time.Hour)}, nil},
	} {
		for _, limit := range []int{2, 50} {
			got, _ := listAllWorkflows(t, q, tt.f, limit)
			if ids := workflowIDs(got); !slices.Equal(ids, tt.want) {
				t.Errorf("%s (pages of %d): got %v, want %v", tt.name, limit, ids, tt.want)
			}
		}
	}

	page, err := q.ListWorkflows(ctx, venturi.WorkflowFilter{}, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[ulid.ULID]venturi.WorkflowSummary{}
	for _, w := range page.Workflows {
		byID[w.ID] = w
	}
	if w := byID[batch]; w.Kind != venturi.WorkflowKindBatch || w.Name != "news c" || w.FinishedAt == nil || w.Nodes == 0 {
		t.Errorf("the batch lists as %+v", w)
	}
	if w := byID[cancelled]; w.Kind != venturi.WorkflowKindGraph || w.CancelRequestedAt == nil || w.CancelNote != "not needed" {
		t.Errorf("the cancelled workflow lists as %+v", w)
	}
	if w := byID[open]; w.State != venturi.WorkflowOpen || w.OpenNodes == 0 || w.FinishedAt != nil {
		t.Errorf("the open workflow lists as %+v", w)
	}

	for _, f := range []venturi.WorkflowFilter{
		{States: []venturi.WorkflowState{"sleeping"}},
		{Kind: "chain"},
		{NamePrefix: "a\x00"},
		{NamePrefix: strings.Repeat("n", venturi.MaxWorkflowNamePrefix+1)},
		{CreatedWithin: -time.Minute},
	} {
		if _, err := q.ListWorkflows(ctx, f, "", 10); !errors.Is(err, venturi.ErrInvalidFilter) {
			t.Errorf("filter %+v: %v; want ErrInvalidFilter", f, err)
		}
	}
	jobs, err := q.ListJobs(ctx, venturi.JobFilter{}, "", 1)
	if err != nil || jobs.Next == "" {
		t.Fatalf("a job listing's cursor: %+v, %v", jobs, err)
	}
	for _, c := range []string{jobs.Next, "!!", "e30"} {
		if _, err := q.ListWorkflows(ctx, venturi.WorkflowFilter{}, c, 10); !errors.Is(err, venturi.ErrInvalidListCursor) {
			t.Errorf("cursor %q: %v; want ErrInvalidListCursor", c, err)
		}
	}
}

// seedWorkflows inserts n finished workflows straight into the table, newer than any
// enqueued before.
func seedWorkflows(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `
		INSERT INTO venturi_workflow (id, name, state, created_at, finished_at)
		SELECT (lpad(to_hex((extract(epoch FROM now()) * 1000)::bigint + 1000), 12, '0') || lpad(to_hex(i), 20, '0'))::uuid,
		       'seeded ' || i, 'succeeded', now(), now()
		FROM generate_series(1, $1::int) i`, n); err != nil {
		t.Fatal(err)
	}
}

// TestListWorkflowsSearchesInWindows: a state that no index serves is searched a window
// of ListWorkflowsWindow workflows at a time: a page whose window holds no match is
// partial and empty, and the walk finds every match once.
func TestListWorkflowsSearchesInWindows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	open := enqueueFlow(t, q, "held", opsHold{}).ID
	seedWorkflows(t, pool, venturi.ListWorkflowsWindow+10)

	f := venturi.WorkflowFilter{States: []venturi.WorkflowState{venturi.WorkflowOpen}}
	first, err := q.ListWorkflows(ctx, f, "", 50)
	if err != nil {
		t.Fatal(err)
	}
	if !first.Partial || len(first.Workflows) != 0 || first.Next == "" {
		t.Fatalf("the first window holds no open workflow: page %+v", first)
	}
	got, pages := listAllWorkflows(t, q, f, 50)
	if ids := workflowIDs(got); !slices.Equal(ids, []ulid.ULID{open}) || pages != 2 {
		t.Fatalf("the walk found %v in %d pages; want the open workflow in 2", ids, pages)
	}
	// Without a predicate to search, a page reads a page.
	plain, err := q.ListWorkflows(ctx, venturi.WorkflowFilter{}, "", 50)
	if err != nil || len(plain.Workflows) != 50 || plain.Partial {
		t.Fatalf("an unfiltered page: %d workflows, partial %v, %v", len(plain.Workflows), plain.Partial, err)
	}
}

// TestWorkflowDetailReadsNodesAndCounts: one workflow with its nodes (paged by name), a
// batch with its counts, and an unknown one.
func TestWorkflowDetailReadsNodesAndCounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, q := newQueue(t)
	wf := venturi.NewWorkflow("graph", venturi.WorkflowKey("graph/1"))
	fetch := wf.Add("fetch", opsHold{N: 1})
	rows := wf.Group("rows", venturi.OpenGroup())
	wf.Add("total", opsHold{N: 2}, venturi.Needs(fetch, rows))
	res, err := q.EnqueueWorkflow(ctx, wf)
	if err != nil {
		t.Fatal(err)
	}
	d, err := q.WorkflowDetail(ctx, res.ID, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if d.Kind != venturi.WorkflowKindGraph || d.Name != "graph" || d.Key != "graph/1" || d.State != venturi.WorkflowOpen ||
		d.Batch != nil || d.NextNode != "" || len(d.NodeList) != 3 {
		t.Fatalf("detail %+v", d)
	}
	names := []string{d.NodeList[0].Name, d.NodeList[1].Name, d.NodeList[2].Name}
	if !slices.Equal(names, []string{"fetch", "rows", "total"}) {
		t.Fatalf("nodes %v", names)
	}
	if n := d.NodeList[2]; n.JobID != res.Jobs["total"] || n.JobState != venturi.StateBlocked || !slices.Equal(n.Needs, []string{"fetch", "rows"}) {
		t.Fatalf("total: %+v", n)
	}
	if n := d.NodeList[1]; !n.Group || n.JobState != "" {
		t.Fatalf("rows: %+v", n)
	}
	page, err := q.WorkflowDetail(ctx, res.ID, "", 2)
	if err != nil || len(page.NodeList) != 2 || page.NextNode != "rows" {
		t.Fatalf("a page of two nodes: %+v, %v", page, err)
	}
	page, err = q.WorkflowDetail(ctx, res.ID, page.NextNode, 2)
	if err != nil || len(page.NodeList) != 1 || page.NodeList[0].Name != "total" || page.NextNode != "" {
		t.Fatalf("the next page: %+v, %v", page, err)
	}

	b := venturi.NewBatch("mail", venturi.OnSuccess(opsHold{N: 3}))
	for i := range 3 {
		b.Add(opsHold{N: 10 + i})
	}
	br, err := q.EnqueueBatch(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	bd, err := q.WorkflowDetail(ctx, br.ID, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if bd.Kind != venturi.WorkflowKindBatch || bd.Batch == nil || bd.Batch.Total != 3 || bd.Batch.Pending != 3 || len(bd.NodeList) != 5 {
		t.Fatalf("batch detail %+v (batch %+v)", bd, bd.Batch)
	}
	if _, err := q.WorkflowDetail(ctx, ulid.Make(), "", 0); !errors.Is(err, venturi.ErrWorkflowNotFound) {
		t.Fatalf("an unknown workflow: %v", err)
	}
	if _, err := q.WorkflowDetail(ctx, res.ID, "a\x00", 0); !errors.Is(err, venturi.ErrInvalidListCursor) {
		t.Fatalf("a bad node name to start after: %v", err)
	}
}

// TestListJobsOfAWorkflow: workflow:ID lists a workflow's jobs, pending and finished (in
// the history), and nothing else; with state:blocked, its blocked ones; a bulk dry run
// counts them, and a bulk cancel over the filter cancels them alone.
func TestListJobsOfAWorkflow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	startOpsWorker(t, pool, fastConfig())

	wf := venturi.NewWorkflow("mixed")
	done := wf.Add("done", opsTask{N: 1})
	held := wf.Add("held", opsHold{N: 2}, venturi.Needs(done))
	wf.Add("after", opsHold{N: 3}, venturi.Needs(held))
	res, err := q.EnqueueWorkflow(ctx, wf)
	if err != nil {
		t.Fatal(err)
	}
	other := enqueueFlow(t, q, "other", opsHold{N: 4})
	enqueue(t, q, opsTask{N: 5})
	waitJob(t, q, res.Jobs["held"], "held to be released", func(j *venturi.Job) bool { return j.State == venturi.StateAvailable })
	waitFinished(t, q, res.Jobs["done"])

	all := summaryIDs(listAll(t, q, mustFilter(t, "workflow:"+res.ID.String()), 2))
	want := []ulid.ULID{res.Jobs["after"], res.Jobs["held"], res.Jobs["done"]}
	slices.SortFunc(want, func(a, b ulid.ULID) int { return b.Compare(a) })
	if !slices.Equal(all, want) {
		t.Fatalf("workflow:%s lists %v; want its three jobs %v", res.ID, all, want)
	}
	blocked := summaryIDs(listAll(t, q, mustFilter(t, "state:blocked workflow:"+res.ID.String()), 10))
	if !slices.Equal(blocked, []ulid.ULID{res.Jobs["after"]}) {
		t.Fatalf("state:blocked lists %v; want after", blocked)
	}
	everyBlocked := summaryIDs(listAll(t, q, mustFilter(t, "state:blocked"), 10))
	if !slices.Equal(everyBlocked, []ulid.ULID{res.Jobs["after"]}) {
		t.Fatalf("state:blocked alone lists %v", everyBlocked)
	}
	completed := summaryIDs(listAll(t, q, mustFilter(t, "state:completed workflow:"+res.ID.String()), 10))
	if !slices.Equal(completed, []ulid.ULID{res.Jobs["done"]}) {
		t.Fatalf("its completed jobs: %v", completed)
	}

	f := mustFilter(t, "workflow:"+res.ID.String())
	dry, err := q.CancelJobs(ctx, f, venturi.BulkOptions{DryRun: true})
	if err != nil || dry.Matched != 3 || dry.Eligible != 2 {
		t.Fatalf("dry run: %+v, %v; want 3 matched, 2 eligible (held and after)", dry, err)
	}
	got, err := q.CancelJobs(ctx, f, venturi.BulkOptions{Reason: "test"})
	if err != nil || got.Changed != 2 {
		t.Fatalf("cancel: %+v, %v", got, err)
	}
	if j := jobByID(t, q, other.Jobs["only"]); j.State != venturi.StateAvailable {
		t.Fatalf("another workflow's job was touched: %s", j.State)
	}
	if n := len(listAll(t, q, mustFilter(t, "workflow:"+ulid.Make().String()), 10)); n != 0 {
		t.Fatalf("an unknown workflow lists %d jobs", n)
	}
}

// TestExplainJobInAWorkflow: a blocked job says its workflow, node and policy and what it
// waits for (each node it needs that has not ended, with its job's state, an open group as
// such); a released member says its node; JobDetail names the workflow.
func TestExplainJobInAWorkflow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, q := newQueue(t)
	wf := venturi.NewWorkflow("import 42")
	fetch := wf.Add("fetch", opsHold{N: 1})
	rows := wf.Group("rows", venturi.OpenGroup())
	wf.Add("total", opsHold{N: 2}, venturi.Needs(fetch, rows))
	wf.Add("report", opsHold{N: 3}, venturi.NeedsEnded(fetch), venturi.DelayAfterDeps(time.Minute))
	res, err := q.EnqueueWorkflow(ctx, wf)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		node string
		want []string
	}{
		{"total", []string{`^blocked: node "total" of workflow ` + res.ID.String() + ` \("import 42"\) waits for 2 of the 2 nodes it needs; it runs once every one of them completed`,
			`^needs fetch: its job is available$`, `^needs rows: an open group`}},
		{"report", []string{`waits for 1 of the 1 nodes it needs; it runs once every one of them ended`,
			`^needs fetch: its job is available$`, `^once released, it is due 1m0s later`}},
		{"fetch", []string{`^available since`, `^node "fetch" of workflow ` + res.ID.String() + ` \("import 42"\), which is open$`}},
	} {
		ex, err := q.ExplainJob(ctx, res.Jobs[tt.node])
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range tt.want {
			re := regexp.MustCompile(w)
			if !slices.ContainsFunc(ex.Reasons, re.MatchString) {
				t.Errorf("%s: reasons %q lack %q", tt.node, ex.Reasons, w)
			}
		}
	}
	d, err := q.JobDetail(ctx, res.Jobs["total"])
	if err != nil {
		t.Fatal(err)
	}
	if w := d.Workflow; w == nil || w.ID != res.ID || w.Node != "total" || w.Kind != venturi.WorkflowKindGraph ||
		w.Name != "import 42" || w.State != venturi.WorkflowOpen || w.Policy != venturi.PolicySucceeded {
		t.Fatalf("JobDetail's workflow: %+v", d.Workflow)
	}
	plain := enqueue(t, q, opsHold{N: 9})
	if d, err := q.JobDetail(ctx, plain.ID); err != nil || d.Workflow != nil || slices.ContainsFunc(d.Explain.Reasons, func(r string) bool {
		return strings.Contains(r, "workflow")
	}) {
		t.Fatalf("a job outside workflows: %+v, %v", d, err)
	}

	// Cancelled: the node is decided without a run, and says so.
	if err := q.CancelWorkflow(ctx, res.ID, "stop"); err != nil {
		t.Fatal(err)
	}
	ex, err := q.ExplainJob(ctx, res.Jobs["total"])
	if err != nil {
		t.Fatal(err)
	}
	if r := strings.Join(ex.Reasons, "\n"); !strings.Contains(r, "cancelled") || strings.Contains(r, "needs fetch") {
		t.Fatalf("a cancelled workflow's node: %q", ex.Reasons)
	}
}

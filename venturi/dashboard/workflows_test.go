package dashboard_test

import (
	"context"
	"fmt"
	"html"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/dashboard"
)

// wfOK completes at once.
type wfOK struct {
	N int `json:"n"`
}

func (wfOK) Kind() string { return "wf_ok" }

// workflowFixture is a schema whose worker has run a failed workflow (charge dies, so
// receipt is decided without a run) and a failed batch, with an open workflow whose root
// no worker serves (nop) and whose second node is blocked.
type workflowFixture struct {
	failed, open venturi.WorkflowResult
	batchID      ulid.ULID
}

func startWorkflowWorker(t *testing.T, b *bundle) {
	t.Helper()
	w, err := venturi.NewWorker(b.pool, struct{}{}, venturi.Config{MaintenanceInterval: 20 * time.Millisecond,
		PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := venturi.RegisterFunc(w, func(_ context.Context, j boom, _ *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
		return venturi.Outcome{}, venturi.Permanentf("boom %d", j.N)
	}); err != nil {
		t.Fatal(err)
	}
	if err := venturi.RegisterFunc(w, func(_ context.Context, j wfOK, _ *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
		return venturi.Completed(), nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
}

func newWorkflowFixture(t *testing.T, b *bundle) *workflowFixture {
	t.Helper()
	ctx := context.Background()
	startWorkflowWorker(t, b)
	f := &workflowFixture{}
	var err error
	wf := venturi.NewWorkflow("import <bad>")
	charge := wf.Add("charge", boom{N: 1})
	wf.Add("receipt", wfOK{N: 2}, venturi.Needs(charge))
	if f.failed, err = b.q.EnqueueWorkflow(ctx, wf); err != nil {
		t.Fatal(err)
	}
	bt := venturi.NewBatch("newsletter", venturi.OnSuccess(wfOK{N: 3}))
	bt.Add(wfOK{N: 4})
	bt.Add(boom{N: 5})
	br, err := b.q.EnqueueBatch(ctx, bt)
	if err != nil {
		t.Fatal(err)
	}
	f.batchID = br.ID
	wf = venturi.NewWorkflow("held")
	root := wf.Add("root", nop{})
	wf.Add("after", wfOK{N: 6}, venturi.Needs(root))
	if f.open, err = b.q.EnqueueWorkflow(ctx, wf); err != nil {
		t.Fatal(err)
	}
	for _, id := range []ulid.ULID{f.failed.ID, f.batchID} {
		waitUntil(t, "workflow "+id.String()+" to fail", func() bool {
			w, err := b.q.Workflow(ctx, id)
			return err == nil && w.State == venturi.WorkflowFailed
		})
	}
	return f
}

// TestWorkflowPages: the list filters by state, kind and name; a workflow's page draws
// its graph with links to its jobs, a batch's its counts; a job's page links its workflow
// and says what a blocked job waits for; cancel and retry act and say so; bad input is a
// 400 or a 404 that logs nothing.
func TestWorkflowPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	logs := &errorLog{}
	pool := migrated(t)
	b := serveConfig(t, venturi.NewQueue(pool, venturi.QueueConfig{}),
		dashboard.Config{Access: grant("wes", dashboard.AllActions), Logger: slog.New(logs)}, false)
	b.pool = pool
	f := newWorkflowFixture(t, b)
	failed, open := f.failed.ID.String(), f.open.ID.String()

	for _, tt := range []struct {
		path       string
		want, lack []string
	}{
		{"/ops/workflows", []string{failed, f.batchID.String(), open, "import &lt;bad&gt;", "newsletter", "batch"}, nil},
		{"/ops/workflows?state=open", []string{open}, []string{failed}},
		{"/ops/workflows?kind=batch", []string{f.batchID.String()}, []string{failed, open}},
		{"/ops/workflows?name=import", []string{failed}, []string{open}},
		{"/ops/workflows?limit=1", []string{open, "Next page"}, []string{failed}},
		{"/ops/workflows/" + failed, []string{"<svg", `data-node="charge"`, `data-node="receipt"`, "dfail", `class="edge needs"`,
			`href="/ops/jobs/` + f.failed.Jobs["charge"].String() + `"`, "Retry from where it failed", "/ops/jobs?q=workflow%3A" + failed},
			[]string{"Cancel workflow"}},
		{"/ops/workflows/" + f.batchID.String(), []string{`id="batch-counts"`, "2 members", "on_success", "dfail", "Retry from"}, nil},
		{"/ops/workflows/" + open, []string{"Cancel workflow", `data-node="after"`, "blocked"}, []string{"Retry from"}},
		{"/ops/jobs/" + f.open.Jobs["after"].String(), []string{`id="job-workflow"`, "held", `blocked: node &#34;after&#34; of workflow`,
			"needs root: its job is available"}, nil},
		{"/ops/jobs?state=blocked", []string{f.open.Jobs["after"].String()}, []string{f.open.Jobs["root"].String()}},
		{"/ops/jobs?q=workflow:" + open, []string{f.open.Jobs["after"].String(), f.open.Jobs["root"].String()}, []string{f.failed.Jobs["charge"].String()}},
	} {
		status, body := b.get(t, tt.path)
		if status != http.StatusOK {
			t.Errorf("GET %s: %d", tt.path, status)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(body, w) {
				t.Errorf("GET %s lacks %q", tt.path, w)
			}
		}
		for _, w := range tt.lack {
			if strings.Contains(body, w) {
				t.Errorf("GET %s has %q", tt.path, w)
			}
		}
	}

	tok := b.token(t)
	status, loc, _ := b.post(t, "/ops/workflows/"+open+"/cancel", url.Values{"csrf": {tok}, "reason": {"no longer needed"}})
	if status != http.StatusSeeOther || loc != "/ops/workflows/"+open+"?done=wf-cancelled" {
		t.Fatalf("cancel: %d %q", status, loc)
	}
	waitUntil(t, "the workflow to end cancelled", func() bool {
		w, err := b.q.Workflow(ctx, f.open.ID)
		return err == nil && w.State == venturi.WorkflowCancelled
	})
	j, err := b.q.Job(ctx, f.open.Jobs["root"])
	if err != nil || j.State != venturi.StateCancelled || !strings.Contains(j.Journal[len(j.Journal)-1].Note, "cancelled by wes: no longer needed") {
		t.Fatalf("the cancelled root: %+v %v", j, err)
	}
	if _, body := b.get(t, loc); !strings.Contains(body, "Workflow cancelled") {
		t.Errorf("the page after the cancel does not say so")
	}
	status, _, body := b.post(t, "/ops/workflows/"+open+"/cancel", url.Values{"csrf": {tok}})
	if status != http.StatusConflict || !strings.Contains(body, "not open") {
		t.Errorf("cancel of a finished workflow: %d", status)
	}
	status, loc, _ = b.post(t, "/ops/workflows/"+failed+"/retry", url.Values{"csrf": {tok}, "reason": {"card fixed"}})
	if status != http.StatusSeeOther || loc != "/ops/workflows/"+failed+"?done=wf-retried&n=1" {
		t.Fatalf("retry: %d %q", status, loc)
	}
	if _, body := b.get(t, loc); !strings.Contains(body, "Workflow retried: 1 job run again") {
		t.Errorf("the page after the retry does not say so")
	}

	// A workflow past MaxGraphNodes: no graph, its nodes' table in pages.
	wide := venturi.NewWorkflow("wide")
	for i := range dashboard.MaxGraphNodes + 1 {
		wide.Add(fmt.Sprintf("n%03d", i), nop{})
	}
	wr, err := b.q.EnqueueWorkflow(ctx, wide)
	if err != nil {
		t.Fatal(err)
	}
	_, body = b.get(t, "/ops/workflows/"+wr.ID.String())
	if !strings.Contains(body, `id="no-graph"`) || strings.Contains(body, "<svg") || !strings.Contains(body, "?after=n199") ||
		strings.Contains(body, `data-node="n200"`) {
		t.Errorf("a workflow of %d nodes: want no graph and a next page after n199", dashboard.MaxGraphNodes+1)
	}
	if _, body = b.get(t, "/ops/workflows/"+wr.ID.String()+"?after=n199"); !strings.Contains(body, `data-node="n200"`) || !strings.Contains(body, "First nodes") {
		t.Errorf("the second page of nodes lacks n200")
	}

	for _, tt := range []struct {
		method, path string
		status       int
	}{
		{http.MethodGet, "/ops/workflows?state=bogus", http.StatusBadRequest},
		{http.MethodGet, "/ops/workflows?kind=chain", http.StatusBadRequest},
		{http.MethodGet, "/ops/workflows?name=a%00", http.StatusBadRequest},
		{http.MethodGet, "/ops/workflows?name=%ff", http.StatusBadRequest},
		{http.MethodGet, "/ops/workflows?limit=0", http.StatusBadRequest},
		{http.MethodGet, "/ops/workflows?cursor=garbage", http.StatusBadRequest},
		{http.MethodGet, "/ops/workflows/" + failed + "?after=a%00", http.StatusBadRequest},
		{http.MethodGet, "/ops/workflows/not-a-ulid", http.StatusNotFound},
		{http.MethodGet, "/ops/workflows/" + ulid.Make().String(), http.StatusNotFound},
		{http.MethodPost, "/ops/workflows/" + failed + "/explode", http.StatusNotFound},
		{http.MethodPost, "/ops/workflows/" + ulid.Make().String() + "/retry", http.StatusNotFound},
		{http.MethodPost, "/ops/workflows/nope/cancel", http.StatusNotFound},
	} {
		var form url.Values
		if tt.method == http.MethodPost {
			form = url.Values{"csrf": {tok}}
		}
		if status, body := b.do(t, tt.method, tt.path, form); status != tt.status {
			t.Errorf("%s %s: %d, want %d (%.300s)", tt.method, tt.path, status, tt.status, html.UnescapeString(body))
		}
	}
	if l := logs.lines(); len(l) != 0 {
		t.Fatalf("the workflow pages logged errors: %q", l)
	}
}

// TestWorkflowActionsNeedGrantAndToken: cancel and retry are shown and taken only with
// their grants (Cancel, Retry), a valid token and from the dashboard's own origin; a
// filtered list (a search window) is refused from another site, the plain list is not.
func TestWorkflowActionsNeedGrantAndToken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := migrated(t)
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	wf := venturi.NewWorkflow("held")
	wf.Add("root", nop{})
	res, err := q.EnqueueWorkflow(ctx, wf)
	if err != nil {
		t.Fatal(err)
	}
	id := res.ID.String()
	isOpen := func() bool {
		w, err := q.Workflow(ctx, res.ID)
		if err != nil {
			t.Fatal(err)
		}
		return w.State == venturi.WorkflowOpen && w.CancelNote == ""
	}

	ro := serve(t, pool, nil)
	if _, body := ro.get(t, "/ops/workflows/"+id); strings.Contains(body, `id="wf-cancel"`) || strings.Contains(body, "csrf-token") {
		t.Fatal("a read-only page shows the cancel form")
	}
	if status, _, _ := ro.post(t, "/ops/workflows/"+id+"/cancel", url.Values{}); status != http.StatusForbidden || !isOpen() {
		t.Fatalf("a read-only cancel: %d", status)
	}

	retryOnly := serve(t, pool, grant("rita", dashboard.Retry))
	if _, body := retryOnly.get(t, "/ops/workflows/"+id); strings.Contains(body, `id="wf-cancel"`) {
		t.Fatal("a page without the Cancel grant shows the cancel form")
	}
	status, _, body := retryOnly.post(t, "/ops/workflows/"+id+"/cancel", url.Values{"csrf": {retryOnly.token(t)}})
	if status != http.StatusForbidden || !strings.Contains(body, "not allowed") || !isOpen() {
		t.Fatalf("a cancel without the Cancel grant: %d", status)
	}

	b := serve(t, pool, grant("carl", dashboard.Cancel))
	if _, body := b.get(t, "/ops/workflows/"+id); !strings.Contains(body, `id="wf-cancel"`) || strings.Contains(body, `id="wf-retry"`) {
		t.Fatal("the Cancel grant's page: want the cancel form and no retry form")
	}
	tok := b.token(t)
	for _, tt := range []struct {
		name string
		form url.Values
		hdr  []string
	}{
		{"no token", url.Values{}, nil},
		{"another user's token", url.Values{"csrf": {retryOnly.token(t)}}, nil},
		{"from another site", url.Values{"csrf": {tok}}, []string{"Sec-Fetch-Site", "cross-site"}},
		{"from another origin", url.Values{"csrf": {tok}}, []string{"Origin", "https://evil.example"}},
	} {
		if status, _, _ := b.post(t, "/ops/workflows/"+id+"/cancel", tt.form, tt.hdr...); status != http.StatusForbidden || !isOpen() {
			t.Errorf("%s: %d; want 403 and the workflow open", tt.name, status)
		}
	}
	if status, _ := b.get(t, "/ops/workflows/"+id+"/cancel"); status == http.StatusOK || !isOpen() {
		t.Errorf("a GET of the action: %d", status)
	}
	if status, _, _ := b.post(t, "/ops/workflows/"+id+"/cancel", url.Values{"csrf": {tok}}, "Sec-Fetch-Site", "same-origin"); status != http.StatusSeeOther || isOpen() {
		t.Fatalf("a granted same-origin cancel with its token: %d", status)
	}

	for _, path := range []string{"/ops/workflows?state=open", "/ops/workflows?kind=batch", "/ops/workflows?name=x"} {
		status, body := b.do(t, http.MethodGet, path, nil, "Sec-Fetch-Site", "cross-site")
		if status != http.StatusForbidden || !strings.Contains(body, `id="run-here"`) {
			t.Errorf("GET %s from another site: %d; want 403 with a link to run it", path, status)
		}
	}
	for _, path := range []string{"/ops/workflows", "/ops/workflows/" + id} {
		if status, _ := b.do(t, http.MethodGet, path, nil, "Sec-Fetch-Site", "cross-site"); status != http.StatusOK {
			t.Errorf("GET %s from another site: %d; want 200 (no search)", path, status)
		}
	}
}

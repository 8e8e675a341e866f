package browsertest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// acceptDialogs accepts every confirm() the pages ask (a form with data-confirm) for the
// rest of the test.
func acceptDialogs(t *testing.T, b *browser) {
	t.Helper()
	dialogs := chromedp.Events(b.ctx, page.JavascriptDialogOpening)
	go func() {
		for _, err := range dialogs {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(b.ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
}

// awaitWorkflow waits until workflow id is in state want.
func (s *stack) awaitWorkflow(t *testing.T, id ulid.ULID, want venturi.WorkflowState) {
	t.Helper()
	waitFor(t, "workflow "+id.String()+" "+string(want), func() (bool, error) {
		w, err := s.q.Workflow(context.Background(), id)
		return err == nil && w.State == want, err
	})
}

// attrInt reads a numeric attribute of the first element matching sel.
func (b *browser) attrInt(t *testing.T, sel, attr string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, within)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string]("document.querySelector("+jsString(sel)+").getAttribute("+jsString(attr)+")"))
	if err != nil {
		t.Fatalf("%s of %s: %v", attr, sel, err)
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s of %s: %q", attr, sel, v)
	}
	return n
}

// TestWorkflowsInBrowser drives the workflow views in headless Chromium against a real
// schema and worker: it filters the list by state and kind, reads a workflow's graph
// (nodes by level, coloured by outcome, each linking its job), retries a failed workflow
// and sees it succeed, reads what a blocked job waits for, cancels an open workflow, and
// reads a batch's counts and its jobs.
func TestWorkflowsInBrowser(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ctx := context.Background()

	imp := venturi.NewWorkflow("nightly import")
	fetch := imp.Add("fetch", probe{N: 1})
	rows := imp.Group("rows")
	imp.Add("rows/1", work{N: 1}, venturi.In(rows), venturi.Needs(fetch))
	imp.Add("rows/2", work{N: 2}, venturi.In(rows), venturi.Needs(fetch))
	imp.Add("total", probe{N: 2}, venturi.Needs(rows))
	impRes, err := s.q.EnqueueWorkflow(ctx, imp)
	must(t, err)

	ch := venturi.NewWorkflow("charge orders")
	charge := ch.Add("charge", flaky{Order: 3001, Email: "cy@example.com"})
	ch.Add("receipt", probe{N: 3}, venturi.Needs(charge))
	ch.Add("refund", probe{N: 4}, venturi.NeedsFailure(charge))
	chRes, err := s.q.EnqueueWorkflow(ctx, ch)
	must(t, err)

	later := venturi.NewWorkflow("weekly digest")
	collect := later.Add("collect", probe{N: 5}, venturi.With(venturi.After(time.Hour)))
	later.Add("send", probe{N: 6}, venturi.Needs(collect))
	laterRes, err := s.q.EnqueueWorkflow(ctx, later)
	must(t, err)

	bt := venturi.NewBatch("newsletter", venturi.OnSuccess(probe{N: 7}))
	for i := range 3 {
		bt.Add(work{N: 10 + i})
	}
	btRes, err := s.q.EnqueueBatch(ctx, bt)
	must(t, err)

	s.awaitWorkflow(t, impRes.ID, venturi.WorkflowSucceeded)
	s.awaitWorkflow(t, chRes.ID, venturi.WorkflowFailed)
	s.awaitWorkflow(t, btRes.ID, venturi.WorkflowSucceeded)

	b := newBrowser(t)
	acceptDialogs(t, b)

	t.Run("list and filter", func(t *testing.T) {
		b.open(t, s.base+"/workflows")
		b.waitText(t, "table.workflows tbody", "nightly import", false)
		if n := b.count(t, "table.workflows tbody tr"); n != 4 {
			t.Fatalf("the list shows %d workflows, want 4", n)
		}
		shot(t, b, "workflows")
		b.click(t, `nav.tabs a[href*="state=failed"]`)
		b.waitText(t, "table.workflows tbody", "charge orders", false)
		if n := b.count(t, "table.workflows tbody tr"); n != 1 {
			t.Fatalf("the failed tab shows %d workflows, want 1", n)
		}
		b.open(t, s.base+"/workflows")
		b.do(t, chromedp.SetValue(chromedp.CSS("#wf-kind"), "batch"))
		b.click(t, "form.filter button[type=submit]")
		b.waitText(t, "table.workflows tbody", "newsletter", false)
		if n := b.count(t, "table.workflows tbody tr"); n != 1 {
			t.Fatalf("the batches show %d rows, want 1", n)
		}
	})

	t.Run("a workflow's graph", func(t *testing.T) {
		b.open(t, s.base+"/workflows?name=nightly")
		b.click(t, "table.workflows tbody tr td a")
		b.waitText(t, "main h1", "nightly import", false)
		if n := b.count(t, "svg.graph g.node"); n != 5 {
			t.Fatalf("the graph draws %d nodes, want 5", n)
		}
		if n := b.count(t, "svg.graph g.node.ok"); n != 5 {
			t.Fatalf("%d nodes are drawn succeeded, want 5", n)
		}
		if n := b.count(t, "svg.graph path.edge"); n != 5 {
			t.Fatalf("the graph draws %d edges, want 5", n)
		}
		// Left to right by level: fetch, its rows, the group, total.
		x := func(node string) int { return b.attrInt(t, `g[data-node="`+node+`"] rect`, "x") }
		if !(x("fetch") < x("rows/1") && x("rows/1") == x("rows/2") && x("rows/2") < x("rows") && x("rows") < x("total")) {
			t.Fatalf("levels: fetch %d, rows/1 %d, rows/2 %d, rows %d, total %d", x("fetch"), x("rows/1"), x("rows/2"), x("rows"), x("total"))
		}
		b.click(t, `g[data-node="fetch"] rect`)
		b.waitText(t, "main h1", impRes.Jobs["fetch"].String(), false)
		b.waitText(t, "#job-workflow", "nightly import", false)
	})

	t.Run("retry a failed workflow", func(t *testing.T) {
		b.open(t, s.base+"/workflows/"+chRes.ID.String())
		b.waitText(t, "#wf-state", "failed", false)
		if n := b.count(t, `svg.graph g.node.bad[data-node="charge"]`); n != 1 {
			t.Fatal("the failed node is not drawn failed")
		}
		shot(t, b, "workflow")
		s.state.fixed.Store(true)
		b.do(t, chromedp.SendKeys(chromedp.CSS(`form[action$="/retry"] input[name="reason"]`), "gateway fixed"))
		b.click(t, "#wf-retry")
		b.waitText(t, ".flash", "Workflow retried: 1 job", false)
		b.waitText(t, "#wf-state", "succeeded", true)
		if n := b.count(t, `svg.graph g.node.ok[data-node="receipt"]`); n != 1 {
			t.Fatal("the revived receipt is not drawn succeeded")
		}
	})

	t.Run("a blocked job, and a cancel", func(t *testing.T) {
		b.open(t, s.base+"/jobs?state=blocked")
		b.waitText(t, "table.jobs tbody", laterRes.Jobs["send"].String()[:10], false)
		if n := b.count(t, "table.jobs tbody tr"); n != 1 {
			t.Fatalf("the blocked tab shows %d jobs, want 1", n)
		}
		b.open(t, s.base+"/workflows/"+laterRes.ID.String())
		if n := b.count(t, `svg.graph g.node.blocked[data-node="send"]`); n != 1 {
			t.Fatal("the blocked node is not drawn blocked")
		}
		b.click(t, `g[data-node="send"] rect`)
		b.waitText(t, "ul.reasons", `blocked: node "send" of workflow`, false)
		b.waitText(t, "ul.reasons", "needs collect: its job is scheduled", false)
		b.click(t, "#job-workflow")
		b.click(t, "#wf-cancel") // confirmed by acceptDialogs
		b.waitText(t, ".flash", "Workflow cancelled", false)
		b.waitText(t, "#wf-state", "cancelled", true)
	})

	t.Run("a batch", func(t *testing.T) {
		b.open(t, s.base+"/workflows/"+btRes.ID.String())
		b.waitText(t, "#batch-counts", "3", false)
		b.waitText(t, `g[data-node="members"]`, "3 members", false)
		shot(t, b, "batch")
		b.click(t, "#wf-jobs")
		b.waitText(t, "table.jobs tbody", "report.render", false)
		if n := b.count(t, "table.jobs tbody tr"); n != 4 {
			t.Fatalf("the batch's jobs: %d rows, want 4 (3 members and the callback)", n)
		}
	})

	t.Run("the retry's note", func(t *testing.T) {
		j, err := s.q.Job(ctx, chRes.Jobs["charge"])
		must(t, err)
		found := false
		for _, e := range j.Journal {
			found = found || e.Note == "workflow retried: by "+actor+": gateway fixed"
		}
		if !found {
			t.Fatalf("the retry's note is not in the charge's journal: %+v", j.Journal)
		}
	})

	b.noProblems(t)
}

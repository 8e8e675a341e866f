package main

import (
	"strings"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// waitWorkflow waits until workflow id is in state.
func (e *env) waitWorkflow(id ulid.ULID, state venturi.WorkflowState) {
	e.t.Helper()
	eventually(e.t, "workflow "+id.String()+" "+string(state), func() bool {
		w, err := e.q.Workflow(e.t.Context(), id)
		if err != nil {
			e.t.Fatal(err)
		}
		return w.State == state
	})
}

// TestWorkflows: workflows list filters and pages, show prints the nodes with their states
// and outcomes (a batch its counts), jobs list workflow:ID and state:blocked find their
// jobs, explain says what a blocked job waits for, and cancel and retry act, journaling
// who did.
func TestWorkflows(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	e.startWorker()

	good := venturi.NewWorkflow("import good")
	first := good.Add("first", okTask{N: 1})
	good.Add("second", okTask{N: 2}, venturi.Needs(first))
	goodRes, err := e.q.EnqueueWorkflow(ctx, good)
	if err != nil {
		t.Fatal(err)
	}
	bad := venturi.NewWorkflow("import bad")
	charge := bad.Add("charge", deadTask{N: 3})
	bad.Add("receipt", okTask{N: 4}, venturi.Needs(charge))
	badRes, err := e.q.EnqueueWorkflow(ctx, bad)
	if err != nil {
		t.Fatal(err)
	}
	b := venturi.NewBatch("newsletter", venturi.OnSuccess(okTask{N: 9}))
	b.Add(okTask{N: 5})
	b.Add(okTask{N: 6})
	b.Add(deadTask{N: 7})
	batchRes, err := e.q.EnqueueBatch(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	held := venturi.NewWorkflow("mail out")
	send := held.Add("send", mailTask{To: "ops@example.com"}) // queue mail: no worker serves it
	held.Add("log", okTask{N: 8}, venturi.Needs(send))
	heldRes, err := e.q.EnqueueWorkflow(ctx, held)
	if err != nil {
		t.Fatal(err)
	}
	e.waitWorkflow(goodRes.ID, venturi.WorkflowSucceeded)
	e.waitWorkflow(badRes.ID, venturi.WorkflowFailed)
	e.waitWorkflow(batchRes.ID, venturi.WorkflowFailed)

	r := e.ok("workflows", "list")
	contains(t, r, goodRes.ID.String(), badRes.ID.String(), batchRes.ID.String(), heldRes.ID.String(), "batch", "newsletter", "failed")
	r = e.ok("workflows", "list", "--state", "open")
	contains(t, r, heldRes.ID.String())
	lacks(t, r.stdout, goodRes.ID.String(), badRes.ID.String())
	r = e.ok("workflows", "list", "--kind", "batch")
	contains(t, r, batchRes.ID.String())
	lacks(t, r.stdout, goodRes.ID.String(), heldRes.ID.String())
	r = e.ok("workflows", "list", "--name", "import", "--state", "failed,succeeded", "--within", "1h")
	contains(t, r, goodRes.ID.String(), badRes.ID.String())
	lacks(t, r.stdout, batchRes.ID.String(), heldRes.ID.String())
	var page struct {
		Workflows []venturi.WorkflowSummary
		Next      string
	}
	e.okJSON(&page, "workflows", "list", "--limit", "1")
	if len(page.Workflows) != 1 || page.Workflows[0].ID != heldRes.ID || page.Next == "" {
		t.Fatalf("workflows list --limit 1 --json: %+v", page)
	}
	e.okJSON(&page, "workflows", "list", "--limit", "10", "--cursor", page.Next)
	if len(page.Workflows) != 3 || page.Workflows[0].ID != batchRes.ID || page.Next != "" {
		t.Fatalf("the page after: %+v", page)
	}
	r = e.ok("workflows", "list", "--limit", "1")
	if !strings.Contains(r.stderr, "more: venturi workflows list --cursor") {
		t.Fatalf("a full page does not say how to go on: %s", r)
	}

	r = e.ok("workflows", "show", badRes.ID.String())
	contains(t, r, "import bad", "failed", "nodes:", "charge", "dead", "receipt", "dfail", "succeeded: charge")
	r = e.ok("workflows", "show", batchRes.ID.String())
	contains(t, r, "batch", "members", "3: 2 succeeded, 1 failed, 0 cancelled, 0 pending (sealed)", "on_success")
	var d venturi.WorkflowDetail
	e.okJSON(&d, "workflows", "show", heldRes.ID.String())
	if d.ID != heldRes.ID || d.Kind != venturi.WorkflowKindGraph || len(d.NodeList) != 2 || d.NodeList[0].Name != "log" ||
		d.NodeList[0].JobState != venturi.StateBlocked {
		t.Fatalf("workflows show --json: %+v", d)
	}
	r = e.ok("workflows", "show", batchRes.ID.String(), "--nodes", "2")
	if !strings.Contains(r.stderr, "more nodes: venturi workflows show "+batchRes.ID.String()+" --after") {
		t.Fatalf("a cut node list does not say how to go on: %s", r)
	}

	r = e.ok("jobs", "list", "workflow:"+heldRes.ID.String())
	contains(t, r, heldRes.Jobs["send"].String(), heldRes.Jobs["log"].String())
	lacks(t, r.stdout, goodRes.Jobs["first"].String())
	r = e.ok("jobs", "list", "state:blocked")
	contains(t, r, heldRes.Jobs["log"].String())
	if lines(r.stdout) != 2 {
		t.Fatalf("state:blocked lists more than the one blocked job: %s", r)
	}
	r = e.ok("explain", heldRes.Jobs["log"].String())
	contains(t, r, `blocked: node "log" of workflow `+heldRes.ID.String(), "needs send: its job is available")

	r = e.ok("workflows", "cancel", heldRes.ID.String(), "--reason", "no mail today")
	contains(t, r, "cancelled")
	e.waitWorkflow(heldRes.ID, venturi.WorkflowCancelled)
	if j := e.job(heldRes.Jobs["send"]); j.State != venturi.StateCancelled || !strings.Contains(j.Journal[len(j.Journal)-1].Note, "cancelled by tester") {
		t.Fatalf("the cancelled workflow's job: %s %+v", j.State, j.Journal)
	}
	r = e.fails(exitError, "workflows", "cancel", heldRes.ID.String())
	if !strings.Contains(r.stderr, "is not open") {
		t.Fatalf("cancel of a finished workflow: %s", r)
	}

	r = e.ok("workflows", "retry", badRes.ID.String(), "--reason", "card fixed")
	contains(t, r, "retried: 1 job(s)")
	e.waitWorkflow(badRes.ID, venturi.WorkflowFailed) // it dies again
	found := false
	for _, en := range e.job(badRes.Jobs["charge"]).Journal {
		found = found || (strings.Contains(en.Note, "workflow retried: by tester@") && strings.HasSuffix(en.Note, ": card fixed"))
	}
	if !found {
		t.Fatalf("the retry's note is not in the journal: %+v", e.job(badRes.Jobs["charge"]).Journal)
	}
	r = e.ok("workflows", "retry", goodRes.ID.String())
	contains(t, r, "nothing to run again")

	for _, tt := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"workflows", "show", "x"}, exitUsage, `workflow ID "x": not a ULID`},
		{[]string{"workflows", "show"}, exitUsage, "missing the workflow's ID"},
		{[]string{"workflows", "list", "--state", "sleeping"}, exitUsage, `unknown workflow state "sleeping"`},
		{[]string{"workflows", "list", "--kind", "chain"}, exitUsage, `unknown workflow kind "chain"`},
		{[]string{"workflows", "list", "--after", "yesterday"}, exitUsage, "RFC 3339"},
		{[]string{"workflows", "list", "extra"}, exitUsage, `unexpected argument "extra"`},
		{[]string{"workflows", "show", ulid.Make().String()}, exitError, "not found"},
		{[]string{"workflows", "retry", ulid.Make().String()}, exitError, "not found"},
		{[]string{"workflows", "nope"}, exitUsage, `unknown command "nope"`},
	} {
		r := e.run(tt.args...)
		if r.code != tt.code || !strings.Contains(r.stderr, tt.says) {
			t.Errorf("venturi %s: want exit %d saying %q, got %s", strings.Join(tt.args, " "), tt.code, tt.says, r)
		}
	}
	r = e.ok("help", "workflows")
	contains(t, r, "list", "show ID", "cancel ID", "retry ID")
}

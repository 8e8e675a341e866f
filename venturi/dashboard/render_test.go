package dashboard

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// TestTemplatesRender executes every page's template on data with every optional part
// set, so that a template mistake fails here rather than on a page (the handler tests run
// them on real data).
func TestTemplatesRender(t *testing.T) {
	t.Parallel()
	pages, err := parsePages("/ops")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	id := ulid.Make()
	qs := venturi.QueueStats{Queue: `q "<x>"`, Paused: true, Concurrency: 3, Lag: 2 * time.Second,
		Counts:          map[venturi.State]int64{venturi.StateAvailable: 1234, venturi.StateDead: 5},
		CompletedPerSec: 12.5, Kinds: []venturi.KindStats{{Kind: "k<script>", Counts: map[venturi.State]int64{venturi.StateAvailable: 1}}}}
	st := venturi.Stats{SampledAt: now, Queues: []venturi.QueueStats{qs}}
	sum := venturi.JobSummary{ID: id, Kind: "k", Queue: "default", State: venturi.StateDead, RunAt: now, CreatedAt: now,
		FinishedAt: &now, LastEvent: venturi.EventDead, LastNote: "<b>boom</b>"}
	detail := &venturi.JobDetail{
		Job: venturi.Job{ID: id, Kind: "k", State: venturi.StateDead, Payload: json.RawMessage(`{"a":1}`), Carry: json.RawMessage(`{"c":2}`),
			Meta: venturi.Meta{"trace": "x"}, Slot: &venturi.Slot{Key: "s", Limit: 1}, DedupKey: "d", Partition: "p",
			Journal: []venturi.JournalEntry{{Seq: 1, Event: venturi.EventFailed, Run: 1, Note: "n", At: now}}, JournalLen: 1,
			Circuit: &venturi.Circuit{State: venturi.CircuitOpen}},
		Runs: []venturi.RunRecord{{Run: 1, Worker: "w", StartedAt: now, EndedAt: now, Duration: time.Second, Event: venturi.EventFailed,
			Note: "boom", Attachment: json.RawMessage(`{"status":500}`), ResumeIn: time.Minute}},
		Steps:   []venturi.StepRecord{{Name: "s1", Result: json.RawMessage(`1`), Run: 1, At: now}},
		Signals: []venturi.SignalRecord{{Signal: venturi.Signal{Seq: 1, Name: "go", Payload: json.RawMessage(`{}`), SentAt: now}}},
		Hooks:   []venturi.HookRecord{{Name: "h", CreatedAt: now, ExpiresAt: now}},
		Explain: &venturi.JobExplanation{Reasons: []string{"dead: retry it to run it again"}, Retries: []time.Duration{time.Second, 2 * time.Second}},
	}
	wfID := ulid.Make()
	wfNodes := []venturi.NodeInfo{
		{Name: "fetch", JobID: id, JobState: venturi.StateCompleted, Own: "ok", Outcome: "ok"},
		{Name: "rows", Group: true},
		{Name: "row<1>", JobID: id, JobState: venturi.StateRunning, In: "rows"},
		{Name: "total", JobID: id, JobState: venturi.StateBlocked, Needs: []string{"fetch", "rows"}, Waiting: 1},
	}
	wfSum := venturi.WorkflowSummary{WorkflowInfo: venturi.WorkflowInfo{ID: wfID, Name: "import <42>", State: venturi.WorkflowOpen,
		Nodes: 4, OpenNodes: 2, Attempt: 1, CreatedAt: now}, Kind: venturi.WorkflowKindGraph, CancelRequestedAt: &now}
	wfDetail := &venturi.WorkflowDetail{WorkflowSummary: wfSum, NodeList: wfNodes, NextNode: "total"}
	batchSum := venturi.WorkflowSummary{WorkflowInfo: venturi.WorkflowInfo{ID: wfID, Name: "mail", State: venturi.WorkflowFailed,
		Nodes: 3, CreatedAt: now, FinishedAt: &now}, Kind: venturi.WorkflowKindBatch}
	batchDetail := &venturi.WorkflowDetail{WorkflowSummary: batchSum, NodeList: wfNodes[:1],
		Batch: &venturi.BatchInfo{Total: 1234, Succeeded: 1000, Failed: 234, Sealed: true}}
	withWf := *detail
	withWf.Workflow = &venturi.JobWorkflow{ID: wfID, Kind: venturi.WorkflowKindBatch, Name: "mail", Node: "on_success", State: venturi.WorkflowOpen}
	all := Access{Actor: "alice", Grants: AllActions}
	for _, tt := range []struct {
		tmpl string
		data any
		want []string
	}{
		{"overview", &overviewData{Stats: st, Totals: totals(st, venturi.JobFilter{}), States: states,
			Queues: []queueRow{{QueueStats: qs, Depth: newSparkline([]float64{1, 5, 2}, fmtFloatCount), Rate: newSparkline(nil, fmtRate)}},
			Recent: []venturi.JobSummary{sum}}, []string{"1,234", "&lt;b&gt;boom&lt;/b&gt;", "<polyline", "k&lt;script&gt;"}},
		{"overview", &overviewData{States: states}, []string{"No stats sample yet"}},
		{"jobs", &jobsData{Query: "kind:k", Jobs: []venturi.JobSummary{sum}, Tabs: []tab{{Label: "dead", Count: 5, HasCount: true, Live: "t:dead"}},
			Bulk: []bulkLink{{Label: "Retry all matching…", URL: "/ops/bulk/retry?q=x"}}, NextURL: "/ops/jobs?cursor=c"}, []string{"Next page", "Retry all matching"}},
		{"jobs", &jobsData{Invalid: "unknown key \"nope\""}, []string{"The filter is not valid"}},
		{"jobs", &jobsData{Query: "note:x", Partial: true, Window: 10_000, NextURL: "/ops/jobs?q=note%3Ax&cursor=c"},
			[]string{"searched 10,000 more jobs", "without a match", "Search the next 10,000"}},
		{"job", &jobData{JobDetail: detail, Retry: true, Delete: true}, []string{"Run 1", "Retry now", "/ops/jobs/" + id.String() + "/retry", "dead: retry it"}},
		{"bulk", &bulkData{Action: "retry", Verb: "Retry", Result: venturi.BulkResult{Matched: 10_000, Eligible: 9_000, More: true, CountStopped: true},
			FormURL: "/ops/bulk/retry"}, []string{"at least 10,000", "stopped counting", "Retry all matching jobs"}},
		{"bulk", &bulkData{Action: "retry", Verb: "Retry", Filter: "state:dead", Result: venturi.BulkResult{Matched: 3, Eligible: 3},
			FormURL: "/ops/bulk/retry"}, []string{"Retry 3 jobs", `name="csrf"`}},
		{"queues", &queuesData{Stats: st, States: states, Max: 10}, []string{"Resume", `name="concurrency"`}},
		{"cron", []venturi.ScheduleInfo{{Name: "nightly", Cron: "0 3 * * *", NextFire: now}}, []string{"nightly", "Pause"}},
		{"breakers", &breakersData{Circuits: []venturi.Circuit{{Kind: "fetch", State: venturi.CircuitOpen, Failures: 3, OpenUntil: &now}},
			NextURL: "/ops/breakers?cursor=c", FirstURL: "/ops/breakers"}, []string{"Reset", "Next page", "First page", "1 breaker on"}},
		{"audit", &auditData{Entries: []venturi.AuditEntry{{ID: 1, At: now, Actor: "alice", Action: "jobs.retry", Target: "state:dead", Count: 2}}},
			[]string{"jobs.retry", "alice"}},
		{"job", &jobData{JobDetail: &withWf}, []string{"Batch", `href="/ops/workflows/` + wfID.String() + `"`, "on_success"}},
		{"workflows", &workflowsData{Workflows: []venturi.WorkflowSummary{wfSum, batchSum}, Tabs: []tab{{Label: "open", Active: true}},
			Kinds: []option{{Value: "batch", Label: "batches", Selected: true}}, NextURL: "/ops/workflows?cursor=c", Partial: true, Window: 10_000},
			[]string{"import &lt;42&gt;", "cancelling", "batch", "Search the next 10,000", `<option value="batch" selected>`}},
		{"workflow", &workflowData{WorkflowDetail: wfDetail, Graph: layout("/ops", wfNodes), Cancel: true, NextURL: "/ops/workflows/x?after=total",
			JobsURL: "/ops/jobs?q=workflow%3Ax"}, []string{"<svg", `class="edge needs"`, `class="edge member"`, "row&lt;1&gt;",
			`href="/ops/jobs/` + id.String() + `"`, "Cancel workflow", "Next nodes", "succeeded: fetch, rows", "1 needed"}},
		{"workflow", &workflowData{WorkflowDetail: batchDetail, Graph: layoutBatch("/ops", nil, batchDetail.Batch), Retry: true},
			[]string{"1,234", "Retry from where it failed", "No nodes."}},
		{"workflow", &workflowData{WorkflowDetail: wfDetail, GraphNote: "The graph is drawn for workflows of at most 200 nodes"},
			[]string{"at most 200 nodes"}},
		{"error", "", []string{"Back to the overview"}},
		{"error", "/ops/bulk/retry?q=note%3Ax", []string{`href="/ops/bulk/retry?q=note%3Ax" id="run-here"`}},
	} {
		p := &page{Title: "T", Brand: "venturi", Prefix: "/ops", CSRF: "tok", Actor: "alice", Grants: grantsText(all.Grants),
			Live: true, Data: tt.data, access: all}
		var b bytes.Buffer
		if err := pages[tt.tmpl].ExecuteTemplate(&b, "layout", p); err != nil {
			t.Fatalf("%s: %v", tt.tmpl, err)
		}
		out := b.String()
		for _, w := range tt.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: the page lacks %q", tt.tmpl, w)
			}
		}
		if strings.Contains(out, "<script>") || strings.Contains(out, "<b>boom") {
			t.Errorf("%s: unescaped markup in the page", tt.tmpl)
		}
		if strings.Contains(out, " style=") || strings.Contains(out, "<script>") {
			t.Errorf("%s: inline style or script, which the Content-Security-Policy refuses", tt.tmpl)
		}
	}
}

func TestParseActions(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		want Action
		err  bool
	}{
		{"", NoActions, false},
		{"none", NoActions, false},
		{"all", AllActions, false},
		{"retry|pause_queues", Retry | PauseQueues, false},
		{"retry, cancel", Retry | Cancel, false},
		{"fly", 0, true},
	} {
		got, err := ParseActions(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("ParseActions(%q) = %v, %v; want %v (error %v)", tt.in, got, err, tt.want, tt.err)
		}
		if !tt.err {
			back, err := ParseActions(got.String())
			if err != nil || back != got {
				t.Errorf("ParseActions(%q.String()) = %v, %v", got, back, err)
			}
		}
	}
}

func TestFormat(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ got, want string }{
		{fmtCount(0), "0"}, {fmtCount(999), "999"}, {fmtCount(1000), "1,000"}, {fmtCount(-1234567), "-1,234,567"},
		{fmtDuration(0), "0s"}, {fmtDuration(850 * time.Millisecond), "850ms"}, {fmtDuration(3210 * time.Millisecond), "3.2s"},
		{fmtDuration(5*time.Minute + 10*time.Second), "5m10s"}, {fmtDuration(5 * time.Minute), "5m"},
		{fmtDuration(2*time.Hour + 5*time.Minute), "2h5m"}, {fmtDuration(50 * time.Hour), "2d2h"},
		{fmtRate(0), "0"}, {fmtRate(1.234), "1.23"}, {fmtRate(12.34), "12.3"}, {fmtRate(1234.4), "1,234"},
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

// TestLiveValues: the stats endpoint's keys are the pages' data-live keys, one per value
// (a state's count and a rate of the same name do not collide).
func TestLiveValues(t *testing.T) {
	t.Parallel()
	st := venturi.Stats{SampledAt: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), Queues: []venturi.QueueStats{{
		Queue: "q", Counts: map[venturi.State]int64{venturi.StateCompleted: 5, venturi.StateDead: 2}, CompletedPerSec: 0.5, Lag: time.Second}},
		DeferredMerges: []venturi.DeferredMergeStats{{Kind: "a", Waiting: 1200, Keys: 3, OldestAge: 90 * time.Second}, {Kind: "b", Waiting: 1, Keys: 1}}}
	v := liveOf(st).Values
	for k, want := range map[string]string{"q:completed:q": "5", "q:completed/s:q": "0.50", "q:dead:q": "2", "q:dead/s:q": "0",
		"q:lag:q": "1s", "t:completed": "5", "t:available": "0",
		"d:total": "1,201", "d:waiting:a": "1,200", "d:keys:a": "3", "d:age:a": "1m30s", "d:waiting:b": "1", "d:age:b": "0s"} {
		if v[k] != want {
			t.Errorf("%s = %q, want %q", k, v[k], want)
		}
	}
}

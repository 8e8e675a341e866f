package browsertest

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/venturi-dev/venturi"
)

// browser is one headless Chromium tab, with the errors its pages reported.
type browser struct {
	ctx context.Context

	mu       sync.Mutex
	problems []string // console errors, exceptions, CSP violations
	expected []string // URLs whose failed load is the point (a 400 for a bad filter)
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless,
		chromedp.NoSandbox, // we run as root
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1440, 1000),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	// The first Do starts the browser; its context must not have a timeout (it would stop
	// the browser), so a hung start is bounded by the test's own deadline.
	if err := chromedp.Do(ctx); err != nil {
		cancelTab()
		cancelAlloc()
		t.Fatalf("start Chromium: %v", err)
	}
	b := &browser{ctx: ctx}
	msgs := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				b.mu.Lock()
				if !slices.ContainsFunc(b.expected, func(u string) bool { return m.URL != "" && strings.Contains(m.URL, u) }) {
					b.problems = append(b.problems, m.String()+" ("+m.URL+")")
				}
				b.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { cancelTab(); cancelAlloc(); <-done })
	return b
}

// do runs actions in the tab, bounded by within.
func (b *browser) do(t *testing.T, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, within)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("browser at %s: %v", b.location(), err)
	}
}

func (b *browser) location() string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	loc, _ := chromedp.Run(ctx, chromedp.Location())
	return loc
}

// open loads a page and waits for its heading.
func (b *browser) open(t *testing.T, url string) {
	t.Helper()
	b.do(t, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("main h1")))
}

// click clicks the element matching sel and waits for the page it loads.
func (b *browser) click(t *testing.T, sel string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, within)
	defer cancel()
	if _, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(sel))); err != nil {
		t.Fatalf("click %s at %s: %v", sel, b.location(), err)
	}
	b.do(t, chromedp.WaitVisible(chromedp.CSS("main h1")))
}

// text returns the text of the first element matching sel.
func (b *browser) text(t *testing.T, sel string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, within)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s at %s: %v", sel, b.location(), err)
	}
	return s
}

// count returns how many elements match sel.
func (b *browser) count(t *testing.T, sel string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, within)
	defer cancel()
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int]("document.querySelectorAll("+jsString(sel)+").length"))
	if err != nil {
		t.Fatalf("count %s: %v", sel, err)
	}
	return n
}

// waitText waits until the element matching sel contains want. With reload set the page
// is reloaded between looks (it does not change by itself); without, the page's own script
// is expected to change it, or it shows it already.
func (b *browser) waitText(t *testing.T, sel, want string, reload bool) {
	t.Helper()
	expr := "(() => { const e = document.querySelector(" + jsString(sel) + "); return !!e && e.textContent.includes(" + jsString(want) + "); })()"
	if !reload {
		ctx, cancel := context.WithTimeout(b.ctx, within)
		defer cancel()
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(within))); err != nil {
			t.Fatalf("waiting for %q in %s at %s: %v; it shows %q", want, sel, b.location(), err, b.textOf(sel))
		}
		return
	}
	deadline := time.Now().Add(within)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(b.ctx, within)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		cancel()
		if err == nil && ok {
			return
		}
		<-tick.C
		b.do(t, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("main h1")))
	}
	t.Fatalf("timed out waiting for %q in %s at %s; it shows %q", want, sel, b.location(), b.textOf(sel))
}

// waitJS waits until the expression is true in the page.
func (b *browser) waitJS(t *testing.T, what, expr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, within)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(within))); err != nil {
		t.Fatalf("waiting for %s at %s: %v", what, b.location(), err)
	}
}

// textOf is the text of sel for a failure message ("" when there is none).
func (b *browser) textOf(sel string) string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	s, _ := chromedp.Run(ctx, chromedp.Evaluate[string]("(() => { const e = document.querySelector("+jsString(sel)+"); return e ? e.textContent : ''; })()"))
	return s
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s) // a string always encodes
	return string(b)
}

func (b *browser) screenshot(t *testing.T) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, within)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100: PNG
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	return png
}

// expectFailure says that a load of a URL containing u fails on purpose.
func (b *browser) expectFailure(u string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expected = append(b.expected, u)
}

// noProblems fails the test if a page reported an error (an exception, a console error, a
// resource or script the Content-Security-Policy refused).
func (b *browser) noProblems(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.problems) > 0 {
		t.Fatalf("the pages reported errors: %s", strings.Join(b.problems, "; "))
	}
}

// TestDashboardInBrowser drives every view in headless Chromium against a real schema and
// worker: it filters the jobs, opens one, retries a dead job and sees it complete, bulk
// retries the dead jobs after a dry-run count, pauses a queue and sees the worker stop
// starting its jobs (and resume), pauses a schedule, resets a breaker, and reads all of it
// back in the audit log.
func TestDashboardInBrowser(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ctx := context.Background()

	// Jobs in every state the views show.
	dead := s.enqueue(t, flaky{Order: 1001, Email: "ada@example.com"}, venturi.WithMeta(venturi.Meta{"request_id": "req-7f3a", "tenant": "acme"}))
	s.awaitJob(t, dead, "the flaky job to die", func(j *venturi.Job) bool { return j.State == venturi.StateDead })
	var deadMore []string
	for i := range 3 {
		id := s.enqueue(t, flaky{Order: 2000 + i, Email: "bob@example.com"})
		deadMore = append(deadMore, id.String())
		s.awaitJob(t, id, "a flaky job to die", func(j *venturi.Job) bool { return j.State == venturi.StateDead })
	}
	for i := range 5 {
		id := s.enqueue(t, work{N: i})
		s.awaitJob(t, id, "a report to render", func(j *venturi.Job) bool { return j.State == venturi.StateCompleted })
	}
	s.enqueue(t, work{N: 99}, venturi.After(time.Hour))
	fid := s.enqueue(t, fetch{Host: "feeds.example.org"})
	s.awaitJob(t, fid, "the fetch to fail three times", func(j *venturi.Job) bool { return j.Failures >= 3 })
	if _, err := s.q.Schedule(ctx, venturi.Schedule{Name: "nightly-report", Cron: "0 3 * * *", Task: work{N: 7}}); err != nil {
		t.Fatal(err)
	}
	s.awaitStats(t)

	b := newBrowser(t)

	t.Run("overview", func(t *testing.T) {
		b.open(t, s.base+"/")
		b.waitText(t, "main h1", "Overview", false)
		b.waitText(t, "table.stats", "batch", false)
		// The script ran under the Content-Security-Policy: it polled the stats endpoint.
		b.waitJS(t, "the page's script to poll the stats", `document.body.hasAttribute("data-polled")`)
		b.waitText(t, "body", "card gateway answered 502", false)
		b.do(t, chromedp.Click(chromedp.CSS("#live-toggle")))
		b.waitText(t, "#live-state", "paused", false)
		b.do(t, chromedp.Click(chromedp.CSS("#live-toggle")))
		b.waitText(t, "#live-state", "live", false)
		shot(t, b, "overview")
	})

	t.Run("deferred merges", func(t *testing.T) {
		// Enqueues from SQL of a kind whose merge no running worker knows, on one key, in a
		// queue nobody serves: the first inserts, the next two wait for a Go merge.
		enqueueSQL := func() {
			t.Helper()
			if _, err := s.pool.Exec(ctx, `SELECT venturi_enqueue('ledger.sync', '{"account": 7}', queue => 'parked', dedup_key => 'acct-7')`); err != nil {
				t.Fatal(err)
			}
		}
		for range 3 {
			enqueueSQL()
		}
		b.open(t, s.base+"/")
		b.waitText(t, "p.deferred-total", "Deferred merges waiting: 2", false)
		b.waitText(t, `table.deferred tr[data-kind="ledger.sync"]`, "ledger.sync", false)
		if got := b.text(t, `table.deferred tr[data-kind="ledger.sync"] td:nth-child(2)`); got != "2" {
			t.Fatalf("ledger.sync's deferred merges waiting: %q, want 2", got)
		}
		// One more: the page's script shows it without a reload.
		enqueueSQL()
		b.waitText(t, `table.deferred tr[data-kind="ledger.sync"] td:nth-child(2)`, "3", false)
		b.waitText(t, "p.deferred-total", "Deferred merges waiting: 3", false)
	})

	t.Run("filter jobs", func(t *testing.T) {
		b.open(t, s.base+"/jobs")
		b.do(t, chromedp.SendKeys(chromedp.CSS("#filter"), `kind:billing.charge payload.order:1001`))
		b.click(t, "form.filter button[type=submit]")
		b.waitText(t, "table.jobs tbody", "billing.charge", false)
		rows := b.count(t, "table.jobs tbody tr")
		if rows != 1 {
			t.Fatalf("the filter shows %d rows, want the one job of order 1001", rows)
		}
		shot(t, b, "jobs")
		// A bad filter says what is wrong and lists nothing.
		b.expectFailure("colour")
		b.open(t, s.base+"/jobs?q=colour:blue")
		b.waitText(t, ".error", "not valid", false)
	})

	t.Run("open a job and retry it", func(t *testing.T) {
		b.open(t, s.base+"/jobs?q="+"kind:billing.charge+payload.order:1001")
		b.click(t, "table.jobs tbody tr td a")
		b.waitText(t, "main h1", dead.String(), false)
		b.waitText(t, "ol.timeline", "card gateway answered 502 for order 1001", false)
		b.waitText(t, "#payload", "ada@example.com", false)
		b.waitText(t, "table.steps", "lookup-customer", false)
		s.state.fixed.Store(true) // the "deploy" that fixes the handler
		b.click(t, "#retry")
		b.waitText(t, ".flash", "Retried 1 job", false)
		b.waitText(t, "section.job dl.facts", "completed", true)
		b.waitText(t, "ol.timeline", "charged order 1001", true)
		shot(t, b, "job")
	})

	t.Run("bulk retry of the dead jobs", func(t *testing.T) {
		b.open(t, s.base+"/dead")
		b.waitText(t, "table.jobs tbody", "billing.charge", false)
		shot(t, b, "dead")
		b.click(t, "a.button.primary")
		if got := b.text(t, "#eligible"); got != "3" {
			t.Fatalf("the dry run counts %q eligible jobs, want 3", got)
		}
		b.do(t, chromedp.SendKeys(chromedp.CSS(`input[name="reason"]`), "gateway fixed"))
		shot(t, b, "bulk")
		b.click(t, "#confirm")
		b.waitText(t, ".flash", "Retried 3 jobs", false)
		for _, id := range deadMore {
			b.open(t, s.base+"/jobs/"+id)
			b.waitText(t, "section.job dl.facts", "completed", true)
		}
	})

	t.Run("pause a queue", func(t *testing.T) {
		b.open(t, s.base+"/queues")
		b.click(t, `tr[data-queue="batch"] form[action$="/queues/pause"] button`)
		b.waitText(t, ".flash", "Queue paused", false)
		// The pause is committed: jobs enqueued now are not started, while the worker keeps
		// starting the default queue's jobs.
		held := s.enqueue(t, work{N: 500})
		for i := range 3 {
			p := s.enqueue(t, probe{N: i})
			s.awaitJob(t, p, "a probe of the default queue to complete", func(j *venturi.Job) bool { return j.State == venturi.StateCompleted })
		}
		s.awaitStats(t)
		if j, err := s.q.Job(ctx, held); err != nil || j.State != venturi.StateAvailable || j.RunCount != 0 {
			t.Fatalf("a job of the paused queue: %+v, %v; want it available and never run", j, err)
		}
		b.open(t, s.base+"/queues")
		b.waitText(t, `tr[data-queue="batch"]`, "paused", true)
		shot(t, b, "queues")
		b.open(t, s.base+"/jobs/"+held.String())
		b.waitText(t, "ul.reasons", "paused", false)
		b.open(t, s.base+"/queues")
		b.click(t, `tr[data-queue="batch"] form[action$="/queues/resume"] button`)
		b.waitText(t, ".flash", "Queue resumed", false)
		s.awaitJob(t, held, "the held job to run after the resume", func(j *venturi.Job) bool { return j.State == venturi.StateCompleted })
	})

	t.Run("cron", func(t *testing.T) {
		b.open(t, s.base+"/cron")
		b.waitText(t, "table.cron", "nightly-report", false)
		b.click(t, `form[action$="/cron/pause"] button`)
		b.waitText(t, "table.cron", "paused", false)
		shot(t, b, "cron")
	})

	t.Run("breakers", func(t *testing.T) {
		b.open(t, s.base+"/breakers")
		b.waitText(t, "table.breakers", "feeds.example.org", true)
		b.waitText(t, "table.breakers", "open", true)
		shot(t, b, "breakers")
		b.click(t, `form[action$="/breakers/reset"] button`)
		b.waitText(t, ".flash", "Circuit breaker closed", false)
	})

	t.Run("audit log", func(t *testing.T) {
		b.open(t, s.base+"/audit")
		for _, want := range []string{"jobs.retry", "queue.pause", "queue.resume", "cron.pause", "circuit.reset", actor, "gateway fixed"} {
			b.waitText(t, "table.audit", want, true)
		}
		shot(t, b, "audit")
	})

	b.noProblems(t)
}

package venturi_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// mergeCarry is mergeTask's carry.
type mergeCarry struct {
	Step int `json:"step"`
}

// mergeSeen captures what a Merge method was shown.
type mergeSeen struct {
	calls   int
	pending venturi.Pending[mergeTask, mergeCarry]
}

// mergeTask decides its merge from its payload: Mode "keep", "replace", "with" (union the
// items, step the carry) or "independent".
type mergeTask struct {
	Key   string     `json:"key"`
	Mode  string     `json:"mode"`
	Items []string   `json:"items"`
	Seen  *mergeSeen `json:"-"`
}

func (mergeTask) Kind() string                 { return "merge" }
func (m mergeTask) DedupKey() venturi.DedupKey { return venturi.KeyOf("merge", m.Key) }

func (m mergeTask) Merge(existing venturi.Pending[mergeTask, mergeCarry]) venturi.Merge[mergeTask, mergeCarry] {
	if m.Seen != nil {
		m.Seen.calls++
		m.Seen.pending = existing
	}
	switch m.Mode {
	case "keep":
		return existing.Keep()
	case "replace":
		return existing.Replace()
	case "with":
		items := slices.Clone(existing.Payload.Items)
		for _, it := range m.Items {
			if !slices.Contains(items, it) {
				items = append(items, it)
			}
		}
		return existing.With(mergeTask{Key: m.Key, Mode: "with", Items: items}, mergeCarry{Step: existing.Carry.Step + 1})
	case "independent":
		return existing.Independent()
	}
	panic("mergeTask: unknown mode " + m.Mode)
}

// mergeApp drives mergeTask's handler: the first run sets the carry's step to 7 and
// pauses for an hour; later runs report what they saw and complete.
type mergeApp struct {
	runs chan mergeRun
}

type mergeRun struct {
	run   int
	items []string
	carry mergeCarry
	hist  []venturi.JournalEntry
}

func (m mergeTask) Handle(ctx context.Context, run *venturi.Run[mergeCarry], app *mergeApp) (venturi.Outcome, error) {
	app.runs <- mergeRun{run: run.RunCount(), items: m.Items, carry: run.Carry(), hist: run.History()}
	if run.RunCount() == 1 {
		run.CarryMut().Step = 7
		return venturi.PauseInWith(time.Hour, "waiting for more"), nil
	}
	return venturi.CompletedWith(fmt.Sprintf("items %v at step %d", m.Items, run.Carry().Step)), nil
}

func checkMergedEntry(t *testing.T, j *venturi.Job, wantEntries int, decision string) {
	t.Helper()
	if len(j.Journal) != wantEntries {
		t.Fatalf("journal has %d entries, want %d: %+v", len(j.Journal), wantEntries, j.Journal)
	}
	e := lastEntry(j)
	if e.Event != venturi.EventMerged || e.Merge != decision || e.At.IsZero() || e.Run != 0 {
		t.Fatalf("last journal entry = %+v, want a merged entry with decision %q", e, decision)
	}
}

func TestMergeDecisions(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	payload := func(id ulid.ULID) (mergeTask, mergeCarry, *venturi.Job) {
		t.Helper()
		j := jobByID(t, q, id)
		var p mergeTask
		var c mergeCarry
		decodePayload(t, j, &p)
		decodeCarry(t, j, &c)
		return p, c, j
	}

	first := enqueue(t, q, mergeTask{Key: "a", Mode: "first", Items: []string{"x"}})
	if first.Action != venturi.ActionInserted {
		t.Fatalf("first enqueue: %v", first.Action)
	}

	// Keep: nothing but the journal changes; Merge saw the stored payload.
	seen := &mergeSeen{}
	r := enqueue(t, q, mergeTask{Key: "a", Mode: "keep", Items: []string{"y"}, Seen: seen})
	if r.Action != venturi.ActionKept || r.ID != first.ID {
		t.Fatalf("keep: %+v, want kept into %s", r, first.ID)
	}
	if seen.calls != 1 || seen.pending.ID != first.ID || !slices.Equal(seen.pending.Payload.Items, []string{"x"}) ||
		seen.pending.Payload.Mode != "first" || seen.pending.RunCount != 0 || len(seen.pending.Journal) != 0 {
		t.Fatalf("keep: merge saw %+v", seen)
	}
	p, c, j := payload(first.ID)
	if p.Mode != "first" || !slices.Equal(p.Items, []string{"x"}) || c != (mergeCarry{}) || !carryIsZero(j.Carry) {
		t.Fatalf("keep changed the job: payload %+v carry %s", p, j.Carry)
	}
	checkMergedEntry(t, j, 1, "keep")
	if !strings.Contains(lastEntry(j).Note, "merged enqueue") {
		t.Errorf("merged entry note = %q", lastEntry(j).Note)
	}

	// With: a computed payload and carry; Merge saw the journal with the keep entry.
	seen = &mergeSeen{}
	r = enqueue(t, q, mergeTask{Key: "a", Mode: "with", Items: []string{"z", "x"}, Seen: seen})
	if r.Action != venturi.ActionMerged || r.ID != first.ID {
		t.Fatalf("with: %+v", r)
	}
	if len(seen.pending.Journal) != 1 || seen.pending.Journal[0].Event != venturi.EventMerged || seen.pending.Journal[0].Merge != "keep" {
		t.Fatalf("with: merge saw journal %+v", seen.pending.Journal)
	}
	p, c, j = payload(first.ID)
	if p.Mode != "with" || !slices.Equal(p.Items, []string{"x", "z"}) || c.Step != 1 {
		t.Fatalf("with: payload %+v carry %+v", p, c)
	}
	checkMergedEntry(t, j, 2, "with")

	// With again: Merge sees the carry the previous With stored.
	seen = &mergeSeen{}
	r = enqueue(t, q, mergeTask{Key: "a", Mode: "with", Items: []string{"w"}, Seen: seen})
	if r.Action != venturi.ActionMerged || seen.pending.Carry.Step != 1 {
		t.Fatalf("second with: %+v, merge saw carry %+v", r, seen.pending.Carry)
	}
	p, c, j = payload(first.ID)
	if !slices.Equal(p.Items, []string{"x", "z", "w"}) || c.Step != 2 {
		t.Fatalf("second with: payload %+v carry %+v", p, c)
	}
	checkMergedEntry(t, j, 3, "with")

	// Replace: the incoming payload, the carry back to its zero value.
	r = enqueue(t, q, mergeTask{Key: "a", Mode: "replace", Items: []string{"r"}})
	if r.Action != venturi.ActionReplaced || r.ID != first.ID {
		t.Fatalf("replace: %+v", r)
	}
	p, _, j = payload(first.ID)
	if p.Mode != "replace" || !slices.Equal(p.Items, []string{"r"}) || !carryIsZero(j.Carry) {
		t.Fatalf("replace: payload %+v carry %s, want the new payload and a zero carry", p, j.Carry)
	}
	checkMergedEntry(t, j, 4, "replace")
	if j.State != venturi.StateAvailable || j.RunCount != 0 {
		t.Fatalf("replace: state %s runs %d", j.State, j.RunCount)
	}

	// Independent: a second row with the key and a new ID; the first is untouched.
	r = enqueue(t, q, mergeTask{Key: "a", Mode: "independent", Items: []string{"i"}})
	if r.Action != venturi.ActionIndependent || r.ID == first.ID {
		t.Fatalf("independent: %+v", r)
	}
	indep := r.ID
	p, _, j = payload(indep)
	if p.Mode != "independent" || len(j.Journal) != 0 || j.DedupKey != "merge/a" || j.State != venturi.StateAvailable {
		t.Fatalf("independent job = %+v payload %+v", j, p)
	}
	if _, _, j = payload(first.ID); len(j.Journal) != 4 {
		t.Fatalf("independent touched the first job's journal: %+v", j.Journal)
	}
	if n := countJobs(t, pool, "dedup_key = 'merge/a'"); n != 2 {
		t.Fatalf("%d rows with the key, want 2", n)
	}

	// The next collision merges into the newest pending job.
	seen = &mergeSeen{}
	r = enqueue(t, q, mergeTask{Key: "a", Mode: "keep", Seen: seen})
	if r.Action != venturi.ActionKept || r.ID != indep || seen.pending.ID != indep {
		t.Fatalf("keep after independent: %+v (merge saw %s), want the newest job %s", r, seen.pending.ID, indep)
	}

	// Other keys never collide.
	if r = enqueue(t, q, mergeTask{Key: "b", Mode: "keep"}); r.Action != venturi.ActionInserted {
		t.Fatalf("other key: %v", r.Action)
	}
	// Nor do scheduled jobs of another key; but a scheduled job of the key is a candidate.
	sched := enqueue(t, q, mergeTask{Key: "s", Mode: "first", Items: []string{"1"}}, venturi.After(time.Hour))
	r = enqueue(t, q, mergeTask{Key: "s", Mode: "keep"})
	if r.Action != venturi.ActionKept || r.ID != sched.ID {
		t.Fatalf("keep into a scheduled job: %+v", r)
	}
	if j := jobByID(t, q, sched.ID); j.State != venturi.StateScheduled {
		t.Fatalf("keep made a scheduled job %s", j.State)
	}
	// Replace never delays: the merged job is due at the earlier of the two times.
	r = enqueue(t, q, mergeTask{Key: "s", Mode: "replace"})
	if j := jobByID(t, q, sched.ID); r.Action != venturi.ActionReplaced || j.State != venturi.StateAvailable {
		t.Fatalf("replace into a scheduled job: %v, state %s, want available now", r.Action, j.State)
	}
}

// defaultMergeTask has a dedup key but no Merge method: a collision replaces.
type defaultMergeTask struct {
	Key string `json:"key"`
	V   int    `json:"v"`
}

type defaultMergeCarry struct {
	N int `json:"n"`
}

func (defaultMergeTask) Kind() string                 { return "default-merge" }
func (d defaultMergeTask) DedupKey() venturi.DedupKey { return venturi.KeyOf(d.Key) }

// Handle sets the carry and pauses on its first run; later runs report payload and carry.
func (d defaultMergeTask) Handle(ctx context.Context, run *venturi.Run[defaultMergeCarry], seen chan<- string) (venturi.Outcome, error) {
	if run.RunCount() == 1 {
		run.SetCarry(defaultMergeCarry{N: 5})
		seen <- "paused"
		return venturi.PauseIn(time.Hour), nil
	}
	seen <- fmt.Sprintf("v=%d carry=%d", d.V, run.Carry().N)
	return venturi.Completed(), nil
}

func TestMergeDefaultsToReplace(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	seen := make(chan string, 10)
	startWorkerFor[defaultMergeTask](t, pool, (chan<- string)(seen), fastConfig())

	first := enqueue(t, q, defaultMergeTask{Key: "d", V: 1})
	if got := recv(t, seen, "the first run"); got != "paused" {
		t.Fatal(got)
	}
	j := waitJob(t, q, first.ID, "paused for an hour", func(j *venturi.Job) bool { return j.State == venturi.StateScheduled })
	var c defaultMergeCarry
	decodeCarry(t, j, &c)
	if c.N != 5 || eventsOf(j) != "paused" {
		t.Fatalf("paused job: carry %s, journal %s", j.Carry, eventsOf(j))
	}
	r := enqueue(t, q, defaultMergeTask{Key: "d", V: 2})
	if r.Action != venturi.ActionReplaced || r.ID != first.ID {
		t.Fatalf("collision without a Merge method: %+v, want replaced into %s", r, first.ID)
	}
	// Replacing made it due now with a reset carry; the worker runs the new payload.
	if got := recv(t, seen, "the run after the replace"); got != "v=2 carry=0" {
		t.Fatalf("run after replace saw %q, want the new payload and a zero carry", got)
	}
	j = waitState(t, q, first, venturi.StateCompleted)
	if eventsOf(j) != "paused,merged,completed" || j.Journal[1].Merge != "replace" || j.RunCount != 2 {
		t.Fatalf("journal %s (%+v), runs %d", eventsOf(j), j.Journal, j.RunCount)
	}
}

func TestMergeIntoPausedJobThatRan(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	app := &mergeApp{runs: make(chan mergeRun, 10)}
	w := startWorkerFor[mergeTask](t, pool, app, fastConfig())

	first := enqueue(t, q, mergeTask{Key: "p", Mode: "first", Items: []string{"a"}})
	if run := recv(t, app.runs, "the first run"); run.run != 1 {
		t.Fatalf("first run = %+v", run)
	}
	waitJob(t, q, first.ID, "paused", func(j *venturi.Job) bool { return j.State == venturi.StateScheduled })

	seen := &mergeSeen{}
	r := enqueue(t, q, mergeTask{Key: "p", Mode: "with", Items: []string{"b"}, Seen: seen})
	if r.Action != venturi.ActionMerged || r.ID != first.ID {
		t.Fatalf("merge into a paused job: %+v", r)
	}
	pend := seen.pending
	if pend.RunCount != 1 || pend.Carry.Step != 7 || pend.Failures != 0 || len(pend.Journal) != 1 ||
		pend.Journal[0].Event != venturi.EventPaused || pend.Journal[0].Note != "waiting for more" || pend.Journal[0].Run != 1 ||
		pend.Journal[0].Worker != w.ID() {
		t.Fatalf("merge saw %+v", pend)
	}
	// With made the job due again; its next run continues from the merged carry.
	run := recv(t, app.runs, "the run after the merge")
	if run.run != 2 || run.carry.Step != 8 || !slices.Equal(run.items, []string{"a", "b"}) || len(run.hist) != 2 ||
		run.hist[1].Event != venturi.EventMerged {
		t.Fatalf("run after merge = %+v", run)
	}
	j := waitState(t, q, first, venturi.StateCompleted)
	if eventsOf(j) != "paused,merged,completed" || j.RunCount != 2 || lastEntry(j).Note != "items [a b] at step 8" {
		t.Fatalf("journal %+v", j.Journal)
	}
	// A completed job is no merge candidate: the next enqueue inserts.
	r = enqueue(t, q, mergeTask{Key: "p", Mode: "keep", Items: []string{"c"}})
	if r.Action != venturi.ActionInserted || r.ID == first.ID {
		t.Fatalf("enqueue after completion: %+v", r)
	}
}

// ptrMergeTask declares Merge on its pointer.
type ptrMergeTask struct {
	V int `json:"v"`
}

func (ptrMergeTask) Kind() string               { return "ptr-merge" }
func (ptrMergeTask) DedupKey() venturi.DedupKey { return "p" }
func (p *ptrMergeTask) Merge(existing venturi.Pending[ptrMergeTask, struct{}]) venturi.Merge[ptrMergeTask, struct{}] {
	return existing.With(ptrMergeTask{V: existing.Payload.V + p.V}, struct{}{})
}

func TestMergeMethodOnPointerReceiver(t *testing.T) {
	t.Parallel()
	_, q := newQueue(t)
	first := enqueue(t, q, ptrMergeTask{V: 1})
	for _, task := range []venturi.Task{ptrMergeTask{V: 10}, &ptrMergeTask{V: 100}} {
		r := enqueue(t, q, task)
		if r.Action != venturi.ActionMerged || r.ID != first.ID {
			t.Fatalf("enqueue %T: %+v, want merged by the pointer-receiver Merge", task, r)
		}
	}
	var p ptrMergeTask
	decodePayload(t, jobByID(t, q, first.ID), &p)
	if p.V != 111 {
		t.Fatalf("payload %+v, want V=111", p)
	}
}

// badWithTask's With changes the dedup key, which a merge must not do.
type badWithTask struct {
	Key string `json:"key"`
}

func (badWithTask) Kind() string                 { return "bad-with" }
func (b badWithTask) DedupKey() venturi.DedupKey { return venturi.DedupKey(b.Key) }
func (b badWithTask) Merge(existing venturi.Pending[badWithTask, struct{}]) venturi.Merge[badWithTask, struct{}] {
	return existing.With(badWithTask{Key: b.Key + "-moved"}, struct{}{})
}

// noDecisionTask's Merge returns the zero Merge.
type noDecisionTask struct{}

func (noDecisionTask) Kind() string               { return "no-decision" }
func (noDecisionTask) DedupKey() venturi.DedupKey { return "n" }
func (noDecisionTask) Merge(existing venturi.Pending[noDecisionTask, struct{}]) venturi.Merge[noDecisionTask, struct{}] {
	return venturi.Merge[noDecisionTask, struct{}]{}
}

func TestMergeErrorsWriteNothing(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	for _, task := range []venturi.Task{badWithTask{Key: "a"}, noDecisionTask{}} {
		first := enqueue(t, q, task)
		if _, err := q.Enqueue(context.Background(), task); err == nil {
			t.Fatalf("%s: a bad merge decision was accepted", task.Kind())
		}
		if j := jobByID(t, q, first.ID); len(j.Journal) != 0 {
			t.Fatalf("%s: a refused merge wrote %+v", task.Kind(), j.Journal)
		}
	}
	if n := countJobs(t, pool, "true"); n != 2 {
		t.Fatalf("%d rows, want 2", n)
	}
}

// ruleKeep keeps the pending job by a MergeRule; ruleBoth also has a Merge method;
// ruleNone returns the zero rule; ruleNegative a negative debounce.
type (
	ruleKeep     struct{ V int }
	ruleBoth     struct{}
	ruleNone     struct{}
	ruleNegative struct{}
)

func (ruleKeep) Kind() string                 { return "rule_keep" }
func (ruleKeep) DedupKey() venturi.DedupKey   { return "k" }
func (ruleKeep) MergeRule() venturi.MergeRule { return venturi.KeepPending() }
func (ruleBoth) Kind() string                 { return "rule_both" }
func (ruleBoth) MergeRule() venturi.MergeRule { return venturi.KeepPending() }
func (ruleNone) Kind() string                 { return "rule_none" }
func (ruleNone) MergeRule() venturi.MergeRule { return venturi.MergeRule{} }
func (ruleNegative) Kind() string             { return "rule_negative" }
func (ruleNegative) MergeRule() venturi.MergeRule {
	return venturi.ReplacePending().Debounce(-time.Second, 0)
}
func (ruleBoth) Merge(existing venturi.Pending[ruleBoth, struct{}]) venturi.Merge[ruleBoth, struct{}] {
	return existing.Keep()
}

// TestMergeRuleInGo: a MergeRule decides a Go enqueue's collision as a Merge method
// returning it would (KeepPending: the job and its due time stay, a merged keep entry);
// its due-time methods apply; a type with both a rule and a Merge method, the zero rule,
// or a negative debounce is refused at Register.
func TestMergeRuleInGo(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	first := enqueue(t, q, ruleKeep{V: 1}, venturi.After(time.Hour))
	second := enqueue(t, q, ruleKeep{V: 2})
	j := jobByID(t, q, first.ID)
	var p ruleKeep
	decodePayload(t, j, &p)
	if second.ID != first.ID || second.Action != venturi.ActionKept || p.V != 1 || j.State != venturi.StateScheduled ||
		lastEntry(j).Merge != "keep" || lastEntry(j).Due != "keep" {
		t.Fatalf("keep rule: %+v, %+v, %s, %+v", second, p, j.State, lastEntry(j))
	}
	if r := venturi.ReplacePending().Throttle(); r.Decision() != venturi.ActionReplaced || r.Due().Policy != venturi.DueKeep {
		t.Errorf("ReplacePending().Throttle() = %v %v", r.Decision(), r.Due())
	}
	if r := venturi.KeepPending().Earliest(); r.Due().Policy != venturi.DueEarliest {
		t.Errorf("KeepPending().Earliest() = %v", r.Due())
	}
	w := newWorker(t, pool, struct{}{}, fastConfig())
	run := func(ctx context.Context, _ *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
		return venturi.Completed(), nil
	}
	for _, tt := range []struct {
		name string
		err  error
		want string
	}{
		{"both", venturi.RegisterFunc(w, func(ctx context.Context, _ ruleBoth, r *venturi.Run[struct{}], s struct{}) (venturi.Outcome, error) {
			return run(ctx, r, s)
		}), "both a Merge and a MergeRule"},
		{"zero", venturi.RegisterFunc(w, func(ctx context.Context, _ ruleNone, r *venturi.Run[struct{}], s struct{}) (venturi.Outcome, error) {
			return run(ctx, r, s)
		}), "returned no rule"},
		{"negative", venturi.RegisterFunc(w, func(ctx context.Context, _ ruleNegative, r *venturi.Run[struct{}], s struct{}) (venturi.Outcome, error) {
			return run(ctx, r, s)
		}), "negative duration"},
	} {
		if tt.err == nil || !strings.Contains(tt.err.Error(), tt.want) {
			t.Errorf("%s: Register = %v, want %q", tt.name, tt.err, tt.want)
		}
	}
}

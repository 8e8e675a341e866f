package venturi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"strings"
	"time"

	"github.com/venturi-dev/venturi"
)

// ImportStep is one step of an import: fetch, parse, index, notify. A file named "bad"
// does not parse.
type ImportStep struct {
	Step string `json:"step"`
	File string `json:"file"`
}

// Kind names the task.
func (ImportStep) Kind() string { return "import-step" }

// Handle does the step.
func (s ImportStep) Handle(_ context.Context, _ *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	if s.Step == "parse" && s.File == "bad" {
		return venturi.Outcome{}, venturi.Permanent(errors.New("not a CSV file"))
	}
	return venturi.CompletedWith(s.Step + " " + s.File), nil
}

// Two imports as workflows: fetch, then parse, then index; a compensation runs when a
// step fails, and a report once the index step ended, however. The bad file's index step
// is cancelled without a run, since what it needs failed.
func ExampleQueue_EnqueueWorkflow() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()

	w, err := venturi.NewWorker(pool, struct{}{}, venturi.Config{
		PollInterval:        10 * time.Millisecond,
		MaintenanceInterval: 10 * time.Millisecond,
		Logger:              slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	venturi.MustRegister[ImportStep](w)
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(context.Background())

	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	for _, file := range []string{"good", "bad"} {
		wf := venturi.NewWorkflow("import "+file, venturi.WorkflowKey("import/"+file))
		fetch := wf.Add("fetch", ImportStep{Step: "fetch", File: file})
		parse := wf.Add("parse", ImportStep{Step: "parse", File: file}, venturi.Needs(fetch))
		index := wf.Add("index", ImportStep{Step: "index", File: file}, venturi.Needs(parse))
		wf.Add("undo", ImportStep{Step: "undo", File: file}, venturi.NeedsFailure(fetch, parse, index))
		wf.Add("report", ImportStep{Step: "report", File: file}, venturi.NeedsEnded(index))
		res, err := q.EnqueueWorkflow(ctx, wf)
		if err != nil {
			log.Fatal(err)
		}
		actx, cancel := context.WithTimeout(ctx, exampleWithin)
		info, err := q.AwaitWorkflow(actx, res.ID) // notified when it finishes
		cancel()
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("import %s: %s\n", file, info.State)
		nodes, err := q.WorkflowNodes(ctx, res.ID, "", 100)
		if err != nil {
			log.Fatal(err)
		}
		for _, n := range nodes { // in name order
			fmt.Printf("  %-6s %-9s %s\n", n.Name, n.JobState, n.Own)
		}
	}
	// Output:
	// import good: succeeded
	//   fetch  completed ok
	//   index  completed ok
	//   parse  completed ok
	//   report completed ok
	//   undo   cancelled skip
	// import bad: failed
	//   fetch  completed ok
	//   index  cancelled dfail
	//   parse  dead      fail
	//   report completed ok
	//   undo   completed ok
}

// CountWords counts the words of one page and outputs the count.
type CountWords struct {
	Page string `json:"page"`
}

// Kind names the task.
func (CountWords) Kind() string { return "count-words" }

// Handle outputs the page's word count for the nodes downstream.
func (c CountWords) Handle(_ context.Context, r *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	return venturi.Completed(), r.SetOutput(len(strings.Fields(c.Page)))
}

// SplitBook fans out at run time: one CountWords node per page, spawned with its
// completion.
type SplitBook struct {
	Text string `json:"text"`
}

// Kind names the task.
func (SplitBook) Kind() string { return "split-book" }

// Handle spawns a node per page.
func (b SplitBook) Handle(ctx context.Context, r *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	pages := venturi.NewWorkflow("")
	for i, page := range strings.Split(b.Text, "|") {
		pages.Add(fmt.Sprintf("page-%d", i+1), CountWords{Page: page})
	}
	if _, err := r.Spawn(ctx, pages); err != nil {
		return venturi.Outcome{}, venturi.Permanent(err)
	}
	return venturi.Completed(), nil
}

// SumWords fans in: it reads the outputs upstream of it (every spawned page's) and
// outputs their sum.
type SumWords struct{}

// Kind names the task.
func (SumWords) Kind() string { return "sum-words" }

// Handle sums the pages' counts.
func (SumWords) Handle(ctx context.Context, r *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	outs, err := r.UpstreamOutputs(ctx)
	if err != nil {
		return venturi.Outcome{}, err
	}
	total := 0
	for _, b := range outs {
		var n int
		if err := json.Unmarshal(b, &n); err != nil {
			return venturi.Outcome{}, venturi.Permanent(err)
		}
		total += n
	}
	return venturi.Completed(), r.SetOutput(total)
}

// Fan-out at run time and fan-in on the results: split spawns a node per page, and sum,
// which needs split, waits for every page it spawned, then reads their outputs.
func ExampleRun_Spawn() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()

	w, err := venturi.NewWorker(pool, struct{}{}, venturi.Config{
		PollInterval:        10 * time.Millisecond,
		MaintenanceInterval: 10 * time.Millisecond,
		Logger:              slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	venturi.MustRegister[SplitBook](w)
	venturi.MustRegister[CountWords](w)
	venturi.MustRegister[SumWords](w)
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(context.Background())

	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	wf := venturi.NewWorkflow("word count")
	split := wf.Add("split", SplitBook{Text: "call me Ishmael|some years ago|never mind how long precisely"})
	wf.Add("sum", SumWords{}, venturi.Needs(split))
	res, err := q.EnqueueWorkflow(ctx, wf)
	if err != nil {
		log.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, exampleWithin)
	defer cancel()
	info, err := q.AwaitWorkflow(actx, res.ID)
	if err != nil {
		log.Fatal(err)
	}
	var total int
	if err := q.WorkflowOutput(ctx, res.ID, "sum", &total); err != nil {
		log.Fatal(err)
	}
	nodes, err := q.WorkflowNodes(ctx, res.ID, "", 100)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: %d words, %d nodes\n", info.State, total, len(nodes))
	for _, n := range nodes {
		fmt.Printf("  %-12s in %q\n", n.Name, n.In)
	}
	// Output:
	// succeeded: 11 words, 5 nodes
	//   split        in ""
	//   split/page-1 in "split"
	//   split/page-2 in "split"
	//   split/page-3 in "split"
	//   sum          in ""
}

// SendMail sends one message; the address "bounce@" fails.
type SendMail struct {
	To string `json:"to"`
}

// Kind names the task.
func (SendMail) Kind() string { return "send-mail" }

// Handle sends the message.
func (m SendMail) Handle(_ context.Context, _ *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	if m.To == "bounce@" {
		return venturi.Outcome{}, venturi.Permanent(errors.New("mailbox unavailable"))
	}
	return venturi.Completed(), nil
}

// MailReport is a batch's callback: it prints the counts it sees.
type MailReport struct {
	When string `json:"when"`
}

// Kind names the task.
func (MailReport) Kind() string { return "mail-report" }

// Handle prints the batch's counts.
func (m MailReport) Handle(ctx context.Context, r *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	info, err := r.Batch(ctx)
	if err != nil {
		return venturi.Outcome{}, err
	}
	fmt.Printf("%s: %d sent, %d failed, of %d\n", m.When, info.Succeeded, info.Failed, info.Total)
	return venturi.Completed(), nil
}

// A batch with callbacks: on_end runs once every member ended and sees exact counts;
// on_success does not run, since a member failed.
func ExampleQueue_EnqueueBatch() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()

	w, err := venturi.NewWorker(pool, struct{}{}, venturi.Config{
		PollInterval:        10 * time.Millisecond,
		MaintenanceInterval: 10 * time.Millisecond,
		Logger:              slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	venturi.MustRegister[SendMail](w)
	venturi.MustRegister[MailReport](w)
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(context.Background())

	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	b := venturi.NewBatch("newsletter",
		venturi.OnSuccess(MailReport{When: "all sent"}),
		venturi.OnEnd(MailReport{When: "done"}))
	for _, to := range []string{"ann@", "bob@", "bounce@", "cy@"} {
		b.Add(SendMail{To: to})
	}
	res, err := q.EnqueueBatch(ctx, b)
	if err != nil {
		log.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, exampleWithin)
	defer cancel()
	info, err := q.AwaitWorkflow(actx, res.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("batch:", info.State)
	// Output:
	// done: 3 sent, 1 failed, of 4
	// batch: failed
}

package venturi_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/venturi-dev/venturi"
)

// Publish waits for an editor's approval before it publishes an article.
type Publish struct {
	Article string `json:"article"`
}

// Kind names the task.
func (Publish) Kind() string { return "publish" }

// Approval is the payload of the "approve" signal.
type Approval struct {
	Editor string `json:"editor"`
}

// Handle waits for "approve" on its first run and publishes on the next.
func (p Publish) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	if _, waited := run.Waited(); !waited {
		return venturi.WaitForSignal(24*time.Hour, "approve"), nil
	}
	sigs, err := run.Signals(ctx, "approve")
	if err != nil {
		return venturi.Outcome{}, err
	}
	if len(sigs) == 0 {
		return venturi.Cancelled("nobody approved within a day"), nil
	}
	a, err := venturi.DecodeSignal[Approval](sigs[0])
	if err != nil {
		return venturi.Outcome{}, venturi.Permanent(err)
	}
	return venturi.CompletedWith(p.Article + " published, approved by " + a.Editor), nil
}

// A run can wait durably for a signal that any process sends.
func ExampleWaitForSignal() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()

	w, err := venturi.NewWorker(pool, struct{}{}, venturi.Config{PollInterval: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	venturi.MustRegister[Publish](w)
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(context.Background())

	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	res, _ := q.Enqueue(ctx, Publish{Article: "venturi 1.0"})
	j := awaitJob(q, res.ID, "the job to wait", func(j *venturi.Job) bool { return j.State == venturi.StateWaiting })
	fmt.Println(j.State)
	if _, err := q.Signal(ctx, res.ID, "approve", Approval{Editor: "ada"}, "review-1"); err != nil {
		log.Fatal(err)
	}
	fmt.Println(awaitFinished(q, res.ID).Journal[1].Note)
	// Output:
	// waiting
	// venturi 1.0 published, approved by ada
}

// Order is a handler of two steps; each runs once per job whatever happens between runs.
type Order struct {
	ID int `json:"id"`
}

// Kind names the task.
func (Order) Kind() string { return "order" }

// Handle reserves, checkpoints (a new run continues), then charges.
func (o Order) Handle(ctx context.Context, run *venturi.Run[struct{}], log *[]string) (venturi.Outcome, error) {
	seat, err := venturi.Step(ctx, run, "reserve", func(ctx context.Context) (string, error) {
		*log = append(*log, "reserved")
		return fmt.Sprintf("seat %d", o.ID), nil
	})
	if err != nil {
		return venturi.Outcome{}, err
	}
	if run.RunCount() == 1 {
		return venturi.PauseIn(0), nil // the next run skips "reserve"
	}
	total, err := venturi.Step(ctx, run, "charge", func(ctx context.Context) (int, error) {
		*log = append(*log, "charged")
		return 42, nil
	})
	if err != nil {
		return venturi.Outcome{}, err
	}
	return venturi.CompletedWith(fmt.Sprintf("%s, %d charged", seat, total)), nil
}

// Memoized steps: a rerun skips the steps that completed and reads their results.
func ExampleStep() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()

	var steps []string
	w, err := venturi.NewWorker(pool, &steps, venturi.Config{Concurrency: 1, PollInterval: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	venturi.MustRegister[Order](w)
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	res, _ := q.Enqueue(ctx, Order{ID: 9})
	j := awaitFinished(q, res.ID)
	_ = w.Stop(context.Background())
	fmt.Println(j.RunCount, "runs:", steps, "-", j.Journal[len(j.Journal)-1].Note)
	// Output:
	// 2 runs: [reserved charged] - seat 9, 42 charged
}

// A producer records an approval and signals the waiting job in one transaction: the job
// is woken only if the approval commits.
func ExampleQueue_SignalTx() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()
	if _, err := pool.Exec(ctx, `CREATE TABLE approval (article text, editor text)`); err != nil {
		log.Fatal(err)
	}
	w, err := venturi.NewWorker(pool, struct{}{}, venturi.Config{PollInterval: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	venturi.MustRegister[Publish](w)
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(context.Background())

	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	res, _ := q.Enqueue(ctx, Publish{Article: "venturi 1.1"})
	awaitJob(q, res.ID, "the job to wait", func(j *venturi.Job) bool { return j.State == venturi.StateWaiting })
	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO approval VALUES ('venturi 1.1', 'grace')`); err != nil {
		log.Fatal(err)
	}
	if _, err := q.SignalTx(ctx, tx, res.ID, "approve", Approval{Editor: "grace"}, "approval-1"); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println(awaitFinished(q, res.ID).Journal[1].Note)
	// Output:
	// venturi 1.1 published, approved by grace
}

// A producer deletes what a job works on and cancels the job in one transaction.
func ExampleQueue_CancelTx() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()
	if _, err := pool.Exec(ctx, `CREATE TABLE article (title text PRIMARY KEY); INSERT INTO article VALUES ('draft')`); err != nil {
		log.Fatal(err)
	}
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	res, _ := q.Enqueue(ctx, Publish{Article: "draft"}, venturi.After(time.Hour))
	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM article WHERE title = 'draft'`); err != nil {
		log.Fatal(err)
	}
	cr, err := q.CancelTx(ctx, tx, res.ID, "the article was deleted")
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
	j, _ := q.Job(ctx, res.ID)
	fmt.Println(cr, j.State, j.Journal[0].Note)
	// Output:
	// ended cancelled the article was deleted
}

package venturitest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/venturitest"
)

// Greet greets someone; Greeter is the worker state its handler uses.
type Greet struct {
	Name string `json:"name"`
}

type Greeter struct{ Greeting string }

func (Greet) Kind() string { return "greet" }

func (g Greet) Handle(_ context.Context, _ *venturi.Run[struct{}], gr *Greeter) (venturi.Outcome, error) {
	if g.Name == "" {
		return venturi.Outcome{}, venturi.Permanentf("nobody to greet")
	}
	return venturi.CompletedWith(gr.Greeting + ", " + g.Name), nil
}

func ExampleRunHandler() {
	ctx := context.Background()
	gr := &Greeter{Greeting: "Hello"}

	res := venturitest.RunHandler(ctx, Greet{Name: "Ada"}, gr, venturitest.RunOptions[struct{}]{})
	fmt.Println(res.Event(), res.Note())

	res = venturitest.RunHandler(ctx, Greet{}, gr, venturitest.RunOptions[struct{}]{})
	fmt.Println(res.Event(), res.Note(), res.IsPermanent())
	// Output:
	// completed Hello, Ada
	// dead nobody to greet true
}

// Backfill copies rows in batches, checkpointing its position in the carry.
type Backfill struct {
	Total int `json:"total"`
}

type BackfillCarry struct {
	Next int `json:"next"`
}

func (Backfill) Kind() string { return "backfill" }

func backfill(_ context.Context, b Backfill, run *venturi.Run[BackfillCarry], batch int) (venturi.Outcome, error) {
	c := run.CarryMut()
	c.Next = min(c.Next+batch, b.Total)
	if c.Next < b.Total {
		return venturi.PauseInWith(0, fmt.Sprintf("copied %d of %d", c.Next, b.Total)), nil
	}
	return venturi.CompletedWith("backfill done"), nil
}

// A multi-step handler is tested one run at a time: each run starts from the carry the
// previous one left, as the worker would persist it.
func ExampleRunFunc() {
	ctx := context.Background()
	opts := venturitest.RunOptions[BackfillCarry]{}
	for {
		res := venturitest.RunFunc(ctx, backfill, Backfill{Total: 250}, 100, opts)
		fmt.Printf("run %d: %s %q, carry %+v\n", max(opts.RunCount, 1), res.Event(), res.Note(), res.Carry)
		if res.Event() != venturi.EventPaused {
			break
		}
		opts.Carry, opts.RunCount = res.Carry, max(opts.RunCount, 1)+1
	}
	// Output:
	// run 1: paused "copied 100 of 250", carry {Next:100}
	// run 2: paused "copied 200 of 250", carry {Next:200}
	// run 3: completed "backfill done", carry {Next:250}
}

// Approve waits for the signal "approve"; the run after the wait completes with the
// approver, or cancels when the wait timed out.
type Approve struct{}

type Approver struct {
	Name string `json:"name"`
}

func (Approve) Kind() string { return "approve" }

func (Approve) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	if _, waited := run.Waited(); !waited {
		return venturi.WaitForSignal(time.Hour, "approve"), nil
	}
	sigs, err := run.Signals(ctx, "approve")
	if err != nil || len(sigs) == 0 {
		return venturi.Cancelled("nobody approved"), err
	}
	a, err := venturi.DecodeSignal[Approver](sigs[0])
	if err != nil {
		return venturi.Outcome{}, venturi.Permanent(err)
	}
	return venturi.CompletedWith("approved by " + a.Name), nil
}

// The run after a wait, with the signal that woke it and without (the timeout passed).
func ExampleRunOptions_signals() {
	ctx := context.Background()
	res := venturitest.RunHandler(ctx, Approve{}, struct{}{}, venturitest.RunOptions[struct{}]{
		Waited:  []string{"approve"},
		Signals: []venturi.Signal{venturitest.SignalOf("approve", Approver{Name: "ada"}, "mail-1")},
	})
	fmt.Println(res.Event(), res.Note(), len(res.Consumed))

	res = venturitest.RunHandler(ctx, Approve{}, struct{}{}, venturitest.RunOptions[struct{}]{Waited: []string{"approve"}})
	fmt.Println(res.Outcome.IsCancel(), res.Note())
	// Output:
	// completed approved by ada 1
	// true nobody approved
}

package venturitest_test

import (
	"context"
	"fmt"

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

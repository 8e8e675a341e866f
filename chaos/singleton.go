package main

import (
	"context"
	"fmt"
	"time"

	"github.com/venturi-dev/venturi"
)

// singletonKind is the kind of the chaos suite's supervised singleton. The driver never
// enqueues it: every worker ensures its one job at Start (again after each restart), so a
// run with ~100 kills ensures it ~100 times.
const singletonKind = "chaos.singleton"

// SingletonService is a supervised singleton that works in runs of 0.5-1.5 s (ticks of
// 50 ms, each checkpointed in its carry), completes, and is restarted 100 ms later
// (RestartAlways); at shutdown it hands over (PauseIn(0)). Kills cut its runs, and another
// worker takes it over. Its invariant (singletoncheck.go): at most one live job, and no two
// of its runs overlap by the journal's times.
type SingletonService struct{}

// SingletonCarry is the service's checkpoint.
type SingletonCarry struct {
	Ticks int `json:"ticks"`
}

// Kind implements venturi.Task.
func (SingletonService) Kind() string { return singletonKind }

// Singleton declares the service.
func (SingletonService) Singleton() venturi.Singleton {
	return venturi.Singleton{Restart: venturi.RestartAlways, Delay: 100 * time.Millisecond}
}

// Handle runs one stretch of the service.
func (SingletonService) Handle(ctx context.Context, run *venturi.Run[SingletonCarry], _ App) (venturi.Outcome, error) {
	c := run.CarryMut()
	ticks := 10 + (run.RunCount()*7)%21
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for range ticks {
		select {
		case <-run.Shutdown():
			return venturi.PauseInWith(0, fmt.Sprintf("handover at tick %d", c.Ticks)), nil
		case <-ctx.Done():
			return venturi.Outcome{}, ctx.Err()
		case <-tick.C:
		}
		c.Ticks++
		if err := run.Checkpoint(ctx); err != nil {
			return venturi.Outcome{}, err
		}
	}
	return venturi.CompletedWith(fmt.Sprintf("stretch done at tick %d", c.Ticks)), nil
}

package venturi_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/venturi-dev/venturi"
)

// gatedDone is a handler that completes when the test closes its channel.
type gatedDone struct{}

func (gatedDone) Kind() string { return "gated-done" }

type gatedDoneState struct {
	started chan struct{}
	release chan struct{}
}

func (gatedDone) Handle(ctx context.Context, run *venturi.Run[struct{}], s gatedDoneState) (venturi.Outcome, error) {
	s.started <- struct{}{}
	<-s.release
	return venturi.CompletedWith("done during the outage"), nil
}

// logWatch is a slog handler that hands the messages of warnings to a channel.
type logWatch struct{ msgs chan string }

func (l logWatch) Enabled(_ context.Context, lvl slog.Level) bool { return lvl >= slog.LevelWarn }
func (l logWatch) Handle(_ context.Context, r slog.Record) error {
	select {
	case l.msgs <- r.Message:
	default:
	}
	return nil
}
func (l logWatch) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l logWatch) WithGroup(string) slog.Handler      { return l }

// TestResultOfARunThatEndedInAnOutageLongerThanTheLeaseIsWritten: a run ends while the
// database is unreachable (connections reset, new ones refused, as during a restart) for
// longer than the lease. Its result is written when the database is back: the job is
// completed by that run, not rescued as abandoned (a failure) and run again: a completer
// that gave up once the worker's estimate of the lease ran out would fail it (the chaos
// suite's "abandoned runs after a long restart").
func TestResultOfARunThatEndedInAnOutageLongerThanTheLeaseIsWritten(t *testing.T) {
	slow(t)
	t.Parallel()
	ctx := context.Background()
	direct := newDB(t)
	q := venturi.NewQueue(direct, venturi.QueueConfig{})

	viaProxy, proxy := proxiedPool(t, direct)

	st := gatedDoneState{started: make(chan struct{}, 1), release: make(chan struct{})}
	warnings := make(chan string, 1024)
	wcfg := fastConfig()
	wcfg.Lease = 2 * time.Second
	wcfg.Logger = slog.New(logWatch{msgs: warnings})
	w := newWorker(t, viaProxy, st, wcfg)
	venturi.MustRegister[gatedDone](w)
	startWorker(t, w)

	r, err := q.Enqueue(ctx, gatedDone{})
	if err != nil {
		t.Fatal(err)
	}
	recv(t, st.started, "the run to start")

	proxy.Down()
	close(st.release) // the run ends; its result cannot be written
	// Wait until the lease has expired by the database's clock (the worker's estimate
	// runs out no later), then for a write attempt after that.
	eventually(t, within, "the lease to expire", func() bool {
		var expired bool
		err := direct.QueryRow(ctx, `SELECT lease_expires_at < now() FROM venturi_job WHERE id = $1`, r.ID[:]).Scan(&expired)
		return err == nil && expired
	})
	for drained := false; !drained; {
		select {
		case <-warnings:
		default:
			drained = true
		}
	}
	for {
		msg := recv(t, (<-chan string)(warnings), "a write attempt after the lease expired")
		if strings.Contains(msg, "gave up writing a run result") {
			t.Fatalf("the completer gave up on the result during the outage: %q", msg)
		}
		if strings.Contains(msg, "writing run results failed; retrying") {
			break
		}
	}
	proxy.Up()

	j := waitState(t, q, r, venturi.StateCompleted)
	if j.RunCount != 1 || j.Failures != 0 {
		t.Fatalf("runs %d, failures %d; want the one run, no failure; journal %+v", j.RunCount, j.Failures, j.Journal)
	}
	for _, e := range j.Journal {
		if e.Event == venturi.EventAbandoned {
			t.Fatalf("the run was rescued as abandoned: %+v", j.Journal)
		}
	}
	if last := j.Journal[len(j.Journal)-1]; last.Note != "done during the outage" {
		t.Fatalf("last entry %+v", last)
	}
}

package venturitest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/venturitest"
)

// step is a task whose payload says what its handler does.
type step struct {
	Do     string `json:"do"`
	Hidden string `json:"-"` // does not survive the round trip
}

type stepCarry struct {
	Seen []string `json:"seen"`
}

// seen is the attachment a step records: what its run looked like.
type seen struct {
	ID       string `json:"id"`
	Kind     string `json:"kind"`
	Token    int64  `json:"token"`
	Runs     int    `json:"runs"`
	Failures int    `json:"failures"`
	History  int    `json:"history"`
	Shutdown bool   `json:"shutdown"`
}

type deps struct{ prefix string }

func (step) Kind() string { return "step" }

func (s step) Handle(ctx context.Context, run *venturi.Run[stepCarry], d *deps) (venturi.Outcome, error) {
	run.CarryMut().Seen = append(run.CarryMut().Seen, s.Do)
	if err := run.SetAttachment(seen{ID: run.ID().String(), Kind: run.Kind(), Token: run.Token(), Runs: run.RunCount(),
		Failures: run.Failures(), History: len(run.History()), Shutdown: run.ShuttingDown()}); err != nil {
		return venturi.Outcome{}, err
	}
	switch s.Do {
	case "complete":
		return venturi.CompletedWith(d.prefix + "done"), nil
	case "pause":
		return venturi.PauseInWith(time.Minute, "later"), nil
	case "fail":
		return venturi.Outcome{}, errors.New("flaky")
	case "permanent":
		return venturi.Outcome{}, venturi.Permanentf("never: %s", s.Do)
	case "retry":
		return venturi.Outcome{}, venturi.RetryIn(90*time.Second, errors.New("busy"))
	case "panic":
		panic("boom")
	case "hidden":
		return venturi.CompletedWith("hidden=" + s.Hidden), nil
	}
	return venturi.Outcome{}, fmt.Errorf("unknown step %q", s.Do)
}

func TestRunHandlerResults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tt := range []struct {
		do        string
		event     venturi.Event
		note      string
		permanent bool
		retryIn   time.Duration
	}{
		{do: "complete", event: venturi.EventCompleted, note: "x:done"},
		{do: "pause", event: venturi.EventPaused, note: "later"},
		{do: "fail", event: venturi.EventFailed, note: "flaky"},
		{do: "permanent", event: venturi.EventDead, note: "never: permanent", permanent: true},
		{do: "retry", event: venturi.EventFailed, note: "busy", retryIn: 90 * time.Second},
		{do: "panic", event: venturi.EventFailed, note: "panic: boom"},
	} {
		t.Run(tt.do, func(t *testing.T) {
			res := venturitest.RunHandler(ctx, step{Do: tt.do}, &deps{prefix: "x:"}, venturitest.RunOptions[stepCarry]{})
			if res.Event() != tt.event || !strings.HasPrefix(res.Note(), tt.note) || res.IsPermanent() != tt.permanent {
				t.Fatalf("event %s note %q permanent %v, want %s %q %v", res.Event(), res.Note(), res.IsPermanent(), tt.event, tt.note, tt.permanent)
			}
			if d, ok := res.RetryIn(); d != tt.retryIn || ok != (tt.retryIn > 0) {
				t.Fatalf("RetryIn = %v, %v, want %v", d, ok, tt.retryIn)
			}
			if res.Panicked != (tt.do == "panic") {
				t.Fatalf("Panicked = %v", res.Panicked)
			}
			if tt.do == "panic" {
				if !strings.Contains(res.Note(), "goroutine") {
					t.Fatalf("a panic's error carries no stack: %q", res.Note())
				}
				return
			}
			if len(res.Carry.Seen) != 1 || res.Carry.Seen[0] != tt.do || res.Attachment == nil || res.CompletedTx {
				t.Fatalf("carry %+v attachment %s completedTx %v", res.Carry, res.Attachment, res.CompletedTx)
			}
		})
	}
}

func TestRunHandlerSeesTheRunOptions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var s seen
	res := venturitest.RunHandler(ctx, step{Do: "complete"}, &deps{}, venturitest.RunOptions[stepCarry]{})
	if err := res.DecodeAttachment(&s); err != nil {
		t.Fatal(err)
	}
	if _, err := ulid.ParseStrict(s.ID); err != nil || s.Kind != "step" || s.Token != 1 || s.Runs != 1 || s.Failures != 0 || s.History != 0 || s.Shutdown {
		t.Fatalf("default run %+v (%v), want a new ID, kind step, token 1, first run, no shutdown", s, err)
	}

	id := ulid.Make()
	history := []venturi.JournalEntry{{Event: venturi.EventFailed, Run: 1}, {Event: venturi.EventPaused, Run: 2}}
	res = venturitest.RunHandler(ctx, step{Do: "complete"}, &deps{}, venturitest.RunOptions[stepCarry]{
		ID: id, Token: 42, RunCount: 3, Failures: 1, History: history, ShuttingDown: true,
		Carry: stepCarry{Seen: []string{"fail", "pause"}},
	})
	if err := res.DecodeAttachment(&s); err != nil {
		t.Fatal(err)
	}
	want := seen{ID: id.String(), Kind: "step", Token: 42, Runs: 3, Failures: 1, History: 2, Shutdown: true}
	if s != want {
		t.Fatalf("run %+v, want %+v", s, want)
	}
	if got := strings.Join(res.Carry.Seen, ","); got != "fail,pause,complete" {
		t.Fatalf("carry %q, want the given carry extended by this run", got)
	}

	// A shutdown that begins while the handler runs.
	shutdown := make(chan struct{})
	close(shutdown)
	res = venturitest.RunHandler(ctx, step{Do: "complete"}, &deps{}, venturitest.RunOptions[stepCarry]{Shutdown: shutdown})
	if err := res.DecodeAttachment(&s); err != nil || !s.Shutdown {
		t.Fatalf("run %+v (%v), want the shutdown seen", s, err)
	}
}

// lossy is a task whose encoding loses what the handler needs.
type lossy struct{}

func (lossy) Kind() string { return "lossy" }

func (l *lossy) UnmarshalJSON([]byte) error { return errors.New("no such format") }

type unencodable struct{ C chan int }

func (unencodable) Kind() string { return "unencodable" }

func TestRunFuncRoundTripsThePayload(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	res := venturitest.RunHandler(ctx, step{Do: "hidden", Hidden: "set by the producer"}, &deps{}, venturitest.RunOptions[stepCarry]{})
	if res.Err != nil || res.Note() != "hidden=" {
		t.Fatalf("note %q (%v): a field the encoding drops reached the handler", res.Note(), res.Err)
	}

	called := false
	handle := func(context.Context, lossy, *venturi.Run[struct{}], int) (venturi.Outcome, error) {
		called = true
		return venturi.Completed(), nil
	}
	res2 := venturitest.RunFunc(ctx, handle, lossy{}, 0, venturitest.RunOptions[struct{}]{})
	if called || !res2.IsPermanent() || !strings.Contains(res2.Note(), "decode payload into venturitest_test.lossy") {
		t.Fatalf("undecodable payload: called %v, %s %q; want dead with decode payload", called, res2.Event(), res2.Note())
	}

	res3 := venturitest.RunFunc(ctx, func(context.Context, unencodable, *venturi.Run[struct{}], int) (venturi.Outcome, error) {
		called = true
		return venturi.Completed(), nil
	}, unencodable{}, 0, venturitest.RunOptions[struct{}]{})
	if called || res3.Err == nil || res3.IsPermanent() || !strings.Contains(res3.Note(), "cannot be enqueued") {
		t.Fatalf("unencodable payload: called %v, err %v", called, res3.Err)
	}
	// The queue refuses what jsonb cannot store; so does the test run.
	res4 := venturitest.RunFunc(ctx, func(context.Context, step, *venturi.Run[struct{}], int) (venturi.Outcome, error) {
		called = true
		return venturi.Completed(), nil
	}, step{Do: "nul\x00"}, 0, venturitest.RunOptions[struct{}]{})
	if called || !errors.Is(res4.Err, venturi.ErrInvalidPayload) {
		t.Fatalf("payload with NUL: called %v, err %v; want venturi.ErrInvalidPayload", called, res4.Err)
	}
}

// TestRunFuncCompleteTx runs a handler that commits its outcome in its own transaction.
func TestRunFuncCompleteTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	if _, err := pool.Exec(ctx, "CREATE TABLE effect (n int)"); err != nil {
		t.Fatal(err)
	}
	handle := func(ctx context.Context, s step, run *venturi.Run[stepCarry], _ *deps) (venturi.Outcome, error) {
		var out venturi.Outcome
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO effect VALUES (1)"); err != nil {
				return err
			}
			run.SetCarry(stepCarry{Seen: []string{"committed"}})
			_ = run.SetAttachment(map[string]int{"rows": 1})
			var err error
			out, err = run.CompleteTx(ctx, tx, venturi.PauseInWith(0, "next page"))
			return err
		})
		run.SetCarry(stepCarry{Seen: []string{"after CompleteTx: not stored"}})
		return out, err
	}
	res := venturitest.RunFunc(ctx, handle, step{}, &deps{}, venturitest.RunOptions[stepCarry]{})
	if res.Err != nil || !res.CompletedTx || res.CompletedTxOutcome.Note() != "next page" || res.Event() != venturi.EventPaused {
		t.Fatalf("result %+v", res)
	}
	if len(res.Carry.Seen) != 1 || res.Carry.Seen[0] != "committed" || string(res.Attachment) != `{"rows":1}` {
		t.Fatalf("carry %+v attachment %s, want those recorded by CompleteTx", res.Carry, res.Attachment)
	}

	// The run lost its job: CompleteTx fails and the handler's transaction rolls back.
	res = venturitest.RunFunc(ctx, handle, step{}, &deps{}, venturitest.RunOptions[stepCarry]{CompleteTxErr: venturi.ErrLeaseLost})
	if !errors.Is(res.Err, venturi.ErrLeaseLost) || res.CompletedTx {
		t.Fatalf("result %+v, want ErrLeaseLost", res)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM effect").Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d effects (%v), want only the committed run's", n, err)
	}
	if err := res.DecodeAttachment(&json.RawMessage{}); err != nil {
		t.Fatalf("the failed run's attachment: %v", err)
	}
}

// TestRunHandlerPagesALongHistory: given a history longer than a row keeps, the run's
// History() holds the newest venturi.JournalRecent entries, numbered by their position,
// and EarlierHistory pages back through the rest, as in a worker.
func TestRunHandlerPagesALongHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	history := make([]venturi.JournalEntry, 100)
	for i := range history {
		history[i] = venturi.JournalEntry{Event: venturi.EventPaused, Run: i + 1}
	}
	var got []venturi.JournalEntry
	res := venturitest.RunFunc(ctx, func(ctx context.Context, p pageAll, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
		got = run.History()
		for {
			older, err := run.EarlierHistory(ctx, got[0].Seq, 30)
			if err != nil || len(older) == 0 {
				return venturi.Completed(), err
			}
			got = append(older, got...)
		}
	}, pageAll{}, struct{}{}, venturitest.RunOptions[struct{}]{RunCount: 101, History: history})
	if res.Err != nil || len(got) != 100 {
		t.Fatalf("paged %d entries, %v", len(got), res.Err)
	}
	for i, e := range got {
		if e.Seq != int64(i+1) || e.Run != i+1 {
			t.Fatalf("entry %d = %+v", i, e)
		}
	}
}

type pageAll struct{}

func (pageAll) Kind() string { return "page_all" }

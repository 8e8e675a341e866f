package venturi_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/venturi-dev/venturi"
)

type echoTask struct {
	Msg string `json:"msg"`
}

func (echoTask) Kind() string { return "echo" }

func (e echoTask) Handle(ctx context.Context, run *venturi.Run[struct{}], app *testApp) (venturi.Outcome, error) {
	app.seen <- e.Msg
	switch e.Msg {
	case "fail":
		return venturi.Outcome{}, errors.New("boom")
	case "perm":
		return venturi.Outcome{}, venturi.Permanent(errors.New("never"))
	}
	return venturi.CompletedWith("said " + e.Msg), nil
}

type testApp struct{ seen chan string }

func TestSmoke(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	app := &testApp{seen: make(chan string, 100)}
	startWorkerFor[echoTask](t, pool, app, venturi.Config{Backoff: venturi.Backoff{Base: time.Millisecond}})
	r := enqueue(t, q, echoTask{Msg: "hi"})
	j := waitState(t, q, r, venturi.StateCompleted)
	if len(j.Journal) != 1 || j.Journal[0].Note != "said hi" || j.Journal[0].Event != venturi.EventCompleted {
		t.Fatalf("journal = %+v", j.Journal)
	}
	r = enqueue(t, q, echoTask{Msg: "perm"})
	j = waitState(t, q, r, venturi.StateDead)
	t.Logf("%+v", j.Journal)
}

package venturi_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/venturi-dev/venturi"
)

// confirmable creates a hook on its first run, hands the token out through the state, and
// waits for it; the next run reports the payload.
type confirmable struct{ Reusable bool }

type hookState struct{ tokens chan string }

func (confirmable) Kind() string { return "confirmable" }
func (c confirmable) Handle(ctx context.Context, run *venturi.Run[struct{}], st hookState) (venturi.Outcome, error) {
	if _, waited := run.Waited(); !waited {
		token, err := run.CreateHook(ctx, "confirm", time.Hour, c.Reusable)
		if err != nil {
			return venturi.Outcome{}, err
		}
		st.tokens <- token
		return venturi.WaitForSignal(time.Hour, "confirm"), nil
	}
	sigs, err := run.Signals(ctx, "confirm")
	if err != nil || len(sigs) == 0 {
		return venturi.Outcome{}, errors.New("woken without a signal")
	}
	who, _ := venturi.DecodeSignal[string](sigs[0])
	return venturi.CompletedWith("confirmed by " + who), nil
}

// TestHookResumesOnceAndOnlyWithItsToken: the token resumes the job once; a replay, a
// forged token and a disposed hook are refused alike; the database holds only a hash.
func TestHookResumesOnceAndOnlyWithItsToken(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	st := hookState{tokens: make(chan string, 2)}
	startWorkerFor[confirmable](t, pool, st, fastConfig())
	r := enqueue(t, q, confirmable{})
	token := recv(t, st.tokens, "the hook's token")
	if !strings.HasPrefix(token, "vhk_") || len(token) < 40 {
		t.Fatalf("token %q", token)
	}
	var stored int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM venturi_hook WHERE position($1::bytea IN token_hash) > 0`, []byte(token)).Scan(&stored); err != nil || stored != 0 {
		t.Fatalf("the token is stored in clear (%d, %v)", stored, err)
	}
	waitState(t, q, r, venturi.StateWaiting)
	if _, _, err := q.ResumeHook(ctx, token+"x", "mallory"); !errors.Is(err, venturi.ErrHookInvalid) {
		t.Fatalf("forged token: %v", err)
	}
	id, res, err := q.ResumeHook(ctx, token, "ann")
	if err != nil || id != r.ID || !res.Woke {
		t.Fatalf("ResumeHook = %v, %+v, %v", id, res, err)
	}
	if _, _, err := q.ResumeHook(ctx, token, "ann again"); !errors.Is(err, venturi.ErrHookInvalid) {
		t.Fatalf("replayed token: %v", err)
	}
	if j := waitState(t, q, r, venturi.StateCompleted); lastEntry(j).Note != "confirmed by ann" {
		t.Fatalf("note %q", lastEntry(j).Note)
	}

	r2 := enqueue(t, q, confirmable{Reusable: true})
	token2 := recv(t, st.tokens, "the second hook's token")
	if err := q.DisposeHook(ctx, token2); err != nil {
		t.Fatal(err)
	}
	if _, _, err := q.ResumeHook(ctx, token2, "bob"); !errors.Is(err, venturi.ErrHookInvalid) {
		t.Fatalf("disposed hook: %v", err)
	}
	if _, err := q.Cancel(ctx, r2.ID, "test over"); err != nil {
		t.Fatal(err)
	}
}

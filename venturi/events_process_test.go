package venturi_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// eventsReader is the "events" client process: it reads up to max events from cursor in
// pages of at most 4, printing "EV <job> <event>" per event and "CURSOR <c>" after each
// page (its checkpoint), and exits after max events or a second without any.
func eventsReader(ctx context.Context, q *venturi.Queue, cur venturi.EventCursor, maxArg string, out func(string, ...any)) {
	limit, _ := strconv.Atoi(maxArg)
	for n := 0; n < limit; {
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		evs, next, err := q.WaitEvents(wctx, cur, min(4, limit-n))
		cancel()
		if err != nil || len(evs) == 0 {
			return
		}
		for _, e := range evs {
			out("EV %s %s", e.JobID, e.Event)
		}
		out("CURSOR %s", next)
		cur, n = next, n+len(evs)
	}
}

// TestEventStreamReaderRestartedAcrossProcesses: writers commit opted-in enqueues in
// overlapping transactions while a reader process reads a few events, exits, and a new
// process resumes from its last printed cursor. Together they see every event once.
func TestEventStreamReaderRestartedAcrossProcesses(t *testing.T) {
	slow(t)
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	const writers, each = 4, 12
	var mu sync.Mutex
	want := map[ulid.ULID]bool{}
	committed := make(chan struct{}) // a writer's commit, handed to one writer holding its transaction open
	go concurrently(writers, func(i int) {
		for k := range each {
			_ = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				r, err := q.EnqueueTx(ctx, tx, scripted{Name: fmt.Sprint(i, "/", k)})
				if err != nil {
					t.Error(err)
					return err
				}
				mu.Lock()
				want[r.ID] = true
				mu.Unlock()
				if (i+k)%3 == 0 { // overlap the transactions: hold this one open until another commits
					select {
					case <-committed:
					case <-time.After(time.Second):
					}
				}
				return nil
			})
			select {
			case committed <- struct{}{}:
			default:
			}
		}
	})
	seen := map[ulid.ULID]int{}
	var cur venturi.EventCursor
	deadline := time.Now().Add(within)
	restarts := 0
	for {
		mu.Lock()
		done := len(want) == writers*each && len(seen) == len(want)
		mu.Unlock()
		if done || time.Now().After(deadline) {
			break
		}
		outText := runClient(t, pool, "events", "-", string(cur), "10")
		restarts++
		var page []ulid.ULID
		for _, line := range strings.Split(outText, "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) == 3 && f[0] == "EV":
				id, err := ulid.Parse(f[1])
				if err != nil || f[2] != "enqueued" {
					t.Fatalf("bad line %q", line)
				}
				page = append(page, id)
			case len(f) == 2 && f[0] == "CURSOR":
				for _, id := range page {
					seen[id]++
				}
				page, cur = nil, venturi.EventCursor(f[1])
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(want) != writers*each {
		t.Fatalf("enqueued %d of %d", len(want), writers*each)
	}
	for id := range want {
		if seen[id] != 1 {
			t.Fatalf("job %s seen %d times across %d reader processes, want 1", id, seen[id], restarts)
		}
	}
	if len(seen) != len(want) || restarts < 3 {
		t.Fatalf("seen %d jobs, want %d; %d reader processes", len(seen), len(want), restarts)
	}
}

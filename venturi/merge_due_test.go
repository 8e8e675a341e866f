package venturi_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// duePolicyTask merges by the due-time rule its incoming payload names, so one type covers
// every policy: Replace with Throttle, Debounce or the default, Keep with Earliest.
type duePolicyTask struct {
	N       int           `json:"n"`
	Rule    string        `json:"rule"` // "throttle", "debounce", "earliest", "keep-earliest", "independent-throttle"
	Delay   time.Duration `json:"delay"`
	MaxWait time.Duration `json:"max_wait"`
	Pause   bool          `json:"pause"` // the first run pauses for an hour
}

func (duePolicyTask) Kind() string               { return "due_policy" }
func (duePolicyTask) DedupKey() venturi.DedupKey { return "k" }

func (d duePolicyTask) Merge(p venturi.Pending[duePolicyTask, struct{}]) venturi.Merge[duePolicyTask, struct{}] {
	switch d.Rule {
	case "throttle":
		return p.Replace().Throttle()
	case "debounce":
		return p.Replace().Debounce(d.Delay, d.MaxWait)
	case "keep-earliest":
		return p.Keep().Earliest()
	case "independent-throttle":
		return p.Independent().Throttle()
	}
	return p.Replace()
}

func (d duePolicyTask) Handle(_ context.Context, run *venturi.Run[struct{}], ran chan<- int) (venturi.Outcome, error) {
	if d.Pause && run.RunCount() == 1 {
		return venturi.PauseIn(time.Hour), nil
	}
	ran <- d.N
	return venturi.Completed(), nil
}

// lastMerge returns the job's newest journal entry, which must be a merged one.
func lastMerge(t *testing.T, q *venturi.Queue, id ulid.ULID) (venturi.JournalEntry, *venturi.Job) {
	t.Helper()
	j := jobByID(t, q, id)
	e := lastEntry(j)
	if e.Event != venturi.EventMerged {
		t.Fatalf("last entry %+v, want merged", e)
	}
	return e, j
}

// shiftBurst moves the burst's start of the pending job back by d (as if it began d
// earlier): the debounce's maximum wait runs from there.
func shiftBurst(t *testing.T, pool *pgxpool.Pool, id ulid.ULID, d time.Duration) time.Time {
	t.Helper()
	var at time.Time
	err := pool.QueryRow(context.Background(), `UPDATE venturi_job
		SET burst_at = COALESCE(burst_at, created_at) - $2 * interval '1 microsecond',
		    created_at = created_at - $2 * interval '1 microsecond'
		WHERE id = $1 RETURNING COALESCE(burst_at, created_at)`, id[:], d.Microseconds()).Scan(&at)
	if err != nil {
		t.Fatal(err)
	}
	return at
}

// TestDebounceMovesTheDueTime: each merge of a burst pushes the due time to now + delay
// (database clock: the entry's At plus the delay, exactly), bounded by the maximum wait
// from the burst's start once that comes first; the entry records the policy and the due
// time before and after. A burst that began past its maximum wait makes the job due at
// once, and it runs once, with the last payload.
func TestDebounceMovesTheDueTime(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	const delay, maxWait = 10 * time.Second, time.Minute
	first := enqueue(t, q, duePolicyTask{N: 1, Rule: "debounce", Delay: delay, MaxWait: maxWait}, venturi.After(delay))
	due := jobByID(t, q, first.ID).RunAt
	for n := 2; n <= 5; n++ {
		r := enqueue(t, q, duePolicyTask{N: n, Rule: "debounce", Delay: delay, MaxWait: maxWait})
		if r.ID != first.ID || r.Action != venturi.ActionReplaced {
			t.Fatalf("enqueue %d: %+v", n, r)
		}
		e, j := lastMerge(t, q, first.ID)
		if e.Due != "debounce" || !e.DueBefore.Equal(due) || !e.DueAfter.Equal(e.At.Add(delay)) || !j.RunAt.Equal(e.DueAfter) {
			t.Fatalf("merge %d: entry %+v, job due %v; want due %v -> %v", n, e, j.RunAt, due, e.At.Add(delay))
		}
		if j.State != venturi.StateScheduled {
			t.Fatalf("merge %d: state %s", n, j.State)
		}
		due = j.RunAt
	}
	// The burst began 55 s ago: the maximum wait (60 s from its start) now comes before
	// now + 10 s.
	start := shiftBurst(t, pool, first.ID, 55*time.Second)
	enqueue(t, q, duePolicyTask{N: 6, Rule: "debounce", Delay: delay, MaxWait: maxWait})
	e, j := lastMerge(t, q, first.ID)
	if want := start.Add(maxWait); !e.DueAfter.Equal(want) || !j.RunAt.Equal(want) || !want.Before(e.At.Add(delay)) {
		t.Fatalf("capped merge: entry %+v, job due %v; want %v (burst start %v)", e, j.RunAt, want, start)
	}
	// Past the maximum wait: due at once, and it runs once with the burst's last payload.
	shiftBurst(t, pool, first.ID, time.Minute)
	enqueue(t, q, duePolicyTask{N: 7, Rule: "debounce", Delay: delay, MaxWait: maxWait})
	if _, j := lastMerge(t, q, first.ID); j.State != venturi.StateAvailable {
		t.Fatalf("after the maximum wait: state %s, due %v", j.State, j.RunAt)
	}
	ran := make(chan int, 8)
	startWorkerFor[duePolicyTask](t, pool, (chan<- int)(ran), fastConfig())
	if got := recv(t, ran, "the debounced run"); got != 7 {
		t.Fatalf("ran payload %d, want 7", got)
	}
	j = waitState(t, q, first, venturi.StateCompleted)
	if got := strings.Count(eventsOf(j), "merged"); got != 6 || j.RunCount != 1 {
		t.Fatalf("journal %s, runs %d: want 6 merges and 1 run", eventsOf(j), j.RunCount)
	}
	// A new burst starts a new job (its creation is the burst's start).
	next := enqueue(t, q, duePolicyTask{N: 8, Rule: "debounce", Delay: delay, MaxWait: maxWait}, venturi.After(delay))
	if next.ID == first.ID || next.Action != venturi.ActionInserted {
		t.Fatalf("after the run: %+v", next)
	}
}

// TestDebounceWithoutMaxWait: with no maximum wait, a burst that began long ago is still
// pushed.
func TestDebounceWithoutMaxWait(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	first := enqueue(t, q, duePolicyTask{N: 1, Rule: "debounce", Delay: time.Second}, venturi.After(time.Second))
	shiftBurst(t, pool, first.ID, 24*time.Hour)
	enqueue(t, q, duePolicyTask{N: 2, Rule: "debounce", Delay: time.Second})
	if e, j := lastMerge(t, q, first.ID); !e.DueAfter.Equal(e.At.Add(time.Second)) || j.State != venturi.StateScheduled {
		t.Fatalf("entry %+v, state %s", e, j.State)
	}
}

// TestDebounceBurstStartsAfterARun: a job that already ran (here it paused) and is merged
// into starts a new burst at that merge, not at its creation.
func TestDebounceBurstStartsAfterARun(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	ran := make(chan int, 4)
	w := startWorkerFor[duePolicyTask](t, pool, (chan<- int)(ran), fastConfig())
	first := enqueue(t, q, duePolicyTask{N: 1, Pause: true})
	waitJob(t, q, first.ID, "paused", func(j *venturi.Job) bool {
		return j.State == venturi.StateScheduled && j.RunCount == 1
	})
	stopWorker(t, w)
	// Created two hours ago: the burst's start must not be the creation.
	shiftBurst(t, pool, first.ID, 2*time.Hour)
	enqueue(t, q, duePolicyTask{N: 2, Rule: "debounce", Delay: 10 * time.Second, MaxWait: time.Minute})
	e, j := lastMerge(t, q, first.ID)
	if !e.DueAfter.Equal(e.At.Add(10*time.Second)) || j.State != venturi.StateScheduled {
		t.Fatalf("first merge after a run: entry %+v, state %s", e, j.State)
	}
	// The second merge of this burst is capped by the first merge's time + 60 s.
	start := shiftBurst(t, pool, first.ID, 55*time.Second)
	enqueue(t, q, duePolicyTask{N: 3, Rule: "debounce", Delay: 10 * time.Second, MaxWait: time.Minute})
	if e, _ := lastMerge(t, q, first.ID); !e.DueAfter.Equal(start.Add(time.Minute)) {
		t.Fatalf("second merge: entry %+v, want due %v", e, start.Add(time.Minute))
	}
}

// TestThrottleKeepsTheDueTime: every merge of a window keeps the due time the first
// enqueue set, whatever the incoming enqueue asks; the job runs once, with the last
// payload, when its due time comes (moved here to now in SQL); the next enqueue opens a
// new window.
func TestThrottleKeepsTheDueTime(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	first := enqueue(t, q, duePolicyTask{N: 1, Rule: "throttle"}, venturi.After(time.Hour))
	due := jobByID(t, q, first.ID).RunAt
	for n := 2; n <= 10; n++ {
		enqueue(t, q, duePolicyTask{N: n, Rule: "throttle"}) // asks for now: kept
		e, j := lastMerge(t, q, first.ID)
		if e.Due != "keep" || !e.DueBefore.Equal(due) || !e.DueAfter.Equal(due) || !j.RunAt.Equal(due) || j.State != venturi.StateScheduled {
			t.Fatalf("merge %d: entry %+v, job due %v %s; want %v", n, e, j.RunAt, j.State, due)
		}
	}
	if n := countJobs(t, pool, "kind = 'due_policy'"); n != 1 {
		t.Fatalf("%d jobs, want 1", n)
	}
	// The window ends.
	if _, err := pool.Exec(context.Background(), `UPDATE venturi_job SET run_at = now() WHERE id = $1`, first.ID[:]); err != nil {
		t.Fatal(err)
	}
	ran := make(chan int, 4)
	startWorkerFor[duePolicyTask](t, pool, (chan<- int)(ran), fastConfig())
	if got := recv(t, ran, "the throttled run"); got != 10 {
		t.Fatalf("ran payload %d, want 10", got)
	}
	waitState(t, q, first, venturi.StateCompleted)
	next := enqueue(t, q, duePolicyTask{N: 11, Rule: "throttle"}, venturi.After(time.Hour))
	if next.ID == first.ID || next.Action != venturi.ActionInserted {
		t.Fatalf("next window: %+v", next)
	}
}

// TestMergeDueDefaultsAndRefusals: Replace keeps the earliest due time and says so, Keep
// leaves it unless told Earliest, and a due-time rule on Independent or a negative
// Debounce fails the enqueue without writing.
func TestMergeDueDefaultsAndRefusals(t *testing.T) {
	t.Parallel()
	_, q := newQueue(t)
	first := enqueue(t, q, duePolicyTask{N: 1}, venturi.After(time.Hour))
	due := jobByID(t, q, first.ID).RunAt
	enqueue(t, q, duePolicyTask{N: 2}, venturi.After(2*time.Hour)) // later: earliest keeps due
	if e, _ := lastMerge(t, q, first.ID); e.Due != "earliest" || !e.DueBefore.Equal(due) || !e.DueAfter.Equal(due) {
		t.Fatalf("replace later: %+v", e)
	}
	enqueue(t, q, duePolicyTask{N: 3, Rule: "keep-earliest"}) // now: pulled forward
	e, j := lastMerge(t, q, first.ID)
	if e.Due != "earliest" || e.Merge != "keep" || !e.DueAfter.Equal(e.At) || j.State != venturi.StateAvailable {
		t.Fatalf("keep earliest: %+v, state %s", e, j.State)
	}
	var p struct{ N int }
	decodePayload(t, j, &p)
	if p.N != 2 {
		t.Fatalf("Keep changed the payload to %d", p.N)
	}
	before := j.JournalLen
	ctx := context.Background()
	if _, err := q.Enqueue(ctx, duePolicyTask{N: 4, Rule: "independent-throttle"}); err == nil || !strings.Contains(err.Error(), "Independent") {
		t.Fatalf("Independent().Throttle(): %v", err)
	}
	if _, err := q.Enqueue(ctx, duePolicyTask{N: 5, Rule: "debounce", Delay: -time.Second}); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Fatalf("negative Debounce: %v", err)
	}
	if j := jobByID(t, q, first.ID); j.JournalLen != before {
		t.Fatalf("a refused merge wrote the journal: %d -> %d entries", before, j.JournalLen)
	}
}

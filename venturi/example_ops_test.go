package venturi_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// RenderImage renders an image thumbnail; it fails permanently for a missing image.
type RenderImage struct {
	Image string `json:"image"`
	Size  int    `json:"size"`
}

// Kind names the task.
func (RenderImage) Kind() string { return "render_image" }

// DedupKey coalesces the pending renders of one image.
func (t RenderImage) DedupKey() venturi.DedupKey { return venturi.KeyOf("image", t.Image) }

// Handle renders the thumbnail, unless the image is missing (the storage fails until it
// is back).
func (t RenderImage) Handle(ctx context.Context, run *venturi.Run[struct{}], storageBack *atomic.Bool) (venturi.Outcome, error) {
	if !storageBack.Load() {
		return venturi.Outcome{}, venturi.Permanent(errors.New("storage: image " + t.Image + " not found"))
	}
	return venturi.CompletedWith(fmt.Sprintf("rendered %s at %dpx", t.Image, t.Size)), nil
}

// The filter grammar that the CLI and the dashboard share: parse a filter, and write one
// back.
func ExampleParseJobFilter() {
	f, err := venturi.ParseJobFilter(`state:dead kind:render_image note:"not found" payload.size:128 within:24h`)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(f.States, f.Kinds, f.Note, f.Payload[0].Path, f.Payload[0].Value, f.CreatedWithin)
	fmt.Println(f.String())

	_, err = venturi.ParseJobFilter("state:sleeping")
	fmt.Println(err)
	// Output:
	// [dead] [render_image] not found [size] 128 24h0m0s
	// state:dead kind:render_image within:24h0m0s note:"not found" payload.size:128
	// venturi: invalid job filter: term "state:sleeping": unknown state "sleeping"
}

// An operator lists the dead jobs, retries them after a fix (with a dry run first), and
// finds the action in the audit log.
func ExampleQueue_RetryJobs() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()

	var storageBack atomic.Bool // the storage is down
	w, err := venturi.NewWorker(pool, &storageBack, venturi.Config{
		PollInterval: 10 * time.Millisecond,
		Logger:       slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	venturi.MustRegister[RenderImage](w)
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(context.Background())

	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	var ids []ulid.ULID
	for _, img := range []string{"a.png", "b.png", "c.png"} {
		res, err := q.Enqueue(ctx, RenderImage{Image: img, Size: 128})
		if err != nil {
			log.Fatal(err)
		}
		ids = append(ids, res.ID)
	}
	for _, id := range ids {
		awaitFinished(q, id)
	}

	dead, err := venturi.ParseJobFilter(`state:dead kind:render_image`)
	if err != nil {
		log.Fatal(err)
	}
	page, err := q.ListJobs(ctx, dead, "", 10)
	if err != nil {
		log.Fatal(err)
	}
	var notes []string // newest finished first; they died together, in any order
	for _, j := range page.Jobs {
		notes = append(notes, fmt.Sprintf("%s %s: %s", j.State, j.Kind, j.LastNote))
	}
	slices.Sort(notes)
	fmt.Println(strings.Join(notes, "\n"))

	// The storage is back: retry them all, as alice.
	storageBack.Store(true)
	ops := venturi.WithActor(ctx, "alice")
	dry, err := q.RetryJobs(ops, dead, venturi.BulkOptions{DryRun: true})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("dry run: %d would be retried\n", dry.Eligible)
	res, err := q.RetryJobs(ops, dead, venturi.BulkOptions{Reason: "storage restored"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("retried %d\n", res.Changed)
	job := awaitJob(q, ids[0], "the retried job to complete", func(j *venturi.Job) bool { return j.State == venturi.StateCompleted })
	for _, e := range job.Journal {
		fmt.Printf("  %s: %s\n", e.Event, e.Note)
	}

	audit, err := q.AuditLog(ctx, 0, 10)
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range audit {
		fmt.Printf("audit: %s %s %q %d jobs (%s)\n", e.Actor, e.Action, e.Target, e.Count, e.Reason)
	}
	// Output:
	// dead render_image: storage: image a.png not found
	// dead render_image: storage: image b.png not found
	// dead render_image: storage: image c.png not found
	// dry run: 3 would be retried
	// retried 3
	//   dead: storage: image a.png not found
	//   retried: retried by alice: storage restored
	//   completed: rendered a.png at 128px
	// audit: alice jobs.retry "state:dead kind:render_image" 3 jobs (storage restored)
}

// The stats table: the maintaining worker samples the job table every StatsInterval, and
// Stats reads the latest sample without counting jobs.
func ExampleQueue_Stats() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()

	var storageBack atomic.Bool
	storageBack.Store(true)
	w, err := venturi.NewWorker(pool, &storageBack, venturi.Config{
		PollInterval:        10 * time.Millisecond,
		MaintenanceInterval: 20 * time.Millisecond,
		StatsInterval:       venturi.MinStatsInterval,
		Logger:              slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	venturi.MustRegister[RenderImage](w)
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(context.Background())

	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	for _, img := range []string{"a.png", "b.png"} {
		if _, err := q.Enqueue(ctx, RenderImage{Image: img, Size: 64}); err != nil {
			log.Fatal(err)
		}
	}
	// A paused queue's job waits: its queue's lag grows.
	if err := q.PauseQueue(ctx, "later"); err != nil {
		log.Fatal(err)
	}
	if _, err := q.Enqueue(ctx, RenderImage{Image: "c.png", Size: 64}, venturi.OnQueue("later")); err != nil {
		log.Fatal(err)
	}

	s := awaitStats(q, func(s venturi.Stats) bool { // a sample every 100ms
		return len(s.Queues) == 2 && s.Queues[0].Counts[venturi.StateCompleted] == 2
	})
	for _, qs := range s.Queues {
		fmt.Printf("queue %s (paused %v): %d available, %d completed, lag > 0: %v\n", qs.Queue, qs.Paused,
			qs.Counts[venturi.StateAvailable], qs.Counts[venturi.StateCompleted], qs.Lag > 0)
		for _, k := range qs.Kinds {
			fmt.Printf("  kind %s: %d completed\n", k.Kind, k.Counts[venturi.StateCompleted])
		}
	}
	// Output:
	// queue default (paused false): 0 available, 2 completed, lag > 0: false
	//   kind render_image: 2 completed
	// queue later (paused true): 1 available, 0 completed, lag > 0: true
	//   kind render_image: 0 completed
}

// Explain shows what an enqueue would do now, and changes nothing: here it would replace
// the payload of the pending render of the same image.
func ExampleQueue_Explain() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()

	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	pending, err := q.Enqueue(ctx, RenderImage{Image: "a.png", Size: 64}, venturi.After(time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	ex, err := q.Explain(ctx, RenderImage{Image: "a.png", Size: 256})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("action:", ex.Action, "- meets the pending job:", ex.Pending.ID == pending.ID)
	fmt.Printf("payload %s -> %s\n", ex.Pending.Payload, ex.Job.Payload)
	fmt.Println("due now:", ex.Due.Before(time.Now().Add(time.Minute)))
	// The retry schedule: each delay within its jitter (25%, derived from the job's ID)
	// below the backoff's.
	for n, d := range ex.Retries[:5] {
		full := venturi.DefaultBackoff.Delay(n + 1)
		fmt.Printf("after failure %d: %v (of %v)\n", n+1, d >= full*3/4 && d <= full, full)
	}
	fmt.Println(len(ex.Retries), "retries before the backstop")
	job, err := q.Job(ctx, pending.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("unchanged: %s %s\n", job.State, job.Payload)
	for _, n := range ex.Notes {
		if strings.HasPrefix(n, "merges into") {
			fmt.Println(strings.Replace(n, pending.ID.String(), "<id>", 1))
		}
	}
	// Output:
	// action: replaced - meets the pending job: true
	// payload {"size": 64, "image": "a.png"} -> {"size": 256, "image": "a.png"}
	// due now: true
	// after failure 1: true (of 0s)
	// after failure 2: true (of 0s)
	// after failure 3: true (of 1s)
	// after failure 4: true (of 2s)
	// after failure 5: true (of 4s)
	// 24 retries before the backstop
	// unchanged: scheduled {"size": 64, "image": "a.png"}
	// merges into pending job <id> (replaced)
}

// awaitStats polls the stats until cond holds, and fails the example after exampleWithin.
func awaitStats(q *venturi.Queue, cond func(venturi.Stats) bool) venturi.Stats {
	deadline := time.NewTimer(exampleWithin)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		s, err := q.Stats(context.Background())
		if err != nil {
			log.Fatalf("read stats: %v", err)
		}
		if cond(s) {
			return s
		}
		select {
		case <-deadline.C:
			log.Fatalf("timed out after %v waiting for a sample: %+v", exampleWithin, s)
		case <-tick.C:
		}
	}
}

// HostFetch fetches a page of one host; a breaker per host stops calling a host after
// its first failure, for an hour.
type HostFetch struct {
	Host string `json:"host"`
}

// Kind names the task.
func (HostFetch) Kind() string { return "host_fetch" }

// Partition is the host: each has its own breaker.
func (t HostFetch) Partition() string { return t.Host }

// Limits are read on the zero value when the type is registered.
func (HostFetch) Limits() venturi.Limits {
	return venturi.Limits{Breaker: venturi.Breaker{Failures: 1, Cooldown: time.Hour, PerPartition: true}}
}

// Handle fails: every host is down.
func (t HostFetch) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	return venturi.Outcome{}, venturi.RetryIn(0, errors.New(t.Host+" is down"))
}

// The breakers, a page at a time: a per-partition breaker has one row per partition, so a
// kind that fetches from thousands of hosts has thousands of breakers.
func ExampleQueue_ListCircuits() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()

	w, err := venturi.NewWorker(pool, struct{}{}, venturi.Config{PollInterval: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	venturi.MustRegister[HostFetch](w)
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(context.Background())

	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	for _, host := range []string{"c.example", "a.example", "b.example"} {
		res, err := q.Enqueue(ctx, HostFetch{Host: host})
		if err != nil {
			log.Fatal(err)
		}
		awaitJob(q, res.ID, "the host's breaker to open", func(j *venturi.Job) bool {
			return j.Circuit != nil && j.Circuit.State == venturi.CircuitOpen
		})
	}
	cursor := ""
	for {
		page, err := q.ListCircuits(ctx, cursor, 2)
		if err != nil {
			log.Fatal(err)
		}
		for _, c := range page.Circuits {
			fmt.Printf("%s %s: %s after %d failure\n", c.Kind, c.Partition, c.State, c.Failures)
		}
		if page.Next == "" {
			break
		}
		fmt.Println("-- next page")
		cursor = page.Next
	}
	// Output:
	// host_fetch a.example: open after 1 failure
	// host_fetch b.example: open after 1 failure
	// -- next page
	// host_fetch c.example: open after 1 failure
}

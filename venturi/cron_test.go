package venturi_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// tick is the task the test schedules enqueue; no worker of these tests serves its kind,
// so every job a fire enqueued stays available and countable.
type tick struct {
	Name string `json:"name"`
	V    int    `json:"v,omitempty"`
}

func (t tick) Kind() string { return "tick_" + t.Name }

// schedule registers s and fails the test on error.
func schedule(t *testing.T, q *venturi.Queue, s venturi.Schedule) venturi.ScheduleResult {
	t.Helper()
	res, err := q.Schedule(context.Background(), s)
	if err != nil {
		t.Fatalf("schedule %s: %v", s.Name, err)
	}
	return res
}

// fires returns a schedule's ledger, oldest first.
func fires(t *testing.T, q *venturi.Queue, name string) []venturi.Fire {
	t.Helper()
	var all []venturi.Fire
	before := time.Time{}
	for {
		page, err := q.ScheduleFires(context.Background(), name, before, 1000)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page...)
		if len(page) < 1000 {
			break
		}
		before = page[len(page)-1].At
	}
	slices.Reverse(all)
	return all
}

func scheduleInfo(t *testing.T, q *venturi.Queue, name string) venturi.ScheduleInfo {
	t.Helper()
	si, err := q.ScheduleByName(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return si
}

// checkContiguous fails unless fs are consecutive fire times step apart, each standing
// for itself only, each with its own job, and the jobs of kind are exactly these.
func checkContiguous(t *testing.T, pool *pgxpool.Pool, fs []venturi.Fire, step time.Duration, kind string) {
	t.Helper()
	jobs := map[ulid.ULID]bool{}
	for i, f := range fs {
		if f.Covers != 1 || f.Skipped != 0 || f.Action != venturi.ActionInserted {
			t.Errorf("fire %v: covers %d, skipped %d, %v", f.At, f.Covers, f.Skipped, f.Action)
		}
		if f.At.Truncate(time.Second) != f.At {
			t.Errorf("fire %v is not on a whole second", f.At)
		}
		if i > 0 && f.At.Sub(fs[i-1].At) != step {
			t.Errorf("fires %v and %v are %v apart, want %v", fs[i-1].At, f.At, f.At.Sub(fs[i-1].At), step)
		}
		if jobs[f.JobID] {
			t.Errorf("job %s stands for two fires", f.JobID)
		}
		jobs[f.JobID] = true
	}
	if n := countJobs(t, pool, "kind = $1", kind); n != len(fs) {
		t.Errorf("%d jobs of %s for %d fires", n, kind, len(fs))
	}
	if n := countJobs(t, pool, "kind = $1 AND id = ANY($2)", kind, idsOf(jobs)); n != len(fs) {
		t.Errorf("%d of the ledger's %d jobs exist", n, len(fs))
	}
}

func idsOf(m map[ulid.ULID]bool) [][]byte {
	var out [][]byte
	for id := range m {
		out = append(out, id[:])
	}
	return out
}

// TestCronFiresOnceAcrossRestartingWorkerProcesses: three worker processes (each its own
// pool) fire a per-second schedule for at least 25 fires while they are killed (SIGKILL)
// and replaced in turn, one every two fires. The ledger holds every second from the first
// fire to the last exactly once, each with its own job; the jobs say the same: one job
// per fire time (run_at), and nothing else was enqueued.
func TestCronFiresOnceAcrossRestartingWorkerProcesses(t *testing.T) {
	slow(t)
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	schedule(t, q, venturi.Schedule{Name: "every-second", Cron: "* * * * * *", Task: tick{Name: "procs"},
		Missed: venturi.MissedBackfill, Backfill: venturi.MaxCronBackfill})
	children := []*child{startChild(t, pool), startChild(t, pool), startChild(t, pool)}
	restarts := 0
	for last := 0; last < 25; restarts++ {
		eventually(t, within, "two more fires", func() bool { return len(fires(t, q, "every-second")) >= last+2 })
		last = len(fires(t, q, "every-second"))
		c := children[restarts%3]
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
		children[restarts%3] = startChild(t, pool)
	}
	eventually(t, within, "two more fires", func() bool { return len(fires(t, q, "every-second")) >= 27 })
	for _, c := range children {
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
	}
	fs := fires(t, q, "every-second")
	if len(fs) < 27 || restarts < 12 {
		t.Fatalf("%d fires, %d restarts", len(fs), restarts)
	}
	checkContiguous(t, pool, fs, time.Second, "tick_procs")
	// The jobs, independently of the ledger: one per fire time.
	rows, err := pool.Query(ctx, `SELECT run_at, count(*) FROM venturi_job_all WHERE kind = 'tick_procs' GROUP BY run_at ORDER BY run_at`)
	if err != nil {
		t.Fatal(err)
	}
	var runAts []time.Time
	for rows.Next() {
		var at time.Time
		var n int
		if err := rows.Scan(&at, &n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Errorf("%d jobs for the fire time %v", n, at)
		}
		runAts = append(runAts, at)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(runAts) != len(fs) {
		t.Fatalf("%d distinct job fire times, %d ledger fires", len(runAts), len(fs))
	}
	for i, f := range fs {
		if !runAts[i].Equal(f.At) {
			t.Errorf("job %d runs at %v, ledger fire %v", i, runAts[i], f.At)
		}
	}
	si := scheduleInfo(t, q, "every-second")
	if !si.LastFire.Equal(fs[len(fs)-1].At) || !si.NextFire.Equal(si.LastFire.Add(time.Second)) ||
		si.Fires != int64(len(fs)) || si.Skipped != 0 {
		t.Errorf("state: last %v next %v fires %d skipped %d; ledger ends %v with %d", si.LastFire, si.NextFire,
			si.Fires, si.Skipped, fs[len(fs)-1].At, len(fs))
	}
}

// TestCronFiresOnceWithWorkersInOneProcess: three workers with separate pools, started
// and stopped in turn, fire a per-second schedule; the ledger is contiguous.
func TestCronFiresOnceWithWorkersInOneProcess(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	schedule(t, q, venturi.Schedule{Name: "s", Cron: "* * * * * *", Task: tick{Name: "inproc"},
		Missed: venturi.MissedBackfill, Backfill: 100})
	start := func() *venturi.Worker[chan<- string] {
		// A pool of its own on the same schema.
		cfg := pool.Config().Copy()
		own, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(own.Close)
		c := fastConfig()
		c.MaintenanceInterval = 20 * time.Millisecond
		return startWorkerFor[queued](t, own, make(chan<- string, 1), c)
	}
	workers := []func(){}
	for range 3 {
		w := start()
		workers = append(workers, func() { stopWorker(t, w) })
	}
	last := 0
	for i := range 6 {
		eventually(t, within, "a fire", func() bool { return len(fires(t, q, "s")) > last })
		last = len(fires(t, q, "s"))
		workers[i%3]()
		w := start()
		workers[i%3] = func() { stopWorker(t, w) }
	}
	for _, stop := range workers {
		stop()
	}
	checkContiguous(t, pool, fires(t, q, "s"), time.Second, "tick_inproc")
}

// outage registers an hourly schedule with the least grace, stops the worker that fired it,
// moves its next fire five hours back (the fires no worker enqueued during an outage),
// starts a worker and waits until the schedule has caught up. It returns the first missed
// fire time and the schedule's state.
func outage(t *testing.T, policy venturi.MissedPolicy, backfill int) (*venturi.Queue, time.Time, venturi.ScheduleInfo, []venturi.Fire) {
	t.Helper()
	ctx := context.Background()
	pool, q := newQueue(t)
	schedule(t, q, venturi.Schedule{Name: "hourly", Cron: "0 * * * *", Task: tick{Name: "hourly"},
		Missed: policy, Backfill: backfill, Grace: venturi.MinCronGrace})
	cfg := fastConfig()
	w := startWorkerFor[queued](t, pool, make(chan<- string, 1), cfg)
	stopWorker(t, w)
	var from time.Time
	if err := pool.QueryRow(ctx, `UPDATE venturi_cron SET next_fire = date_trunc('hour', now()) - interval '5 hours'
		RETURNING next_fire`).Scan(&from); err != nil {
		t.Fatal(err)
	}
	startWorkerFor[queued](t, pool, make(chan<- string, 1), cfg)
	var si venturi.ScheduleInfo
	eventually(t, within, "the catch-up", func() bool {
		si = scheduleInfo(t, q, "hourly")
		return si.NextFire.After(from.Add(5 * time.Hour))
	})
	return q, from, si, fires(t, q, "hourly")
}

// TestCronMissedPolicies: after an outage of five hours and some minutes, an hourly
// schedule enqueues one job for the six missed fires (once), none (skip), or the latest
// three (backfill 3), and says what it skipped and coalesced.
func TestCronMissedPolicies(t *testing.T) {
	t.Parallel()
	t.Run("once", func(t *testing.T) {
		t.Parallel()
		_, from, si, fs := outage(t, venturi.MissedOnce, 0)
		end := si.LastRunAt.Truncate(time.Hour) // the latest missed fire (the hour may have turned)
		n := int(end.Sub(from)/time.Hour) + 1
		if len(fs) != 1 || !fs[0].At.Equal(end) || fs[0].Covers != n || fs[0].Skipped != 0 ||
			si.Coalesced != int64(n-1) || si.Skipped != 0 || !si.LastFire.Equal(end) || si.LastJob != fs[0].JobID {
			t.Errorf("fires %+v, state %+v; want one at %v covering %d", fs, si, end, n)
		}
	})
	t.Run("skip", func(t *testing.T) {
		t.Parallel()
		_, from, si, fs := outage(t, venturi.MissedSkip, 0)
		n := int(si.LastRunAt.Truncate(time.Hour).Sub(from)/time.Hour) + 1
		if len(fs) != 0 || si.Skipped != int64(n) || si.Fires != 0 || !si.LastFire.IsZero() {
			t.Errorf("fires %+v, state %+v; want none, %d skipped", fs, si, n)
		}
	})
	t.Run("backfill", func(t *testing.T) {
		t.Parallel()
		_, from, si, fs := outage(t, venturi.MissedBackfill, 3)
		end := si.LastRunAt.Truncate(time.Hour)
		n := int(end.Sub(from)/time.Hour) + 1
		if len(fs) != 3 || !fs[2].At.Equal(end) || fs[0].Skipped != n-3 || si.Skipped != int64(n-3) || si.Fires != 3 {
			t.Fatalf("fires %+v, state %+v; want the last 3 of %d", fs, si, n)
		}
		for i, f := range fs {
			if f.Covers != 1 || (i > 0 && f.At.Sub(fs[i-1].At) != time.Hour) {
				t.Errorf("fire %d: %+v", i, f)
			}
		}
	})
}

// TestCronPauseResumeRemove: a paused schedule does not fire while another keeps firing;
// a resumed one fires from the next fire time after the resume, without catching up on
// the paused period (even with backfill); a removed one is gone with its ledger, its jobs
// stay, and nothing fires it again.
func TestCronPauseResumeRemove(t *testing.T) {
	slow(t)
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	schedule(t, q, venturi.Schedule{Name: "target", Cron: "* * * * * *", Task: tick{Name: "target"},
		Missed: venturi.MissedBackfill, Backfill: 100})
	schedule(t, q, venturi.Schedule{Name: "witness", Cron: "* * * * * *", Task: tick{Name: "witness"}})
	startWorkerFor[queued](t, pool, make(chan<- string, 1), fastConfig())
	witnessed := func(n int) {
		t.Helper()
		base := len(fires(t, q, "witness"))
		eventually(t, within, "witness fires", func() bool { return len(fires(t, q, "witness")) >= base+n })
	}
	eventually(t, within, "target fires", func() bool { return len(fires(t, q, "target")) >= 2 })

	if err := q.PauseSchedule(ctx, "target"); err != nil {
		t.Fatal(err)
	}
	if err := q.PauseSchedule(ctx, "target"); err != nil { // idempotent
		t.Fatal(err)
	}
	paused := fires(t, q, "target")
	witnessed(3)
	if got := fires(t, q, "target"); len(got) != len(paused) {
		t.Fatalf("a paused schedule fired: %d -> %d fires", len(paused), len(got))
	}
	if si := scheduleInfo(t, q, "target"); !si.Paused || si.PausedAt.IsZero() {
		t.Fatalf("state %+v, want paused", si)
	}

	var resumedAt time.Time
	if err := pool.QueryRow(ctx, `SELECT now()`).Scan(&resumedAt); err != nil {
		t.Fatal(err)
	}
	if err := q.ResumeSchedule(ctx, "target"); err != nil {
		t.Fatal(err)
	}
	eventually(t, within, "fires after the resume", func() bool { return len(fires(t, q, "target")) >= len(paused)+2 })
	after := fires(t, q, "target")
	if first := after[len(paused)]; !first.At.After(resumedAt) || first.Skipped != 0 || first.Covers != 1 {
		t.Errorf("first fire after the resume (at %v): %+v; the paused period must not be caught up", resumedAt, first)
	}
	if si := scheduleInfo(t, q, "target"); si.Paused || si.Skipped != 0 {
		t.Errorf("state %+v after the resume", si)
	}

	if ok, err := q.RemoveSchedule(ctx, "target"); err != nil || !ok {
		t.Fatalf("remove = %v, %v", ok, err)
	}
	jobs := countJobs(t, pool, "kind = 'tick_target'")
	witnessed(2)
	if n := countJobs(t, pool, "kind = 'tick_target'"); n != jobs || n < len(after) {
		t.Errorf("jobs of the removed schedule: %d, then %d (fires %d)", jobs, n, len(after))
	}
	if _, err := q.ScheduleByName(ctx, "target"); !errors.Is(err, venturi.ErrNoSchedule) {
		t.Errorf("ScheduleByName after remove: %v", err)
	}
	if fs := fires(t, q, "target"); len(fs) != 0 {
		t.Errorf("%d ledger rows after remove", len(fs))
	}
	if ok, err := q.RemoveSchedule(ctx, "target"); err != nil || ok {
		t.Errorf("second remove = %v, %v", ok, err)
	}
	if err := q.PauseSchedule(ctx, "target"); !errors.Is(err, venturi.ErrNoSchedule) {
		t.Errorf("pause of a removed schedule: %v", err)
	}
	all, err := q.Schedules(ctx)
	if err != nil || len(all) != 1 || all[0].Name != "witness" {
		t.Errorf("Schedules = %+v, %v", all, err)
	}
}

// TestCronRegistration: registering is idempotent and safe from many processes at once;
// a changed task takes effect at the pending next fire, a changed expression recomputes
// the next fire; invalid definitions are refused.
func TestCronRegistration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	def := venturi.Schedule{Name: "nightly", Cron: "0 3 * * *", TimeZone: "Europe/Berlin", Task: tick{Name: "reg", V: 1}}

	// Eight "services" register the same schedule at once: one creates it.
	var mu sync.Mutex
	var results []venturi.ScheduleResult
	concurrently(8, func(int) {
		res, err := venturi.NewQueue(pool, venturi.QueueConfig{}).Schedule(ctx, def)
		if err != nil {
			t.Error(err)
		}
		mu.Lock()
		results = append(results, res)
		mu.Unlock()
	})
	created := 0
	for _, r := range results {
		if r.Created {
			created++
		}
		if r.Changed || !r.NextFire.Equal(results[0].NextFire) {
			t.Errorf("result %+v", r)
		}
	}
	if created != 1 {
		t.Fatalf("%d registrations created the schedule", created)
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	if nf := results[0].NextFire.In(berlin); nf.Hour() != 3 || nf.Minute() != 0 {
		t.Errorf("next fire %v", nf)
	}
	before := scheduleInfo(t, q, "nightly")
	if res := schedule(t, q, def); res.Created || res.Changed || !res.NextFire.Equal(before.NextFire) {
		t.Errorf("same definition again: %+v", res)
	}
	if si := scheduleInfo(t, q, "nightly"); !si.UpdatedAt.Equal(before.UpdatedAt) {
		t.Errorf("an unchanged registration wrote the row")
	}

	// A new payload: same next fire, which enqueues the new task.
	def.Task = tick{Name: "reg", V: 2}
	if res := schedule(t, q, def); !res.Changed || !res.NextFire.Equal(before.NextFire) {
		t.Errorf("new payload: %+v", res)
	}
	// Make the pending fire due now and let a worker fire it.
	if _, err := pool.Exec(ctx, `UPDATE venturi_cron SET next_fire = date_trunc('second', now())`); err != nil {
		t.Fatal(err)
	}
	startWorkerFor[queued](t, pool, make(chan<- string, 1), fastConfig())
	eventually(t, within, "the fire", func() bool { return len(fires(t, q, "nightly")) == 1 })
	fs := fires(t, q, "nightly")
	var got tick
	decodePayload(t, jobByID(t, q, fs[0].JobID), &got)
	if got.V != 2 {
		t.Errorf("the fire enqueued %+v, want the new payload", got)
	}
	// A new expression: the next fire follows it, from now.
	def.Cron = "30 4 * * *"
	res := schedule(t, q, def)
	if nf := res.NextFire.In(berlin); !res.Changed || nf.Hour() != 4 || nf.Minute() != 30 || !nf.After(fs[0].At) {
		t.Errorf("new expression: %+v", res)
	}
	if si := scheduleInfo(t, q, "nightly"); si.Cron != "30 4 * * *" || !si.NextFire.Equal(res.NextFire) || si.Kind != "tick_reg" {
		t.Errorf("state %+v", si)
	}

	for _, bad := range []venturi.Schedule{
		{Name: "", Cron: "* * * * *", Task: tick{Name: "x"}},
		{Name: "x", Cron: "* * *", Task: tick{Name: "x"}},
		{Name: "x", Cron: "0 0 31 2 *", Task: tick{Name: "x"}},
		{Name: "x", Cron: "* * * * *", TimeZone: "Mars/Olympus", Task: tick{Name: "x"}},
		{Name: "x", Cron: "* * * * *", TimeZone: "Local", Task: tick{Name: "x"}},
		{Name: "x", Cron: "* * * * *", Task: tick{Name: "x"}, Missed: venturi.MissedBackfill},
		{Name: "x", Cron: "* * * * *", Task: tick{Name: "x"}, Missed: venturi.MissedBackfill, Backfill: venturi.MaxCronBackfill + 1},
		{Name: "x", Cron: "* * * * *", Task: tick{Name: "x"}, Missed: 7},
		{Name: "x", Cron: "* * * * *", Task: tick{Name: "x"}, Grace: -time.Second},
		{Name: "x", Cron: "* * * * *", Task: tick{Name: "x"}, Grace: time.Millisecond},
		{Name: "x", Cron: "* * * * *"},
	} {
		if _, err := q.Schedule(ctx, bad); err == nil {
			t.Errorf("Schedule(%+v) succeeded", bad)
		}
	}
}

// TestCronDedupKeyKeepsThePendingJob: a scheduled task with a dedup key does not pile up
// jobs while its previous fire's job is still pending: each fire is kept into it.
func TestCronDedupKeyKeepsThePendingJob(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	schedule(t, q, venturi.Schedule{Name: "dedup", Cron: "* * * * * *", Task: keyedTick{}})
	startWorkerFor[queued](t, pool, make(chan<- string, 1), fastConfig())
	eventually(t, within, "three fires", func() bool { return len(fires(t, q, "dedup")) >= 3 })
	fs := fires(t, q, "dedup")
	if fs[0].Action != venturi.ActionInserted {
		t.Errorf("first fire %v", fs[0].Action)
	}
	for _, f := range fs[1:] {
		if f.Action != venturi.ActionKept || f.JobID != fs[0].JobID {
			t.Errorf("fire %+v, want kept into %s", f, fs[0].JobID)
		}
	}
	if n := countJobs(t, pool, "kind = 'keyed_tick'"); n != 1 {
		t.Errorf("%d jobs", n)
	}
}

type keyedTick struct{}

func (keyedTick) Kind() string               { return "keyed_tick" }
func (keyedTick) DedupKey() venturi.DedupKey { return "the-one" }

// TestCronMissedPoliciesAfterARealOutage: a per-second schedule (grace 1 s) fires, its only
// worker stops for six seconds of database time, and another worker starts. Whatever the
// policy, every fire time from the first fire to the last is accounted for exactly once in
// the ledger (a fire standing for itself, coalesced into a later fire, or skipped), and
// each fire has its own job; the outage's fires are one job (once), none (skip) or the
// latest two (backfill 2).
func TestCronMissedPoliciesAfterARealOutage(t *testing.T) {
	slow(t)
	t.Parallel()
	for _, tc := range []struct {
		policy   venturi.MissedPolicy
		backfill int
	}{{venturi.MissedOnce, 0}, {venturi.MissedSkip, 0}, {venturi.MissedBackfill, 2}} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool, q := newQueue(t)
			schedule(t, q, venturi.Schedule{Name: "s", Cron: "* * * * * *", Task: tick{Name: "outage"},
				Missed: tc.policy, Backfill: tc.backfill, Grace: venturi.MinCronGrace})
			dbNow := func() time.Time {
				var now time.Time
				if err := pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
					t.Fatal(err)
				}
				return now
			}
			w := startWorkerFor[queued](t, pool, make(chan<- string, 1), fastConfig())
			eventually(t, within, "two fires", func() bool { return len(fires(t, q, "s")) >= 2 })
			stopWorker(t, w)
			stopped := dbNow()
			before := fires(t, q, "s")
			eventually(t, within, "six fire times without a worker", func() bool { return dbNow().After(stopped.Add(6 * time.Second)) })
			restarted := dbNow()
			startWorkerFor[queued](t, pool, make(chan<- string, 1), fastConfig())
			eventually(t, within, "the catch-up and two fires after it", func() bool {
				fs := fires(t, q, "s")
				return len(fs) >= 2 && fs[len(fs)-2].At.After(restarted)
			})
			fs := fires(t, q, "s")
			// Accounting: every fire time from the first to the last, exactly once.
			// The first fire's skipped times (a worker that started late on a loaded machine
			// skips the fire times it missed by more than the grace) come before the span.
			accounted, coveredMax, skipped := 0, 0, fs[0].Skipped
			for i, f := range fs {
				accounted += f.Covers
				coveredMax = max(coveredMax, f.Covers)
				if i > 0 {
					accounted += f.Skipped
					skipped += f.Skipped
				}
				if i > 0 && !f.At.After(fs[i-1].At) {
					t.Errorf("fires out of order: %v then %v", fs[i-1].At, f.At)
				}
			}
			if span := int(fs[len(fs)-1].At.Sub(fs[0].At)/time.Second) + 1; accounted != span {
				t.Errorf("%d fire times accounted for over %d seconds: %+v", accounted, span, fs)
			}
			if n := countJobs(t, pool, "kind = 'tick_outage'"); n != len(fs) {
				t.Errorf("%d jobs for %d fires", n, len(fs))
			}
			si := scheduleInfo(t, q, "s")
			if si.Skipped != int64(skipped) || si.Fires != int64(len(fs)) {
				t.Errorf("state %+v; ledger: %d fires, %d skipped", si, len(fs), skipped)
			}
			// The fires of fire times the outage made late: those of the catch-up's
			// transaction enqueued more than the grace after their time (database clock).
			// Counted from the enqueue, not from the restart: on a loaded machine the
			// catch-up may come seconds after the worker was started, and fire times
			// between the two are late too.
			var gap []venturi.Fire
			catchUp := fs[len(before)].EnqueuedAt // the first transaction after the outage
			for _, f := range fs[len(before):] {
				if f.EnqueuedAt.Equal(catchUp) && f.EnqueuedAt.Sub(f.At) > venturi.MinCronGrace {
					gap = append(gap, f)
				}
			}
			switch tc.policy {
			case venturi.MissedOnce:
				if coveredMax < 4 || skipped != 0 || si.Coalesced < 3 || len(gap) != 1 {
					t.Errorf("once: most covered %d, skipped %d, coalesced %d, %d fires in the outage; fires %+v", coveredMax, skipped, si.Coalesced, len(gap), fs)
				}
			case venturi.MissedSkip:
				if coveredMax != 1 || skipped < 4 || len(gap) != 0 {
					t.Errorf("skip: most covered %d, skipped %d, %d fires in the outage: %+v", coveredMax, skipped, len(gap), fs)
				}
			case venturi.MissedBackfill:
				if coveredMax != 1 || skipped < 2 || len(gap) != tc.backfill {
					t.Errorf("backfill: most covered %d, skipped %d, %d fires in the outage: %+v", coveredMax, skipped, len(gap), fs)
				}
			}
		})
	}
}

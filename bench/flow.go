package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi"
)

// Scenario 11: flow control (issue 11). Claim throughput end to end, as in scenario 4
// (N jobs enqueued first, one worker process with venturi's defaults drains them), for
// plain jobs and for jobs that go through the gated claim (venturi_claim_gated): per-key
// slots over 1,000 keys, a kind concurrency limit, a queue concurrency limit, partitions
// alone and a per-partition rate limit, each set so that it is not the bottleneck (see
// flowVariants). The variants rotate their order from one repetition to the next, and
// each is compared with the plain run of the same repetition.
//
// Fairness: one partition holds 90% of N jobs, enqueued first, the rest spread over 9 (or
// 99) other partitions; the other partitions' p99 wait is compared with a run of only
// their jobs (the same jobs, enqueued the same way, without the flood), and, for
// reference, with the flooded run without partitions (plain jobs, claimed in order).

// The kinds of scenario 11.
const (
	kindFlowSlot  = "bench_flow_slot"
	kindFlowLimit = "bench_flow_limit"
	kindFlowPart  = "bench_flow_part"
	kindFlowRate  = "bench_flow_rate"
	kindFlowFair  = "bench_flow_fair"
)

// The limits of scenario 11's limited kinds. venturi calls Limits on a task type's zero
// value, so they are package state, set by the same flags in the bench and in its worker
// processes (-flow-kind-limit, -flow-rate).
var (
	// flowKindConcurrency is FlowLimitTask's kind concurrency and the queue limit of the
	// queue-limit variant. A worker holds up to Concurrency + Prefetch claimed jobs (100 +
	// 1,000 with the defaults), all of them running as far as the gates count, so the
	// limit must be above 1,100 not to be the bottleneck.
	flowKindConcurrency = 2000
	// flowRateN is FlowRateTask's rate, starts per second in each partition.
	flowRateN = 1000
)

// FlowSlotTask takes slot Key, at most Limit running at once.
type FlowSlotTask struct {
	N     int    `json:"n"`
	Key   string `json:"k"`
	Limit int    `json:"l"`
}

// Kind names the slotted kind.
func (FlowSlotTask) Kind() string { return kindFlowSlot }

// Slot is the job's slot: its key, with its limit, waiting when full.
func (t FlowSlotTask) Slot() venturi.Slot { return venturi.Slot{Key: t.Key, Limit: t.Limit} }

// Handle does nothing.
func (FlowSlotTask) Handle(ctx context.Context, run *venturi.Run[struct{}], s *benchState) (venturi.Outcome, error) {
	return venturi.Completed(), nil
}

// FlowLimitTask is of a kind with a concurrency limit (flowKindConcurrency).
type FlowLimitTask struct {
	N int `json:"n"`
}

// Kind names the limited kind.
func (FlowLimitTask) Kind() string { return kindFlowLimit }

// Limits is the kind's concurrency limit.
func (FlowLimitTask) Limits() venturi.Limits { return venturi.Limits{Concurrency: flowKindConcurrency} }

// Handle does nothing.
func (FlowLimitTask) Handle(ctx context.Context, run *venturi.Run[struct{}], s *benchState) (venturi.Outcome, error) {
	return venturi.Completed(), nil
}

// FlowPartTask belongs to partition P; its kind has no limits.
type FlowPartTask struct {
	N int    `json:"n"`
	P string `json:"p"`
}

// Kind names the partitioned kind.
func (FlowPartTask) Kind() string { return kindFlowPart }

// Partition is the job's partition.
func (t FlowPartTask) Partition() string { return t.P }

// Handle does nothing.
func (FlowPartTask) Handle(ctx context.Context, run *venturi.Run[struct{}], s *benchState) (venturi.Outcome, error) {
	return venturi.Completed(), nil
}

// FlowRateTask belongs to partition P, and its kind has a rate limit per partition
// (flowRateN a second).
type FlowRateTask struct {
	N int    `json:"n"`
	P string `json:"p"`
}

// Kind names the rate-limited kind.
func (FlowRateTask) Kind() string { return kindFlowRate }

// Partition is the job's partition.
func (t FlowRateTask) Partition() string { return t.P }

// Limits is the kind's rate, per partition.
func (FlowRateTask) Limits() venturi.Limits {
	return venturi.Limits{Rate: venturi.Rate{N: flowRateN, Per: time.Second, PerPartition: true}}
}

// Handle does nothing.
func (FlowRateTask) Handle(ctx context.Context, run *venturi.Run[struct{}], s *benchState) (venturi.Outcome, error) {
	return venturi.Completed(), nil
}

// FlowFairTask is a fairness job of key T, in partition P: P is T, or empty for the
// reference run without partitions (plain jobs).
type FlowFairTask struct {
	N int    `json:"n"`
	T string `json:"t"`
	P string `json:"p,omitempty"`
}

// Kind names the fairness kind.
func (FlowFairTask) Kind() string { return kindFlowFair }

// Partition is the job's partition ("" for none).
func (t FlowFairTask) Partition() string { return t.P }

// Handle does nothing.
func (FlowFairTask) Handle(ctx context.Context, run *venturi.Run[struct{}], s *benchState) (venturi.Outcome, error) {
	return venturi.Completed(), nil
}

// registerFlow registers the kind a `bench worker -flow NAME` works.
func registerFlow(w *venturi.Worker[*benchState], name string) error {
	switch name {
	case "slot":
		venturi.MustRegister[FlowSlotTask](w)
	case "limit":
		venturi.MustRegister[FlowLimitTask](w)
	case "part":
		venturi.MustRegister[FlowPartTask](w)
	case "rate":
		venturi.MustRegister[FlowRateTask](w)
	case "fair":
		venturi.MustRegister[FlowFairTask](w)
	default:
		return fmt.Errorf("unknown -flow %q", name)
	}
	return nil
}

// Sizes of scenario 11.
const (
	flowSlotKeys   = 1000
	flowPartitions = 100
	flowFloodShare = 0.9 // of the fairness runs' jobs, in the flooded partition
	flowFloodKey   = "big"
	// slotUnbound is the slot limit of the slots-unbound variant, more than the jobs of
	// any key at the full size (100 per key), so that comparing it with the slots variant
	// shows whether the slot limit binds.
	slotUnbound = 1000
)

// flowVariant is one throughput configuration of scenario 11.
type flowVariant struct {
	name   string // short name, the report's key
	label  string // what it configures
	kind   string
	worker string // the worker's -flow value; "" for the no-op kind
	task   func(i int) venturi.Task
	qlimit bool // the queue gets a concurrency limit (flowKindConcurrency)
	target bool // the >= 0.7x of plain target applies
}

// flowVariants are the throughput variants; the first is the plain path.
func flowVariants(slotLimit int) []flowVariant {
	return []flowVariant{
		{name: "plain", label: "plain jobs (`NoopTask`, scenario 4's path)", kind: kindNoop, task: noopTask},
		{name: "slots", label: fmt.Sprintf("`Slot{Key, Limit: %d}` over %d keys, jobs round-robin over the keys", slotLimit, flowSlotKeys),
			kind: kindFlowSlot, worker: "slot", target: true,
			task: func(i int) venturi.Task {
				return FlowSlotTask{N: i, Key: fmt.Sprintf("key-%04d", i%flowSlotKeys), Limit: slotLimit}
			}},
		{name: "slots-unbound", label: fmt.Sprintf("as slots with `Limit: %d`, above the jobs of any key: the slot never binds", slotUnbound),
			kind: kindFlowSlot, worker: "slot",
			task: func(i int) venturi.Task {
				return FlowSlotTask{N: i, Key: fmt.Sprintf("key-%04d", i%flowSlotKeys), Limit: slotUnbound}
			}},
		{name: "kind-limit", label: fmt.Sprintf("kind `Limits{Concurrency: %d}`", flowKindConcurrency),
			kind: kindFlowLimit, worker: "limit", target: true,
			task: func(i int) venturi.Task { return FlowLimitTask{N: i} }},
		{name: "queue-limit", label: fmt.Sprintf("plain jobs in a queue with `SetQueueConcurrency(%d)`", flowKindConcurrency),
			kind: kindNoop, task: noopTask, qlimit: true, target: true},
		{name: "partitions", label: fmt.Sprintf("`Partition()` over %d partitions, no limits (round-robin alone)", flowPartitions),
			kind: kindFlowPart, worker: "part",
			task: func(i int) venturi.Task { return FlowPartTask{N: i, P: fmt.Sprintf("p-%03d", i%flowPartitions)} }},
		{name: "rate", label: fmt.Sprintf("%d partitions, kind `Rate{N: %d, Per: 1s, PerPartition: true}`", flowPartitions, flowRateN),
			kind: kindFlowRate, worker: "rate", target: true,
			task: func(i int) venturi.Task { return FlowRateTask{N: i, P: fmt.Sprintf("p-%03d", i%flowPartitions)} }},
	}
}

// rotate returns s rotated left by k, so that every element takes every position over
// len(s) repetitions.
func rotate[T any](s []T, k int) []T {
	if len(s) == 0 {
		return nil
	}
	k %= len(s)
	return append(append([]T(nil), s[k:]...), s[:k]...)
}

// flowArgs are the worker flags that carry scenario 11's limits.
func flowArgs(worker string) []string {
	if worker == "" {
		return nil
	}
	return []string{"-flow", worker, "-flow-kind-limit", fmt.Sprint(flowKindConcurrency), "-flow-rate", fmt.Sprint(flowRateN)}
}

// scenario 11: flow control.
func (b *bencher) scenarioFlow(ctx context.Context) error {
	n := b.o.sz.e2eJobs
	fr := &flowReport{jobs: n, slotLimit: b.o.flowSlotLimit, kindLimit: flowKindConcurrency, rateN: flowRateN,
		tput: map[string][]float64{}, cpuWorker: map[string][]float64{}, cpuDB: map[string][]float64{},
		fair: map[int]map[string][]float64{}, fairP50: map[int]map[string][]float64{}, fairPos: map[int]map[string][]float64{},
		floodJPS: map[int][]float64{}}
	b.rep.flow = fr
	if err := b.recordFlowLimits(ctx); err != nil {
		return err
	}
	var variants []flowVariant
	for _, v := range flowVariants(b.o.flowSlotLimit) {
		if b.o.flowVariants == nil || b.o.flowVariants[v.name] {
			variants = append(variants, v)
		}
	}
	for _, v := range variants {
		fr.variants = append(fr.variants, flowVariantDesc{name: v.name, label: v.label, target: v.target})
	}
	for rep := range b.o.reps {
		for _, on := range b.backdropPhases(rep) {
			b.backdropWant(on)
			for _, v := range rotate(variants, rep) {
				jps, cpu, err := b.flowThroughput(ctx, v, n)
				if err != nil {
					return fmt.Errorf("%s: %w", v.name, err)
				}
				if err := b.statementsLog(ctx, backdropLabel(v.name, on), n); err != nil {
					return err
				}
				if on { // -backdrop: the same run over the blocked workflow jobs
					b.backdropFlow(v.name, n, backdropOn, jps, cpu)
					logf("  11. %s over %d %s backdrop jobs, rep %d: %.0f jobs/s (worker CPU %v, PostgreSQL backends %v)", v.name, b.bd.n, b.bd.kind, rep, jps, cpu.worker, cpu.db)
					continue
				}
				b.backdropFlow(v.name, n, backdropOff, jps, cpu)
				fr.tput[v.name] = append(fr.tput[v.name], jps)
				if cpu.ok {
					fr.cpuWorker[v.name] = append(fr.cpuWorker[v.name], float64(cpu.worker.Milliseconds())*1000/float64(n))
					fr.cpuDB[v.name] = append(fr.cpuDB[v.name], float64(cpu.db.Milliseconds())*1000/float64(n))
				}
				logf("  11. %s rep %d: %.0f jobs/s (worker CPU %v, PostgreSQL backends %v)", v.name, rep, jps, cpu.worker, cpu.db)
			}
		}
	}
	b.backdropWant(false)
	if err := b.backdropUnload(ctx); err != nil {
		return err
	}
	for _, others := range b.o.flowOthers {
		fr.othersOrder = append(fr.othersOrder, others)
		fr.fair[others], fr.fairP50[others], fr.fairPos[others] = map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
		for rep := range b.o.reps {
			for _, c := range rotate(fairCases, rep) {
				w, pos, jps, err := b.flowFairness(ctx, c, n, others)
				if err != nil {
					return fmt.Errorf("fairness, %d other keys, %s: %w", others, c, err)
				}
				p50, p99, pos99 := pct(w, .5), pct(w, .99), quantile(pos, .99)
				fr.fair[others][c] = append(fr.fair[others][c], p99)
				fr.fairP50[others][c] = append(fr.fairP50[others][c], p50)
				fr.fairPos[others][c] = append(fr.fairPos[others][c], pos99)
				if c == fairFlooded {
					fr.floodJPS[others] = append(fr.floodJPS[others], jps)
				}
				logf("  11. fairness, %d other keys, %s, rep %d: other keys' wait p50 %.0f ms, p99 %.0f ms, p99 position %.0f (%d jobs); %.0f jobs/s overall",
					others, c, rep, p50, p99, pos99, len(w), jps)
			}
		}
	}
	fr.loads = b.loads
	return nil
}

// recordFlowLimits records the limited kinds' limits before their jobs are enqueued, as
// a deployment does (workers before producers): jobs of a kind with limits are gated when
// enqueued, and the measured worker's start then finds the limits unchanged. Otherwise the
// worker would gate the pending jobs at start, inside the measured time.
func (b *bencher) recordFlowLimits(ctx context.Context) error {
	pool, err := poolFor(ctx, b.o.url, venturiSchema, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	w, err := venturi.NewWorker(pool, &benchState{}, venturi.Config{Logger: quietLogger(), PollOnly: true})
	if err != nil {
		return err
	}
	venturi.MustRegister[FlowLimitTask](w)
	venturi.MustRegister[FlowRateTask](w)
	if err := w.Start(ctx); err != nil {
		return err
	}
	return w.Stop(ctx)
}

// resetFlow empties the job table (the backdrop kept when wanted) and the gate state,
// and lifts queue settings.
func (b *bencher) resetFlow(ctx context.Context) error {
	if err := b.resetVenturi(ctx); err != nil {
		return err
	}
	_, err := b.admin.Exec(ctx, "TRUNCATE "+venturiSchema+".venturi_gate, "+venturiSchema+".venturi_queue")
	return err
}

// flowThroughput drains n jobs of variant v and returns jobs/s and the CPU used.
func (b *bencher) flowThroughput(ctx context.Context, v flowVariant, n int) (float64, cpuUse, error) {
	if err := b.resetFlow(ctx); err != nil {
		return 0, cpuUse{}, err
	}
	if v.qlimit {
		if err := b.setQueueConcurrency(ctx, flowKindConcurrency); err != nil {
			return 0, cpuUse{}, err
		}
	}
	if err := b.enqueueBulkOf(ctx, libVenturi, n, v.task, nil); err != nil {
		return 0, cpuUse{}, err
	}
	// The variant measures what it says: its jobs are gated (part set) or plain.
	gated, err := gatedCount(ctx, b.admin)
	if err != nil {
		return 0, cpuUse{}, err
	}
	want := int64(0)
	if v.worker != "" {
		want = int64(n)
	}
	if gated != want {
		return 0, cpuUse{}, fmt.Errorf("%d of %d jobs gated, want %d", gated, n, want)
	}
	if err := b.settle(ctx, libVenturi); err != nil {
		return 0, cpuUse{}, err
	}
	if err := b.statementsReset(ctx); err != nil {
		return 0, cpuUse{}, err
	}
	b.noteLoad()
	args := append(flowArgs(v.worker), b.o.workerArgs...)
	el, _, cpu, err := b.workUntilArgs(ctx, libVenturi, "", args, b.allDone(libVenturi, v.kind, n))
	if err != nil {
		return 0, cpu, err
	}
	done, err := completedCount(ctx, b.admin, libVenturi, v.kind)
	if err != nil {
		return 0, cpu, err
	}
	if done != int64(n) {
		return 0, cpu, fmt.Errorf("%d of %d jobs completed", done, n)
	}
	return float64(n) / el.Seconds(), cpu, nil
}

// setQueueConcurrency limits the default queue through venturi's API.
func (b *bencher) setQueueConcurrency(ctx context.Context, limit int) error {
	pool, err := poolFor(ctx, b.o.url, venturiSchema, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	return venturi.NewQueue(pool, venturi.QueueConfig{}).SetQueueConcurrency(ctx, venturi.DefaultQueue, limit)
}

// gatedCount counts the jobs the gated claim takes (part IS NOT NULL).
func gatedCount(ctx context.Context, admin *pgxpool.Pool) (int64, error) {
	var n int64
	err := admin.QueryRow(ctx, "SELECT count(*) FROM "+venturiSchema+".venturi_job WHERE part IS NOT NULL").Scan(&n)
	return n, err
}

// The fairness cases.
const (
	fairUnflooded = "unflooded" // only the other keys' jobs, in partitions
	fairFlooded   = "flooded"   // the flood first, then the other keys' jobs, in partitions
	fairFIFO      = "fifo"      // as flooded, without partitions: plain jobs in claim order
)

var fairCases = []string{fairUnflooded, fairFlooded, fairFIFO}

// fairJobs returns the fairness jobs of a case, in enqueue order: the flooded key's first
// (none when unflooded), then the other keys' round-robin.
func fairJobs(c string, n, others int) []FlowFairTask {
	flood := int(float64(n) * flowFloodShare)
	rest := n - flood
	var out []FlowFairTask
	if c != fairUnflooded {
		for i := range flood {
			out = append(out, FlowFairTask{N: i, T: flowFloodKey})
		}
	}
	for i := range rest {
		out = append(out, FlowFairTask{N: flood + i, T: fmt.Sprintf("o-%02d", i%others)})
	}
	if c != fairFIFO {
		for i := range out {
			out[i].P = out[i].T
		}
	}
	return out
}

// flowFairness runs one fairness case and returns the other keys' waits and claim
// positions, and the run's jobs/s. A job's wait is its claim (attempted_at) minus the later of its enqueue
// (created_at) and the run's first claim, all on the database clock: every job was
// enqueued before the worker started, so this is the time from the start of the drain.
func (b *bencher) flowFairness(ctx context.Context, c string, n, others int) ([]time.Duration, []float64, float64, error) {
	if err := b.resetFlow(ctx); err != nil {
		return nil, nil, 0, err
	}
	jobs := fairJobs(c, n, others)
	if err := b.enqueueBulkOf(ctx, libVenturi, len(jobs), func(i int) venturi.Task { return jobs[i] }, nil); err != nil {
		return nil, nil, 0, err
	}
	if err := b.settle(ctx, libVenturi); err != nil {
		return nil, nil, 0, err
	}
	b.noteLoad()
	args := append(flowArgs("fair"), b.o.workerArgs...)
	el, _, _, err := b.workUntilArgs(ctx, libVenturi, "", args, b.allDone(libVenturi, kindFlowFair, len(jobs)))
	if err != nil {
		return nil, nil, 0, err
	}
	// The first claim, read on its own: in one statement with the rest, the statistics of
	// the table analyzed before the run (no completed jobs) once made the planner rescan
	// the table for every row (minutes).
	var t0 time.Time
	if err := b.admin.QueryRow(ctx, "SELECT min(attempted_at) FROM "+venturiSchema+".venturi_job_all").Scan(&t0); err != nil {
		return nil, nil, 0, err
	}
	// A job's position is the number of jobs claimed before it (in earlier claims).
	rows, err := b.admin.Query(ctx, `SELECT (EXTRACT(EPOCH FROM attempted_at - GREATEST(created_at, $2)) * 1e6)::bigint,
		       rank() OVER (ORDER BY attempted_at) - 1, payload->>'t'
		FROM `+venturiSchema+`.venturi_job_all WHERE kind = $1 AND state = 'completed'`, kindFlowFair, t0)
	if err != nil {
		return nil, nil, 0, err
	}
	defer rows.Close()
	var (
		waits []time.Duration
		pos   []float64
		all   int
	)
	for rows.Next() {
		var (
			us, p int64
			t     string
		)
		if err := rows.Scan(&us, &p, &t); err != nil {
			return nil, nil, 0, err
		}
		all++
		if t != flowFloodKey {
			waits = append(waits, time.Duration(us)*time.Microsecond)
			pos = append(pos, float64(p))
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, 0, err
	}
	if all != len(jobs) {
		return nil, nil, 0, fmt.Errorf("%d of %d jobs completed", all, len(jobs))
	}
	return waits, pos, float64(len(jobs)) / el.Seconds(), nil
}

// quantile returns the q-quantile of v (nearest rank below, as pct does).
func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*q)]
}

// noteLoad records the 1-minute load average before a measured run.
func (b *bencher) noteLoad() {
	if l, ok := loadAvg1(); ok {
		b.loads = append(b.loads, l)
	}
}

// loadAvg1 reads the 1-minute load average from /proc/loadavg.
func loadAvg1() (float64, bool) {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, false
	}
	return parseLoadAvg(string(raw))
}

// parseLoadAvg returns the first field of a /proc/loadavg line.
func parseLoadAvg(s string) (float64, bool) {
	f := strings.Fields(s)
	if len(f) == 0 {
		return 0, false
	}
	var l float64
	if _, err := fmt.Sscan(f[0], &l); err != nil {
		return 0, false
	}
	return l, true
}

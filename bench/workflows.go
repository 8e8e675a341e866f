package main

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// Scenarios 20 to 22 (issue 38): what workflows and chunks cost.
//
// 20. Handoff latency: a chain of N no-op workflow members, each needing the one before,
// worked by a worker in the bench process; for every link, from the upstream job's
// finish (its history row's finished_at: the finishing statement's now(), database
// clock) to the downstream job's claim (its attempted_at, the claim's now()) and to its
// handler's first line (the worker's clock moved onto the database clock by an offset
// measured against clock_timestamp()), with the release (the settle's now(), the job's
// run_at) in between.
//
// 21. Fan-in: one root, N members that need it (a group enqueued with the workflow, or
// spawned by the root's run with Run.Spawn), one fan-in node that needs them all; drained
// by one `bench worker` process as scenario 4 drains N plain jobs, which run in the same
// repetition as the reference.
//
// 22. Chunks: N jobs whose handler writes one row to a table, handled one by one (an
// INSERT per job) and with RegisterChunks (an INSERT of the chunk's rows per call).

// The kinds of scenarios 20 to 22 and of the backdrop.
const (
	kindHandoff     = "bench_wf_handoff"
	kindFanRoot     = "bench_wf_root"
	kindFanMember   = "bench_wf_member"
	kindFanIn       = "bench_wf_fanin"
	kindChunkOne    = "bench_chunk_one"
	kindChunkMany   = "bench_chunk_many"
	kindBackdrop    = "bench_backdrop"
	chunkRowTable   = venturiSchema + ".bench_chunk_row"
	handoffWarm     = 5 // links left out of scenario 20's percentiles: the worker's first claims
	fanInGroup      = "members"
	fanInRootNode   = "root"
	fanInNode       = "fanin"
	fanInPlain      = "plain"
	fanInGrouped    = "group"
	fanInSpawned    = "spawn"
	fanInBatched    = "batch"
	chunkOneByOne   = "one-by-one"
	chunkChunked    = "chunks"
	workflowTimeout = 15 * time.Minute
)

// HandoffTask is a link of scenario 20's chain.
type HandoffTask struct {
	Seq int `json:"seq"`
}

// Kind names the chain's kind.
func (HandoffTask) Kind() string { return kindHandoff }

// Handle records when the handler started (database clock).
func (t HandoffTask) Handle(ctx context.Context, run *venturi.Run[struct{}], s *benchState) (venturi.Outcome, error) {
	s.handoff.start(t.Seq)
	return venturi.Completed(), nil
}

// FanRootTask is scenario 21's root: a no-op, or with Spawn set, a run that spawns N
// members (Run.Spawn), written with its completion.
type FanRootTask struct {
	N     int  `json:"n"`
	Spawn bool `json:"spawn,omitempty"`
}

// Kind names the root's kind.
func (FanRootTask) Kind() string { return kindFanRoot }

// Handle spawns the members, or does nothing.
func (t FanRootTask) Handle(ctx context.Context, run *venturi.Run[struct{}], s *benchState) (venturi.Outcome, error) {
	if t.Spawn {
		if _, err := run.Spawn(ctx, fanMembers(0, t.N, "")); err != nil {
			return venturi.Outcome{}, venturi.Permanent(err)
		}
	}
	return venturi.Completed(), nil
}

// FanMemberTask is one of scenario 21's members.
type FanMemberTask struct {
	I int `json:"i"`
}

// Kind names the members' kind.
func (FanMemberTask) Kind() string { return kindFanMember }

// Handle does nothing.
func (FanMemberTask) Handle(ctx context.Context, run *venturi.Run[struct{}], s *benchState) (venturi.Outcome, error) {
	return venturi.Completed(), nil
}

// FanInTask is scenario 21's fan-in node.
type FanInTask struct{}

// Kind names the fan-in's kind.
func (FanInTask) Kind() string { return kindFanIn }

// Handle does nothing.
func (FanInTask) Handle(ctx context.Context, run *venturi.Run[struct{}], s *benchState) (venturi.Outcome, error) {
	return venturi.Completed(), nil
}

// ChunkOneTask is scenario 22's job handled one by one: its handler inserts its row.
type ChunkOneTask struct {
	N int `json:"n"`
}

// Kind names the one-by-one kind.
func (ChunkOneTask) Kind() string { return kindChunkOne }

// Handle writes the job's row, one INSERT.
func (t ChunkOneTask) Handle(ctx context.Context, run *venturi.Run[struct{}], s *benchState) (venturi.Outcome, error) {
	_, err := s.db.Exec(ctx, "INSERT INTO bench_chunk_row (n, call) VALUES ($1, $2) ON CONFLICT (n) DO NOTHING", t.N, s.calls.Add(1))
	if err != nil {
		return venturi.Outcome{}, err
	}
	return venturi.Completed(), nil
}

// ChunkManyTask is scenario 22's job handled in chunks (registerChunks).
type ChunkManyTask struct {
	N int `json:"n"`
}

// Kind names the chunked kind.
func (ChunkManyTask) Kind() string { return kindChunkMany }

// BackdropTask is the kind of the backdrop's blocked jobs, which no worker registers.
type BackdropTask struct {
	I int `json:"i"`
}

// Kind names the backdrop's kind.
func (BackdropTask) Kind() string { return kindBackdrop }

// registerWorkflowKinds registers what a `bench worker -wf` works: scenario 21's kinds
// and the no-op kind of its plain reference.
func registerWorkflowKinds(w *venturi.Worker[*benchState]) {
	venturi.MustRegister[NoopTask](w)
	venturi.MustRegister[FanRootTask](w)
	venturi.MustRegister[FanMemberTask](w)
	venturi.MustRegister[FanInTask](w)
}

// registerChunks registers what a `bench worker -chunks MODE` works: the one-by-one kind
// (MODE one) or the chunked kind with chunks of up to size jobs (MODE many), whose handler
// inserts every item's row in one statement.
func registerChunks(w *venturi.Worker[*benchState], mode string, size int) error {
	switch mode {
	case "one":
		venturi.MustRegister[ChunkOneTask](w)
	case "many":
		return venturi.RegisterChunks(w, venturi.ChunkConfig[ChunkManyTask]{Size: size},
			func(ctx context.Context, items []*venturi.ChunkItem[ChunkManyTask, struct{}], s *benchState) error {
				ns := make([]int32, len(items))
				for i, it := range items {
					ns[i] = int32(it.Task.N)
				}
				_, err := s.db.Exec(ctx, "INSERT INTO bench_chunk_row (n, call) SELECT unnest($1::int[]), $2 ON CONFLICT (n) DO NOTHING", ns, s.calls.Add(1))
				return err
			})
	default:
		return fmt.Errorf("unknown -chunks %q (one or many)", mode)
	}
	return nil
}

// ---- scenario 20: handoff latency --------------------------------------------------------

// handoffRec records, per link, when its handler started: Unix µs on the database clock
// (this process's wall clock plus offsetUs).
type handoffRec struct {
	offsetUs, rttUs int64
	started         []atomic.Int64
}

func (r *handoffRec) start(seq int) {
	if r == nil || seq < 0 || seq >= len(r.started) {
		return
	}
	r.started[seq].CompareAndSwap(0, time.Now().UnixMicro()+r.offsetUs)
}

// chainLink is one job of the chain as the database recorded it, with its handler's start
// (Unix µs, database clock; 0 when unknown).
type chainLink struct {
	seq                         int
	released, claimed, finished time.Time
	startedUs                   int64
}

// handoffs are the latencies of a chain's links, one per link after the first warm ones.
type handoffs struct {
	release, claim, handler, releaseToClaim []time.Duration
	hop                                     time.Duration // mean finish-to-finish per link
}

// handoffLatencies measures every link of a chain (links in any order, seqs 0…n-1) from
// its upstream's finish, skipping the first warm links: to the release (run_at), the
// claim (attempted_at) and the handler's start (when known); and from the release to the
// claim.
func handoffLatencies(links []chainLink, warm int) (handoffs, error) {
	s := slices.Clone(links)
	slices.SortFunc(s, func(a, b chainLink) int { return a.seq - b.seq })
	var h handoffs
	for i, l := range s {
		if l.seq != i {
			return h, fmt.Errorf("chain: link %d missing (found %d)", i, l.seq)
		}
	}
	for i := 1 + warm; i < len(s); i++ {
		up, down := s[i-1].finished, s[i]
		h.release = append(h.release, down.released.Sub(up))
		h.claim = append(h.claim, down.claimed.Sub(up))
		h.releaseToClaim = append(h.releaseToClaim, down.claimed.Sub(down.released))
		if down.startedUs != 0 {
			h.handler = append(h.handler, time.Duration(down.startedUs-up.UnixMicro())*time.Microsecond)
		}
	}
	if len(s) > 1 {
		h.hop = s[len(s)-1].finished.Sub(s[0].finished) / time.Duration(len(s)-1)
	}
	return h, nil
}

// handoffChain is the chain of n links, each needing the one before.
func handoffChain(n int) *venturi.Workflow {
	wf := venturi.NewWorkflow("handoff chain")
	var prev venturi.Node
	for i := range n {
		name := fmt.Sprintf("n%05d", i)
		if i == 0 {
			prev = wf.Add(name, HandoffTask{Seq: i})
		} else {
			prev = wf.Add(name, HandoffTask{Seq: i}, venturi.Needs(prev))
		}
	}
	return wf
}

// resetWorkflows empties the job tables and the workflow tables.
func (b *bencher) resetWorkflows(ctx context.Context) error {
	if err := resetJobs(ctx, b.admin); err != nil {
		return err
	}
	_, err := b.admin.Exec(ctx, "TRUNCATE "+venturiSchema+".venturi_workflow, "+venturiSchema+".venturi_workflow_node, "+
		venturiSchema+".venturi_workflow_output, "+venturiSchema+".venturi_workflow_inbox")
	return err
}

// scenario 20: handoff latency along a chain.
func (b *bencher) scenarioHandoff(ctx context.Context) error {
	n := b.o.handoffNodes
	t := newVariantTable("venturi")
	b.rep.handoff = &handoffReport{n: n, t: t}
	for rep := range b.o.reps {
		h, off, err := b.handoffRun(ctx, n)
		if err != nil {
			return err
		}
		b.rep.handoff.offsets = append(b.rep.handoff.offsets, off)
		add := func(metric string, v []time.Duration) {
			if len(v) == 0 {
				return
			}
			t.add("p50 "+metric+" (ms)", "venturi", pct(v, .5))
			t.add("p99 "+metric+" (ms)", "venturi", pct(v, .99))
		}
		add("upstream finish → downstream claim", h.claim)
		add("upstream finish → downstream handler start", h.handler)
		add("upstream finish → downstream released", h.release)
		add("downstream released → claimed", h.releaseToClaim)
		t.add("chain: finish to finish per link, mean (ms)", "venturi", float64(h.hop)/1e6)
		logf("  20. handoff, %d links, rep %d: finish→claim p50 %.2f ms p99 %.2f ms; finish→handler p50 %.2f ms p99 %.2f ms; "+
			"finish→release p50 %.2f ms; %.2f ms per link (clock offset %d µs ± %d)",
			n, rep, pct(h.claim, .5), pct(h.claim, .99), pct(h.handler, .5), pct(h.handler, .99), pct(h.release, .5),
			float64(h.hop)/1e6, off.offsetUs, off.rttUs/2)
	}
	return nil
}

// clockOffset is a measured offset of the database clock over this process's.
type clockOffset struct{ offsetUs, rttUs int64 }

// handoffRun enqueues a chain of n links, works it with a worker in this process
// (venturi.Config{}), waits for the workflow's end and reads the links' times.
func (b *bencher) handoffRun(ctx context.Context, n int) (handoffs, clockOffset, error) {
	if err := b.resetWorkflows(ctx); err != nil {
		return handoffs{}, clockOffset{}, err
	}
	pool, err := poolFor(ctx, b.o.url, venturiSchema, 0)
	if err != nil {
		return handoffs{}, clockOffset{}, err
	}
	defer pool.Close()
	off, rtt, err := dbClockOffset(ctx, pool)
	if err != nil {
		return handoffs{}, clockOffset{}, err
	}
	rec := &handoffRec{offsetUs: off, rttUs: rtt, started: make([]atomic.Int64, n)}
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	res, err := q.EnqueueWorkflow(ctx, handoffChain(n))
	if err != nil {
		return handoffs{}, clockOffset{}, err
	}
	if err := b.settle(ctx, libVenturi); err != nil {
		return handoffs{}, clockOffset{}, err
	}
	w, err := venturi.NewWorker(pool, &benchState{handoff: rec}, venturi.Config{Logger: quietLogger()})
	if err != nil {
		return handoffs{}, clockOffset{}, err
	}
	venturi.MustRegister[HandoffTask](w)
	if err := w.Start(ctx); err != nil {
		return handoffs{}, clockOffset{}, err
	}
	actx, cancel := context.WithTimeout(ctx, workflowTimeout)
	info, err := q.AwaitWorkflow(actx, res.ID)
	cancel()
	if serr := w.Stop(context.Background()); err == nil {
		err = serr
	}
	if err != nil {
		return handoffs{}, clockOffset{}, err
	}
	if info.State != venturi.WorkflowSucceeded {
		return handoffs{}, clockOffset{}, fmt.Errorf("handoff chain ended %s", info.State)
	}
	rows, err := b.admin.Query(ctx, `SELECT (payload->>'seq')::int, run_at, attempted_at, finished_at
		FROM `+venturiSchema+`.venturi_job_all WHERE workflow_id = $1 AND kind = $2 AND state = 'completed'`, pgUUID(res.ID), kindHandoff)
	if err != nil {
		return handoffs{}, clockOffset{}, err
	}
	defer rows.Close()
	var links []chainLink
	for rows.Next() {
		var l chainLink
		if err := rows.Scan(&l.seq, &l.released, &l.claimed, &l.finished); err != nil {
			return handoffs{}, clockOffset{}, err
		}
		if l.seq >= 0 && l.seq < n {
			l.startedUs = rec.started[l.seq].Load()
		}
		links = append(links, l)
	}
	if err := rows.Err(); err != nil {
		return handoffs{}, clockOffset{}, err
	}
	if len(links) != n {
		return handoffs{}, clockOffset{}, fmt.Errorf("handoff chain: %d of %d links completed", len(links), n)
	}
	h, err := handoffLatencies(links, handoffWarm)
	return h, clockOffset{off, rtt}, err
}

// pgUUID is a ULID as the uuid PostgreSQL stores.
func pgUUID(id ulid.ULID) pgtype.UUID { return pgtype.UUID{Bytes: [16]byte(id), Valid: true} }

// ---- scenario 21: fan-in -----------------------------------------------------------------

// fanMembers is a workflow of n members, numbered from first: with group "", nodes that
// need nothing (what the root's run spawns: attached to it); otherwise nodes that need the
// root and join group (what AddToWorkflow adds).
func fanMembers(first, n int, group string) *venturi.Workflow {
	wf := venturi.NewWorkflow("")
	for i := first; i < first+n; i++ {
		var opts []venturi.NodeOption
		if group != "" {
			opts = append(opts, venturi.Needs(venturi.NodeNamed(fanInRootNode)), venturi.In(venturi.NodeNamed(group)))
		}
		wf.Add(fmt.Sprintf("m%05d", i), FanMemberTask{I: i}, opts...)
	}
	return wf
}

// enqueueFanInBatch writes the batch variant: n members in a batch whose OnEnd callback
// is the fan-in task; as for a group, the members past one enqueue's MaxWorkflowNodes are
// added to the open batch, which is then sealed.
func enqueueFanInBatch(ctx context.Context, q *venturi.Queue, n int) (ulid.ULID, error) {
	first, rest := fanInSplit(n, venturi.MaxWorkflowNodes)
	opts := []venturi.BatchOption{venturi.OnEnd(FanInTask{})}
	if len(rest) > 0 {
		opts = append(opts, venturi.OpenBatch())
	}
	b := venturi.NewBatch("fan-in batch", opts...)
	for i := range first {
		b.Add(FanMemberTask{I: i})
	}
	res, err := q.EnqueueBatch(ctx, b)
	if err != nil {
		return ulid.ULID{}, err
	}
	next := first
	for _, k := range rest {
		tasks := make([]venturi.Task, k)
		for i := range k {
			tasks[i] = FanMemberTask{I: next + i}
		}
		if _, err := q.AddToBatch(ctx, res.ID, tasks...); err != nil {
			return ulid.ULID{}, err
		}
		next += k
	}
	if len(rest) > 0 {
		if err := q.SealBatch(ctx, res.ID); err != nil {
			return ulid.ULID{}, err
		}
	}
	return res.ID, nil
}

// fanInSplit says how a group of n members is enqueued when one enqueue writes at most
// maxNodes nodes: first members go into the EnqueueWorkflow with the root, the group and
// the fan-in (3 nodes), the others into AddToWorkflow calls of rest[i] members each (the
// group then stays open until they are added).
func fanInSplit(n, maxNodes int) (first int, rest []int) {
	first = min(n, maxNodes-3)
	for left := n - first; left > 0; left -= min(left, maxNodes) {
		rest = append(rest, min(left, maxNodes))
	}
	return first, rest
}

// enqueueFanIn writes scenario 21's workflow of variant v (group or spawn) with n
// members, all before the worker starts, and returns its ID.
func enqueueFanIn(ctx context.Context, q *venturi.Queue, v string, n int) (ulid.ULID, error) {
	wf := venturi.NewWorkflow("fan-in " + v)
	if v == fanInBatched {
		return enqueueFanInBatch(ctx, q, n)
	}
	if v == fanInSpawned {
		if n > venturi.MaxWorkflowNodes {
			return ulid.ULID{}, fmt.Errorf("a run spawns at most %d nodes (venturi.MaxWorkflowNodes), not %d", venturi.MaxWorkflowNodes, n)
		}
		root := wf.Add(fanInRootNode, FanRootTask{N: n, Spawn: true})
		wf.Add(fanInNode, FanInTask{}, venturi.Needs(root))
		res, err := q.EnqueueWorkflow(ctx, wf)
		return res.ID, err
	}
	first, rest := fanInSplit(n, venturi.MaxWorkflowNodes)
	root := wf.Add(fanInRootNode, FanRootTask{N: n})
	var gopts []venturi.NodeOption
	if len(rest) > 0 {
		gopts = append(gopts, venturi.OpenGroup())
	}
	g := wf.Group(fanInGroup, gopts...)
	wf.Add(fanInNode, FanInTask{}, venturi.Needs(g))
	for i := range first {
		wf.Add(fmt.Sprintf("m%05d", i), FanMemberTask{I: i}, venturi.Needs(root), venturi.In(g))
	}
	res, err := q.EnqueueWorkflow(ctx, wf)
	if err != nil {
		return ulid.ULID{}, err
	}
	next := first
	for _, k := range rest {
		if _, err := q.AddToWorkflow(ctx, res.ID, fanMembers(next, k, fanInGroup)); err != nil {
			return ulid.ULID{}, err
		}
		next += k
	}
	if len(rest) > 0 {
		if err := q.SealGroup(ctx, res.ID, fanInGroup); err != nil {
			return ulid.ULID{}, err
		}
	}
	return res.ID, nil
}

// fanTimes are one fan-in run's database times: the root's finish; the members' first
// release (run_at), first claim and last finish; the fan-in's release and claim. A plain
// run has only the members'.
type fanTimes struct {
	rootFinished                              time.Time
	firstReleased, firstClaimed, lastFinished time.Time
	faninReleased, faninClaimed               time.Time
	// lastCommitted is the commit time of the last member's finishing transaction, known
	// when the server has track_commit_timestamp on (zero otherwise).
	lastCommitted time.Time
	members       int
}

// fanMeasured is what scenario 21 reports of one run's database times.
type fanMeasured struct {
	dbRate                     float64 // members per second, first member's claim → last member's finish
	rootToRelease, rootToClaim float64 // ms, root's finish → first member released, claimed
	lastToRelease, lastToClaim float64 // ms, last member's finish → fan-in released, claimed
	commitToClaim              float64 // ms, last member's commit → fan-in claimed (-1: not known)
	workflow                   bool    // the fan-in's times are known
	root                       bool    // the root's times are known (not in a batch: no root)
}

// measure computes what scenario 21 reports from a run's database times.
func (f fanTimes) measure() fanMeasured {
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	m := fanMeasured{commitToClaim: -1}
	if w := f.lastFinished.Sub(f.firstClaimed); w > 0 {
		m.dbRate = float64(f.members) / w.Seconds()
	}
	if !f.faninClaimed.IsZero() {
		m.workflow = true
		if !f.rootFinished.IsZero() {
			m.root = true
			m.rootToRelease, m.rootToClaim = ms(f.firstReleased.Sub(f.rootFinished)), ms(f.firstClaimed.Sub(f.rootFinished))
		}
		m.lastToRelease, m.lastToClaim = ms(f.faninReleased.Sub(f.lastFinished)), ms(f.faninClaimed.Sub(f.lastFinished))
		if !f.lastCommitted.IsZero() {
			m.commitToClaim = ms(f.faninClaimed.Sub(f.lastCommitted))
		}
	}
	return m
}

// readFanTimes reads a run's times: of the plain kind, or of the workflow's kinds.
func (b *bencher) readFanTimes(ctx context.Context, v string) (fanTimes, error) {
	var f fanTimes
	member := kindFanMember
	if v == fanInPlain {
		member = kindNoop
	}
	rows, err := b.admin.Query(ctx, `SELECT kind, count(*) FILTER (WHERE state = 'completed'), count(*),
		       min(run_at), min(attempted_at), max(finished_at)
		FROM `+venturiSchema+`.venturi_job_all WHERE kind = ANY($1) GROUP BY kind`, []string{member, kindFanRoot, kindFanIn})
	if err != nil {
		return f, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			kind                        string
			done, all                   int
			released, claimed, finished *time.Time
		)
		if err := rows.Scan(&kind, &done, &all, &released, &claimed, &finished); err != nil {
			return f, err
		}
		if done != all || released == nil || claimed == nil || finished == nil {
			return f, fmt.Errorf("%s: %d of %d jobs completed", kind, done, all)
		}
		switch kind {
		case member:
			f.members, f.firstReleased, f.firstClaimed, f.lastFinished = done, *released, *claimed, *finished
		case kindFanRoot:
			f.rootFinished = *finished
		case kindFanIn:
			f.faninReleased, f.faninClaimed = *released, *claimed
		}
	}
	if err := rows.Err(); err != nil {
		return f, err
	}
	rows.Close()
	// The last member's commit, when the server records commit times: its history row was
	// written by its finishing transaction.
	var track string
	if err := b.admin.QueryRow(ctx, `SELECT current_setting('track_commit_timestamp')`).Scan(&track); err != nil {
		return f, err
	}
	if track == "on" && v != fanInPlain {
		var committed *time.Time
		if err := b.admin.QueryRow(ctx, `SELECT max(pg_xact_commit_timestamp(h.xmin))
			FROM `+venturiSchema+`.venturi_job_history h WHERE h.kind = $1`, member).Scan(&committed); err != nil {
			return f, err
		}
		if committed != nil {
			f.lastCommitted = *committed
		}
	}
	return f, nil
}

// workflowPending counts venturi's jobs that have not ended, blocked ones included.
func workflowPending(ctx context.Context, admin *pgxpool.Pool) (int64, error) {
	n, err := pendingCount(ctx, admin, libVenturi, "")
	if err != nil {
		return 0, err
	}
	var blocked int64
	err = admin.QueryRow(ctx, "SELECT count(*) FROM "+venturiSchema+".venturi_job WHERE state = 'blocked'").Scan(&blocked)
	return n + blocked, err
}

// scenario 21: a 10,000-member fan-in against as many plain jobs.
func (b *bencher) scenarioFanIn(ctx context.Context) error {
	n := b.o.faninMembers
	variants := []string{fanInPlain}
	for _, v := range []string{fanInGrouped, fanInSpawned, fanInBatched} {
		if b.o.faninVariants == nil || b.o.faninVariants[v] {
			variants = append(variants, v)
		}
	}
	t := newVariantTable(variants...)
	t.base = fanInPlain
	b.rep.fanin = &faninReport{n: n, t: t}
	for rep := range b.o.reps {
		for _, v := range rotate(variants, rep) {
			if err := b.fanInRun(ctx, t, v, n, rep); err != nil {
				return fmt.Errorf("%s: %w", v, err)
			}
		}
	}
	return nil
}

// fanInRun is one run of scenario 21: variant v with n members (plain: n no-op jobs),
// enqueued first, drained by one `bench worker -wf` process.
func (b *bencher) fanInRun(ctx context.Context, t *variantTable, v string, n, rep int) error {
	if err := b.resetWorkflows(ctx); err != nil {
		return err
	}
	jobs := n
	if v == fanInPlain {
		if err := b.enqueueBulk(ctx, libVenturi, n); err != nil {
			return err
		}
	} else {
		pool, err := poolFor(ctx, b.o.url, venturiSchema, 2)
		if err != nil {
			return err
		}
		_, err = enqueueFanIn(ctx, venturi.NewQueue(pool, venturi.QueueConfig{}), v, n)
		pool.Close()
		if err != nil {
			return err
		}
		jobs = n + 2
	}
	if err := b.settle(ctx, libVenturi); err != nil {
		return err
	}
	wal0, err := walLSN(ctx, b.admin)
	if err != nil {
		return err
	}
	args := append([]string{"-wf"}, b.o.workerArgs...)
	done := b.doneWhenNone(jobs, func(ctx context.Context) (int64, error) { return workflowPending(ctx, b.admin) })
	r, err := b.workUntilRun(ctx, libVenturi, "", args, done)
	if err != nil {
		return err
	}
	walBytes, err := walSince(ctx, b.admin, wal0)
	if err != nil {
		return err
	}
	ft, err := b.readFanTimes(ctx, v)
	if err != nil {
		return err
	}
	if ft.members != n {
		return fmt.Errorf("%d of %d members completed", ft.members, n)
	}
	m := ft.measure()
	if v != fanInPlain && (!m.workflow || !m.root && v != fanInBatched) {
		return fmt.Errorf("no root or fan-in times")
	}
	jps := float64(n) / r.elapsed.Seconds()
	t.add("members/s, worker start → every job ended", v, jps)
	t.add("members/s, first member claimed → last member finished (database clock)", v, m.dbRate)
	if m.root {
		t.add("root finished → first member released (ms)", v, m.rootToRelease)
		t.add("root finished → first member claimed (ms)", v, m.rootToClaim)
	}
	if m.workflow {
		t.add("last member finished → fan-in released (ms)", v, m.lastToRelease)
		t.add("last member finished → fan-in claimed (ms)", v, m.lastToClaim)
		if m.commitToClaim >= 0 {
			t.add("last member committed → fan-in claimed (ms)", v, m.commitToClaim)
		}
	}
	if r.cpu.ok {
		t.add("worker CPU ms per 1k members", v, float64(r.cpu.worker.Milliseconds())*1000/float64(n))
		t.add("PostgreSQL backend CPU ms per 1k members", v, float64(r.cpu.db.Milliseconds())*1000/float64(n))
	}
	t.add("WAL bytes per member (drain)", v, float64(walBytes)/float64(n))
	fanin := ""
	if m.root {
		fanin = fmt.Sprintf("; members released %.2f ms after the root's finish", m.rootToRelease)
	}
	if m.workflow {
		fanin += fmt.Sprintf("; fan-in claimed %.2f ms after the last member's finish", m.lastToClaim)
		if m.commitToClaim >= 0 {
			fanin += fmt.Sprintf(", %.2f ms after its commit", m.commitToClaim)
		}
	}
	logf("  21. fan-in %s, %d members, rep %d: %.0f members/s (%v), %.0f/s on the database clock%s; CPU worker %v, PostgreSQL %v; WAL %.0f B/member",
		v, n, rep, jps, r.elapsed.Round(time.Millisecond), m.dbRate, fanin, r.cpu.worker, r.cpu.db, float64(walBytes)/float64(n))
	return nil
}

// ---- scenario 22: chunks -----------------------------------------------------------------

// scenario 22: the same writes one by one and in chunks.
func (b *bencher) scenarioChunks(ctx context.Context) error {
	n, size := b.o.chunkJobs, b.o.chunkSize
	if _, err := b.admin.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+chunkRowTable+" (n int PRIMARY KEY, call bigint NOT NULL)"); err != nil {
		return err
	}
	t := newVariantTable(chunkOneByOne, chunkChunked)
	t.base = chunkOneByOne
	b.rep.chunks = &chunksReport{n: n, size: size, t: t}
	for rep := range b.o.reps {
		for _, v := range rotate([]string{chunkOneByOne, chunkChunked}, rep) {
			if err := b.chunkRun(ctx, t, v, n, size, rep); err != nil {
				return fmt.Errorf("%s: %w", v, err)
			}
		}
	}
	return nil
}

// chunkRun is one run of scenario 22: n jobs enqueued first, drained by one `bench worker
// -chunks` process.
func (b *bencher) chunkRun(ctx context.Context, t *variantTable, v string, n, size, rep int) error {
	if err := resetJobs(ctx, b.admin); err != nil {
		return err
	}
	if _, err := b.admin.Exec(ctx, "TRUNCATE "+chunkRowTable); err != nil {
		return err
	}
	kind, mode, task := kindChunkOne, "one", func(i int) venturi.Task { return ChunkOneTask{N: i} }
	if v == chunkChunked {
		kind, mode, task = kindChunkMany, "many", func(i int) venturi.Task { return ChunkManyTask{N: i} }
	}
	if err := b.enqueueBulkOf(ctx, libVenturi, n, task, nil); err != nil {
		return err
	}
	if _, err := b.admin.Exec(ctx, "ANALYZE "+chunkRowTable); err != nil {
		return err
	}
	if err := b.settle(ctx, libVenturi); err != nil {
		return err
	}
	wal0, err := walLSN(ctx, b.admin)
	if err != nil {
		return err
	}
	args := append([]string{"-chunks", mode, "-chunk-size", fmt.Sprint(size)}, b.o.workerArgs...)
	r, err := b.workUntilRun(ctx, libVenturi, "", args, b.allDone(libVenturi, kind, n))
	if err != nil {
		return err
	}
	walBytes, err := walSince(ctx, b.admin, wal0)
	if err != nil {
		return err
	}
	done, err := completedCount(ctx, b.admin, libVenturi, kind)
	if err != nil {
		return err
	}
	var rowsN, calls int64
	if err := b.admin.QueryRow(ctx, "SELECT count(*), count(DISTINCT call) FROM "+chunkRowTable).Scan(&rowsN, &calls); err != nil {
		return err
	}
	if done != int64(n) || rowsN != int64(n) {
		return fmt.Errorf("%d of %d jobs completed, %d rows written", done, n, rowsN)
	}
	jps := float64(n) / r.elapsed.Seconds()
	t.add("jobs/s (durably completed)", v, jps)
	t.add("handler calls", v, float64(calls))
	t.add("jobs per handler call, mean", v, float64(n)/float64(calls))
	if r.cpu.ok {
		t.add("worker CPU ms per 1k jobs", v, float64(r.cpu.worker.Milliseconds())*1000/float64(n))
		t.add("PostgreSQL backend CPU ms per 1k jobs", v, float64(r.cpu.db.Milliseconds())*1000/float64(n))
	}
	t.add("WAL bytes per job (drain)", v, float64(walBytes)/float64(n))
	logf("  22. chunks %s, %d jobs, rep %d: %.0f jobs/s (%v), %d handler calls; CPU worker %v, PostgreSQL %v; WAL %.0f B/job",
		v, n, rep, jps, r.elapsed.Round(time.Millisecond), calls, r.cpu.worker, r.cpu.db, float64(walBytes)/float64(n))
	return nil
}

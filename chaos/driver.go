package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// profile sizes a run.
type profile struct {
	name       string
	jobs       int           // enqueues (dedup collisions included)
	arrival    time.Duration // due times are spread over this window
	workMs     int           // mean simulated work per run
	workers    int
	kills      int
	stops      int
	restarts   []string // pg_ctl stop modes
	bursts     int
	listenKill int
	halfOpen   int           // half-open network cuts of one worker (netfaults.go)
	pgbWorkers int           // workers (the last slots) behind PgBouncer; 0: none
	pgbRestart int           // PgBouncer restarts
	failovers  int           // primary killed, replica promoted (failover.go)
	walFull    int           // the WAL's filesystem filled (fulldisk.go)
	produce    float64       // the live producer's enqueues per second (producer.go); 0: none
	deadline   time.Duration // global: setup, run, drain and check
}

var (
	fullProfile = profile{name: "full", jobs: 13000, arrival: 260 * time.Second, workMs: 150, workers: 3,
		kills: 100, stops: 1, restarts: []string{"immediate", "fast", "immediate"}, bursts: 3, listenKill: 2,
		halfOpen: 2, pgbWorkers: 1, pgbRestart: 2, deadline: 15 * time.Minute}
	shortProfile = profile{name: "short", jobs: 2000, arrival: 70 * time.Second, workMs: 250, workers: 3,
		kills: 15, stops: 1, restarts: []string{"immediate"}, bursts: 1, listenKill: 1,
		halfOpen: 2, pgbWorkers: 1, pgbRestart: 1, deadline: 130 * time.Second}
	// The modes of failover.go, fulldisk.go and longtx.go: the scripted workload (every
	// invariant), the live producer, one fault of their own; no PgBouncer.
	failoverProfile = profile{name: "failover", jobs: 3000, arrival: 90 * time.Second, workMs: 200, workers: 3,
		failovers: 1, produce: 20, deadline: 6 * time.Minute}
	fullDiskProfile = profile{name: "fulldisk", jobs: 3000, arrival: 100 * time.Second, workMs: 200, workers: 3,
		walFull: 1, produce: 20, deadline: 8 * time.Minute}
	longTxProfile = profile{name: "longtx", workMs: 150, workers: 3, produce: 40}
)

type options struct {
	prof    profile
	control bool
	seed    uint64
	lease   time.Duration
	schema  string
	pgsh    string
	logdir  string
	dsn     string
	// overload: producers at 3x the drain rate for this long instead of the scripted
	// workload and faults (overload.go)
	overload    time.Duration
	failover    string        // sync or async: a replica promoted mid-run (failover.go)
	replDelay   time.Duration // one-way latency of the replication link (failover.go)
	fullDisk    time.Duration // how long the WAL's filesystem stays full (fulldisk.go)
	longTx      time.Duration // how long a snapshot is held (longtx.go)
	rollingFrom string        // -rolling: the older workers' git revision (rolling.go)
}

// fault is one injected fault, recorded in memory while the database may be down and
// written to chaos_fault before the check.
type fault struct {
	Kind   string // sigkill, sigstop, pg-restart-immediate, pg-restart-fast, terminate-burst, listen-kill, half-open, pgbouncer-restart, failover-sync, failover-async, wal-full, long-transaction, migrate, upgrade
	At     time.Time
	Until  time.Time // end of a stop, a restart (PostgreSQL accepting again) or a burst
	Worker int       // slot, or 0
	PID    int       // killed or stopped process, or 0
	Detail string
}

func driverMain(args []string) (int, error) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	short := fs.Bool("short", false, "short profile (under two minutes): 1,500 jobs, ~15 kills, 1 immediate restart")
	control := fs.Bool("control", false, "fault-free control run: must show 0 duplicate starts")
	seed := fs.Uint64("seed", 0, "PRNG seed (0: from the clock; printed)")
	lease := fs.Duration("lease", 2*time.Second, "workers' venturi lease")
	jobs := fs.Int("jobs", 0, "override the profile's job count")
	schema := fs.String("schema", "", "schema to (re)create (default chaos, or chaos_control)")
	pgsh := fs.String("pgsh", "", "path to scripts/pg.sh (default: found upwards from the working directory)")
	logdir := fs.String("logdir", "", "directory for worker logs (default: a temporary directory)")
	overloadFor := fs.Duration("overload", 0, "overload run: producers at 3x the drain rate for this long, no faults (see README.md)")
	pgb := fs.Int("pgbouncer", -1, "workers (the last slots) behind PgBouncer in transaction mode, poll-only (default: the profile's, 1)")
	failover := fs.String("failover", "", "failover run: sync or async replication to a replica promoted mid-run (see README.md)")
	replDelay := fs.Duration("replica-delay", 0, "failover run: one-way latency of the replication link (a replica in another zone)")
	fullDisk := fs.Duration("fulldisk", 0, "full-disk run: the WAL's filesystem stays full this long (under scripts/pg-waldisk.sh; see README.md)")
	longTx := fs.Duration("longtx", 0, "long-transaction run: a snapshot held this long under steady load (see README.md)")
	rollingFrom := fs.String("rolling", "", "rolling-deploy run: workers built from this git revision, migrated and replaced under load (rolling.go, README.md)")
	checkOnly := fs.Bool("check", false, "only check the schema an earlier run left (no setup, no workers, no faults)")
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	o := options{prof: fullProfile, control: *control, seed: *seed, lease: *lease, schema: *schema, pgsh: *pgsh, logdir: *logdir}
	if *short {
		o.prof = shortProfile
	}
	if *overloadFor > 0 {
		o.overload = *overloadFor
		o.prof.name = "overload"
		o.prof.pgbWorkers = 0
		o.prof.deadline = 4*o.overload + 4*time.Minute // calibration, overload, drain of 2x, check
	}
	modes := 0
	for _, on := range []bool{*overloadFor > 0, *failover != "", *fullDisk > 0, *longTx > 0, *rollingFrom != ""} {
		if on {
			modes++
		}
	}
	if modes > 1 || (modes == 1 && (*short || *control)) {
		return 2, errors.New("-overload, -failover, -fulldisk, -longtx and -rolling are modes of their own: one at a time, without -short or -control")
	}
	switch {
	case *failover != "":
		if *failover != "sync" && *failover != "async" {
			return 2, fmt.Errorf("-failover %q: want sync or async", *failover)
		}
		o.failover, o.prof, o.replDelay = *failover, failoverProfile, *replDelay
		o.prof.name += "-" + *failover
	case *fullDisk > 0:
		o.fullDisk, o.prof = *fullDisk, fullDiskProfile
		o.prof.deadline += 2 * o.fullDisk
	case *rollingFrom != "":
		o.rollingFrom, o.prof = *rollingFrom, rollingProfile
	case *longTx > 0:
		o.longTx, o.prof = *longTx, longTxProfile
		o.prof.arrival = longTxBefore + o.longTx + longTxAfter
		o.prof.jobs = int(20 * o.prof.arrival.Seconds()) // the short profile's arrival rate
		o.prof.deadline = o.prof.arrival + 6*time.Minute
	}
	if *pgb >= 0 {
		o.prof.pgbWorkers = min(*pgb, o.prof.workers)
	}
	if *jobs > 0 {
		// Keep the arrival rate: the window scales with the job count.
		o.prof.arrival = max(o.prof.arrival*time.Duration(*jobs)/time.Duration(o.prof.jobs), 8*time.Second)
		o.prof.jobs = *jobs
	}
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano())
	}
	if o.schema == "" {
		o.schema = "chaos"
		if o.control {
			o.schema = "chaos_control"
		}
	}
	o.dsn = os.Getenv("DATABASE_URL")
	if o.dsn == "" {
		return 2, errors.New("DATABASE_URL is not set: run under `VENTURI_PGDATA=$PWD/.pgdata-chaos scripts/pg.sh with -- ...` (see chaos/README.md)")
	}
	if *checkOnly {
		return checkOnlyMain(o)
	}
	if !o.control {
		// The run restarts PostgreSQL: refuse anything but a cluster of our own.
		pgdata := os.Getenv("VENTURI_PGDATA")
		if pgdata == "" || !strings.Contains(filepath.Base(pgdata), "chaos") {
			return 2, fmt.Errorf("refusing to restart PostgreSQL: VENTURI_PGDATA=%q is not a chaos cluster (want e.g. .pgdata-chaos; the shared cluster must never be restarted)", pgdata)
		}
		if o.pgsh == "" {
			p, err := findPgSh()
			if err != nil {
				return 2, err
			}
			o.pgsh = p
		}
	}
	tempLogs := o.logdir == ""
	if !tempLogs {
		if err := os.MkdirAll(o.logdir, 0o755); err != nil {
			return 1, err
		}
	}
	if tempLogs {
		d, err := os.MkdirTemp("", "venturi-chaos-")
		if err != nil {
			return 1, err
		}
		o.logdir = d
	}
	// The ledgers are this run's (a reused -logdir keeps the worker logs, appended).
	if old, err := filepath.Glob(filepath.Join(o.logdir, "ledger-*.log")); err == nil {
		for _, f := range old {
			if err := os.Remove(f); err != nil {
				return 1, err
			}
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), o.prof.deadline)
	defer cancel()
	ctx, stopSignals := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stopSignals()

	d := &driver{o: o, rng: rand.New(rand.NewPCG(o.seed, o.seed^0x9e3779b97f4a7c15))}
	if o.rollingFrom != "" {
		r, err := buildRolling(ctx, o.rollingFrom, d.logf)
		if err != nil {
			return 1, fmt.Errorf("rolling: %w", err)
		}
		defer r.cleanup()
		d.roll = r
	}
	defer d.fleetKillAll() // never leave workers behind, whatever happens
	defer func() {
		if r := recover(); r != nil {
			d.fleetKillAll()
			panic(r)
		}
	}()
	code, err := d.run(ctx)
	d.fleetKillAll()
	if code == 0 && err == nil && tempLogs {
		_ = os.RemoveAll(o.logdir) // kept (and printed) when the run failed
	}
	return code, err
}

func findPgSh() (string, error) {
	dir, _ := os.Getwd()
	for range 6 {
		p := filepath.Join(dir, "scripts", "pg.sh")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		dir = filepath.Dir(dir)
	}
	return "", errors.New("scripts/pg.sh not found above the working directory; pass -pgsh")
}

type driver struct {
	o    options
	rng  *rand.Rand
	pool *pgxpool.Pool

	proxies   []*blackhole // per worker slot (netfaults.go)
	halfOpens int          // half-open cuts so far (netfaults.go)
	pgbSh     string       // scripts/pgbouncer.sh when PgBouncer runs
	pgbURL    string

	repl *replication // -failover (failover.go)
	disk *fullDisk    // -fulldisk (fulldisk.go)
	prod *producer    // the live producer (producer.go)
	sqlp *sqlProducer // the SQL producer (sqlproducer.go): the main profiles only
	ltx  *longTx      // -longtx (longtx.go)
	roll *rolling     // -rolling (rolling.go)
	swap sync.Mutex   // one worker replacement at a time: a kill's or an upgrade's

	mu      sync.Mutex
	faults  []fault
	procs   []*proc
	exe     string
	started time.Time // workers started
	spawns  int
	exits   []string // worker exits the driver did not cause

	wf wfState // workflows, batches, the retention schema, deadlocks (wfdriver.go)
}

type proc struct {
	slot    int
	cmd     *exec.Cmd
	pid     int
	done    chan struct{}
	stopped bool        // SIGSTOPped right now
	ending  atomic.Bool // the driver kills or stops it: its exit is expected
}

func (d *driver) logf(format string, a ...any) {
	fmt.Printf("chaos: %s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, a...)...)
}

func withParams(dsn string, kv ...string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("DATABASE_URL must be a postgres:// URL")
	}
	q := u.Query()
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func (d *driver) run(ctx context.Context) (int, error) {
	if d.o.failover != "" {
		defer d.stopReplica()
		if err := d.startReplica(ctx); err != nil { // changes d.o.dsn to the multi-host URL
			return 1, fmt.Errorf("replica: %w", err)
		}
	}
	if d.o.fullDisk > 0 {
		d.disk = &fullDisk{dir: os.Getenv("VENTURI_WALDISK"), hold: d.o.fullDisk}
		if d.disk.dir == "" {
			return 2, errors.New("-fulldisk needs the WAL on a filesystem of its own: run under scripts/pg-waldisk.sh (make chaos/fulldisk)")
		}
	}
	if d.o.longTx > 0 {
		d.ltx = newLongTx(d, d.o.longTx)
	}
	if d.o.prof.produce > 0 {
		d.prod = newProducer(d, d.o.prof.produce, d.o.prof.workMs/4)
	}
	// The SQL producer runs in the full and short profiles (and their control runs): the
	// modes of their own leave it out (an older worker of the rolling deploy does not know
	// its kinds).
	if d.o.overload == 0 && d.o.failover == "" && d.o.fullDisk == 0 && d.o.longTx == 0 && d.o.rollingFrom == "" {
		d.sqlp = newSQLProducer(d, sqlProducerRate, d.o.prof.workMs/4)
	}
	o := d.o
	mode := o.prof.name
	if o.control {
		mode += " control"
	}
	d.logf("profile %s, seed %d, %d jobs, %d workers x (8 + %d for %s), lease %v, schema %s, worker logs in %s",
		mode, o.seed, o.prof.jobs, o.prof.workers, limitedQueueHandlers, limitedQueue, o.lease, o.schema, o.logdir)
	if err := d.setup(ctx); err != nil {
		return 1, fmt.Errorf("setup: %w", err)
	}
	defer d.pool.Close()
	if d.wf.rpool != nil {
		defer d.wf.rpool.Close()
	}
	dctx, stopDeadlocks := context.WithCancel(ctx)
	deadlocksDone := make(chan struct{})
	go func() { defer close(deadlocksDone); d.sampleDeadlocks(dctx) }()
	defer func() { stopDeadlocks(); <-deadlocksDone }()
	t0 := time.Now()
	var ov *overload
	var n int
	var err error
	if o.overload > 0 {
		ov = newOverload(d, o.overload)
		n, err = ov.enqueueCalibration(ctx)
	} else {
		n, err = d.enqueue(ctx)
	}
	if err != nil {
		return 1, fmt.Errorf("enqueue: %w", err)
	}
	d.logf("enqueued %d jobs in %v", n, time.Since(t0).Round(time.Millisecond))

	exe, err := os.Executable()
	if err != nil {
		return 1, err
	}
	d.exe = exe
	if err := d.startNetwork(ctx); err != nil {
		d.stopNetwork()
		return 1, fmt.Errorf("network: %w", err)
	}
	defer d.stopNetwork()
	d.started = time.Now()
	for slot := 1; slot <= o.prof.workers; slot++ {
		if err := d.spawn(slot); err != nil {
			return 1, fmt.Errorf("start worker %d: %w", slot, err)
		}
	}
	evDSN, err := withParams(o.dsn, "search_path", o.schema, "application_name", "chaos-events")
	if err != nil {
		return 1, err
	}
	ectx, stopEvents := context.WithCancel(ctx)
	eventsDone := make(chan struct{})
	go func() { defer close(eventsDone); eventReader(ectx, evDSN, d.logf) }()
	defer func() { stopEvents(); <-eventsDone }()
	sctx, stopSignaller := context.WithCancel(ctx)
	signallerDone := make(chan struct{})
	go func() { defer close(signallerDone); d.signaller(sctx) }()
	defer func() { stopSignaller(); <-signallerDone }()
	if d.ltx != nil {
		sctx, stopSampler := context.WithCancel(ctx)
		samplerDone := make(chan struct{})
		go func() { defer close(samplerDone); d.ltx.sample(sctx) }()
		defer func() { stopSampler(); <-samplerDone }()
	}
	faultsDone := make(chan struct{})
	fctx, stopFaults := context.WithCancel(ctx)
	defer stopFaults()
	// The SQL producer, over the arrival window, under the faults (sqlproducer.go).
	sqlDone := make(chan struct{})
	if d.sqlp != nil {
		if err := d.sqlp.start(ctx); err != nil {
			return 1, fmt.Errorf("the SQL producer: %w", err)
		}
		defer d.sqlp.close()
		go func() {
			defer close(sqlDone)
			pctx, cancel := context.WithDeadline(fctx, d.started.Add(o.prof.arrival))
			defer cancel()
			d.sqlp.run(pctx)
		}()
	} else {
		close(sqlDone)
	}
	switch {
	case ov != nil:
		go func() { defer close(faultsDone); ov.run(fctx) }()
	case !o.control:
		go func() { defer close(faultsDone); d.runFaults(fctx) }()
	default:
		close(faultsDone)
	}
	// The scripted operations on workflows (wfdriver.go): the run is over when they are
	// done too.
	opsDone := make(chan struct{})
	go func() { defer close(opsDone); d.runWfOps(fctx) }()
	allDone := make(chan struct{})
	go func() { <-faultsDone; <-opsDone; <-sqlDone; close(allDone) }()
	remaining, waitErr := d.waitTerminal(ctx, allDone)
	stopFaults()
	<-faultsDone
	<-opsDone
	<-sqlDone
	if d.sqlp != nil {
		d.sqlp.close() // its backends end and report their statistics (deadlocks) before the last sample
	}
	d.logf("all faults done; %d jobs not terminal; stopping workers", remaining)
	d.fleetStop()
	if waitErr != nil {
		d.logf("wait: %v", waitErr)
	}
	// The check needs the database even when the run hit its deadline.
	cctx, ccancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer ccancel()
	if err := d.saveFaults(cctx); err != nil {
		return 1, fmt.Errorf("save faults: %w", err)
	}
	if err := d.saveWfOps(cctx); err != nil {
		return 1, fmt.Errorf("save the workflow operations: %w", err)
	}
	stopDeadlocks()
	<-deadlocksDone
	d.sampleDeadlocksOnce(cctx) // after the workers' backends ended (and reported theirs)
	if ov != nil {
		if err := ov.saveExpects(cctx); err != nil {
			return 1, fmt.Errorf("save the overload's expected jobs: %w", err)
		}
	}
	lossy := o.failover == "async" // what an asynchronous failover loses is measured, not a violation
	var produced producedResult
	var producedViolations []string
	if d.prod != nil {
		if produced, producedViolations, err = d.prod.resolve(cctx, lossy); err != nil {
			return 1, fmt.Errorf("the live producer's jobs: %w", err)
		}
	}
	var sqlProd sqlProduced
	var sqlViolations []string
	if d.sqlp != nil {
		if sqlProd, sqlViolations, err = d.sqlp.resolve(cctx); err != nil {
			return 1, fmt.Errorf("the SQL producer's jobs: %w", err)
		}
	}
	d.countLost()
	stopEvents()
	<-eventsDone
	if err := drainEvents(cctx, evDSN); err != nil {
		return 1, fmt.Errorf("drain the event stream: %w", err)
	}
	ledger, torn, err := readLedgers(o.logdir)
	if err != nil {
		return 1, fmt.Errorf("read the completion ledger: %w", err)
	}
	rep, err := check(cctx, d.pool, checkConfig{lease: o.lease, control: o.control || ov != nil || d.ltx != nil,
		ledger: ledger, ledgerTorn: torn, checkLedger: true, retain: d.wf.rpool, deadlocks: d.deadlockCount()})
	if err != nil {
		return 1, fmt.Errorf("check: %w", err)
	}
	if ov != nil {
		ov.report(rep)
	}
	if d.prod != nil {
		rep.extra += produced.String()
		rep.require(invAckedEnq, producedViolations)
		rep.require(invEnqErrors, producedViolations)
	}
	if d.sqlp != nil {
		rep.extra += sqlProd.String()
		for _, inv := range []string{invSQLAccounted, invSQLOnce, invSQLDeferred, invSQLDedup, invSQLErrors} {
			rep.require(inv, sqlViolations)
		}
	}
	if d.repl != nil {
		d.repl.report(rep)
	}
	if d.disk != nil {
		d.disk.report(rep, o.logdir)
	}
	if d.roll != nil {
		var notMigrated []string
		select {
		case <-d.roll.migrated:
		default:
			notMigrated = prefixed(invRolled, []string{"the run ended before the newer migrations applied"})
		}
		rep.require(invRolled, notMigrated)
		if err := d.rollingReport(cctx, rep); err != nil {
			return 1, fmt.Errorf("rolling: %w", err)
		}
	}
	if d.ltx != nil {
		if err := d.ltx.measureLatency(cctx); err != nil {
			return 1, fmt.Errorf("long transaction: claim latency: %w", err)
		}
		d.ltx.report(rep)
	}
	d.mu.Lock()
	exits := slices.Clone(d.exits)
	d.mu.Unlock()
	if d.repl != nil || d.disk != nil || d.ltx != nil {
		rep.require(invAlive, prefixed(invAlive, exits))
	} else if len(exits) > 0 {
		rep.extra += fmt.Sprintf("worker exits the driver did not cause: %s\n", strings.Join(exits, "; "))
	}
	rep.print(os.Stdout, mode, o.seed, time.Since(d.started), d.spawns)
	if len(rep.violations) > 0 {
		fmt.Printf("\nworker logs: %s\n", o.logdir)
		return 1, fmt.Errorf("%d invariant violation(s)", len(rep.violations))
	}
	return 0, nil
}

const appSchema = `
CREATE TABLE chaos_expect (
    job_id      uuid PRIMARY KEY,
    seq         bigint NOT NULL,
    scenario    text NOT NULL,
    want_state  text NOT NULL,
    want_pauses int NOT NULL DEFAULT 0,
    want_value  bigint NOT NULL DEFAULT 0,
    -- Flow-controlled scenarios: the burst the job was enqueued in, its slot (key and
    -- limit) and its partition, as scripted. want_state may list states: a|b.
    grp         text NOT NULL DEFAULT '',
    slot_key    text NOT NULL DEFAULT '',
    slot_limit  int NOT NULL DEFAULT 0,
    part        text NOT NULL DEFAULT '',
    want_steps  int NOT NULL DEFAULT 0 -- steps: the job's memoized steps
);
CREATE TABLE chaos_start (
    job_id uuid NOT NULL,
    run    int NOT NULL,
    token  bigint NOT NULL,
    worker int NOT NULL,
    pid    int NOT NULL,
    at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX ON chaos_start (job_id);
-- No unique key on purpose: the checker must see every effect that committed.
CREATE TABLE chaos_effect (
    job_id  uuid NOT NULL,
    run     int NOT NULL,
    token   bigint NOT NULL,
    outcome text NOT NULL,
    counter int NOT NULL,
    value   bigint NOT NULL,
    pid     int NOT NULL,
    at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX ON chaos_effect (job_id);
-- steps: every execution of a step's body, written in its own autocommit statement
-- (whatever becomes of the step's transaction), and the step's effect, written in the
-- step's transaction (it commits with the memo or not at all).
CREATE TABLE chaos_step_exec (
    job_id uuid NOT NULL,
    step   text NOT NULL,
    run    int NOT NULL,
    token  bigint NOT NULL,
    pid    int NOT NULL,
    at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX ON chaos_step_exec (job_id);
CREATE TABLE chaos_step_effect (
    job_id uuid NOT NULL,
    step   text NOT NULL,
    run    int NOT NULL,
    token  bigint NOT NULL,
    pid    int NOT NULL,
    at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX ON chaos_step_effect (job_id);
-- wait: each signal a completing run read, written in its completion's transaction.
CREATE TABLE chaos_sigread (
    job_id      uuid NOT NULL,
    run         int NOT NULL,
    token       bigint NOT NULL,
    seq         bigint NOT NULL,
    delivery_id text NOT NULL
);
CREATE INDEX ON chaos_sigread (job_id);
CREATE TABLE chaos_fault (
    id     serial PRIMARY KEY,
    kind   text NOT NULL,
    at     timestamptz NOT NULL,
    until  timestamptz,
    worker int NOT NULL DEFAULT 0,
    pid    int NOT NULL DEFAULT 0,
    detail text NOT NULL DEFAULT ''
);`

func (d *driver) setup(ctx context.Context) error {
	dsn, err := withParams(d.o.dsn, "search_path", d.o.schema, "application_name", "chaos-driver")
	if err != nil {
		return err
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return err
	}
	cfg.MaxConns = 4
	if d.o.overload > 0 {
		cfg.MaxConns = overloadProducers + 4
	}
	d.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	// A failover run killed before it cleaned up leaves the chaos cluster naming a
	// synchronous standby that is gone: every commit would wait for it forever.
	var standbys string
	if err := d.pool.QueryRow(ctx, `SHOW synchronous_standby_names`).Scan(&standbys); err != nil {
		return err
	}
	if standbys != "" && d.o.failover != "sync" && !d.o.control {
		d.logf("clearing synchronous_standby_names = %q, left by an interrupted failover run", standbys)
		if _, err := d.pool.Exec(ctx, `ALTER SYSTEM RESET synchronous_standby_names`); err != nil {
			return err
		}
		if _, err := d.pool.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
			return err
		}
	}
	if _, err := d.pool.Exec(ctx, fmt.Sprintf("DROP SCHEMA IF EXISTS %[1]s CASCADE; CREATE SCHEMA %[1]s",
		pgx.Identifier{d.o.schema}.Sanitize())); err != nil {
		return err
	}
	if d.roll != nil {
		if err := d.roll.migrateOld(ctx, d.pool); err != nil {
			return err
		}
	} else if _, err := venturi.Migrate(ctx, d.pool); err != nil {
		return err
	}
	for _, sql := range []string{appSchema, eventSchema, wfSchema} {
		if _, err = d.pool.Exec(ctx, sql); err != nil {
			return err
		}
	}
	if d.sqlp != nil {
		if _, err = d.pool.Exec(ctx, sqlProducerSchema); err != nil {
			return err
		}
	}
	if d.wfOn() {
		return d.setupRetain(ctx)
	}
	return nil
}

type expect struct {
	id       ulid.ULID
	seq      int64
	scenario string
	state    string
	pauses   int
	value    int64
	group    string // flow scenarios: the burst
	slotKey  string
	slotLim  int
	part     string
	steps    int // steps: memoized steps
}

// enqueue writes the scripted workload before any worker runs, so that every dedup
// collision meets a pending job and the expected outcome of each job is known. Due times
// are spread over the arrival window in waves of 250ms, which keeps the backlog short:
// a rescued job is claimed soon after its rescue, so recovery times are measurable.
func (d *driver) enqueue(ctx context.Context) (int, error) {
	p := d.o.prof
	q := venturi.NewQueue(d.pool, venturi.QueueConfig{})
	if err := q.SetQueueConcurrency(ctx, limitedQueue, limitedQueueConcurrency); err != nil {
		return 0, err
	}
	wave := enqueueWave
	waves := max(int(p.arrival/wave), 1)
	perWave := make([][]venturi.Task, waves)
	var expects []expect
	workMs := func() int { return p.workMs/2 + d.rng.IntN(p.workMs+1) }

	type dedupEnq struct {
		wave  int
		tasks []Dedup
	}
	var groups []dedupEnq
	type plainRef struct {
		wave, idx int
		e         expect
	}
	var refs []plainRef
	total := 0
	var seq int64
	for total < p.jobs {
		seq++
		w := d.rng.IntN(waves)
		r := d.rng.Float64()
		e := expect{seq: seq, state: "completed"}
		var t venturi.Task
		switch {
		case r < 0.005:
			e.scenario, e.state = scBad, "dead"
			t = badJob{Seq: fmt.Sprintf("not-a-number-%d", seq), Scenario: scBad}
		case r < 0.015:
			e.scenario, e.state = scPermanent, "dead"
			t = Job{Seq: seq, Scenario: scPermanent, WorkMs: workMs()}
		case r < 0.115:
			e.scenario = scTransient
			f := 1 + d.rng.IntN(3)
			e.value = int64(f)
			t = Job{Seq: seq, Scenario: scTransient, Fails: f, WorkMs: workMs()}
		case r < 0.165:
			e.scenario = scPause
			e.pauses = 2 + d.rng.IntN(4)
			t = Job{Seq: seq, Scenario: scPause, Pauses: e.pauses, WorkMs: workMs() / 2}
		case r >= 0.192 && r < 0.232:
			e.scenario = scSteps
			e.steps = 3 + d.rng.IntN(3)
			t = Stepped{Seq: seq, Steps: e.steps, WorkMs: workMs() / 2}
		case r >= 0.232 && r < 0.262:
			e.scenario = scWait
			t = Waiter{Seq: seq, WorkMs: workMs() / 5}
		case r >= 0.175 && r < 0.192 && p.jobs-total >= 10:
			// A burst of flow-controlled jobs of one gate, all due in wave w.
			for _, b := range d.flowBurst(seq, r) {
				b.e.seq = seq
				refs = append(refs, plainRef{wave: w, idx: len(perWave[w]), e: b.e})
				perWave[w] = append(perWave[w], b.t)
				seq++
				total++
			}
			continue
		case r >= 0.262 && r < 0.268 && p.jobs-total >= 12 && d.wfOn():
			// A workflow (wfdriver.go), enqueued after the plain jobs.
			total += d.scriptWorkflow(seq, w, workMs()/2)
			continue
		case r >= 0.268 && r < 0.271 && p.jobs-total >= 12 && d.wfOn():
			// A batch with callbacks (wfdriver.go), enqueued after the plain jobs.
			total += d.scriptBatch(seq, w, workMs()/2)
			continue
		case r >= 0.271 && r < 0.274 && p.jobs-total >= 12 && d.wfOn():
			// A burst of chunk jobs of one partition, all due in wave w.
			for _, b := range d.chunkBurst(seq) {
				b.e.seq = seq
				refs = append(refs, plainRef{wave: w, idx: len(perWave[w]), e: b.e})
				perWave[w] = append(perWave[w], b.t)
				seq++
				total++
			}
			continue
		case r < 0.175 && p.jobs-total >= 4 && d.roll == nil:
			// A dedup group of 2-4 enqueues of one key; about a quarter of the groups have
			// a member that asks to be Independent.
			k := 2 + d.rng.IntN(3)
			g := dedupEnq{wave: w}
			indep := -1
			if d.rng.IntN(4) == 0 {
				indep = 1 + d.rng.IntN(k-1)
			}
			for i := range k {
				g.tasks = append(g.tasks, Dedup{Key: fmt.Sprintf("key-%d", seq), Adds: 1 + d.rng.IntN(9), Indep: i == indep, WorkMs: workMs()})
			}
			groups = append(groups, g)
			total += k
			continue
		default:
			e.scenario = scOK
			t = Job{Seq: seq, Scenario: scOK, WorkMs: workMs()}
		}
		refs = append(refs, plainRef{wave: w, idx: len(perWave[w]), e: e})
		perWave[w] = append(perWave[w], t)
		total++
	}
	// Plain tasks: one EnqueueMany per wave, due after the wave's offset.
	ids := make([][]venturi.Result, waves)
	for w, tasks := range perWave {
		if len(tasks) == 0 {
			continue
		}
		res, err := q.EnqueueMany(ctx, tasks, venturi.After(time.Duration(w)*wave))
		if err != nil {
			return 0, err
		}
		ids[w] = res
	}
	for _, r := range refs {
		res := ids[r.wave][r.idx]
		if res.Action != venturi.ActionInserted {
			return 0, fmt.Errorf("plain enqueue reported %v", res.Action)
		}
		r.e.id = res.ID
		expects = append(expects, r.e)
	}
	// Dedup groups: each member in its own enqueue; predict every merge decision
	// independently of what venturi reports, and compare.
	for gi, g := range groups {
		var pending []int // indexes into expects of this key's pending jobs, oldest first
		for _, t := range g.tasks {
			res, err := q.Enqueue(ctx, t, venturi.After(time.Duration(g.wave)*wave))
			if err != nil {
				return 0, fmt.Errorf("dedup enqueue: %w", err)
			}
			switch {
			case len(pending) == 0 || t.Indep:
				want := venturi.ActionInserted
				if len(pending) > 0 {
					want = venturi.ActionIndependent
				}
				if res.Action != want {
					return 0, fmt.Errorf("dedup group %d: enqueue reported %v, want %v", gi, res.Action, want)
				}
				seq++
				expects = append(expects, expect{id: res.ID, seq: seq, scenario: scDedup, state: "completed", value: int64(t.Adds)})
				pending = append(pending, len(expects)-1)
			default:
				target := &expects[pending[len(pending)-1]] // the newest pending job of the key
				if res.Action != venturi.ActionMerged || res.ID != target.id {
					return 0, fmt.Errorf("dedup group %d: enqueue reported %v into %v, want merged into %v", gi, res.Action, res.ID, target.id)
				}
				target.value += int64(t.Adds)
			}
		}
	}
	// Workflows and batches: each in its own enqueue.
	wfExpects, err := d.enqueueWorkflows(ctx, q, d.wf.plans, &seq)
	if err != nil {
		return 0, err
	}
	expects = append(expects, wfExpects...)
	rows := make([][]any, 0, len(expects))
	for _, e := range expects {
		rows = append(rows, []any{uuidOf(e.id), e.seq, e.scenario, e.state, e.pauses, e.value, e.group, e.slotKey, e.slotLim, e.part, e.steps})
	}
	_, err = d.pool.CopyFrom(ctx, pgx.Identifier{"chaos_expect"},
		[]string{"job_id", "seq", "scenario", "want_state", "want_pauses", "want_value", "grp", "slot_key", "slot_limit", "part", "want_steps"},
		pgx.CopyFromRows(rows))
	if err != nil {
		return 0, err
	}
	if d.wfOn() {
		if err := writeWfScripts(ctx, d.pool, d.wf.plans); err != nil {
			return 0, err
		}
		if err := d.enqueueRetain(ctx, &seq); err != nil {
			return 0, err
		}
	}
	// A third of the wait jobs get their signal before their first run: it must be kept
	// and end the wait at once. The signaller sends the same delivery ID again later. (Not
	// in a rolling run: the schema is the older one, and the signal statement this
	// checkout sends needs the newer.)
	if d.roll != nil {
		return total, nil
	}
	n := 0
	for _, e := range expects {
		if e.scenario != scWait {
			continue
		}
		if n++; n%3 == 0 {
			if _, err := q.Signal(ctx, e.id, waitSignal, e.seq, waitDelivery(e.id)); err != nil {
				return 0, fmt.Errorf("early signal: %w", err)
			}
		}
	}
	return total, nil
}

type flowTask struct {
	t venturi.Task
	e expect
}

// flowBurst scripts a burst of flow-controlled jobs of one gate (r in [0.175, 0.192)
// picks the scenario): 3-6 jobs of a shared slot key (SlotQueue), 4-8 capped jobs, 5-12
// rated jobs of one partition, 3-6 jobs of the limited queue, or 2-4 (drop) and 2-3
// (replace) jobs of a slot key of their own. Each burst has its own group name.
func (d *driver) flowBurst(seq int64, r float64) []flowTask {
	var out []flowTask
	grp := fmt.Sprintf("burst-%d", seq)
	add := func(t venturi.Task, e expect) {
		e.group = grp
		if e.state == "" {
			e.state = "completed"
		}
		out = append(out, flowTask{t: t, e: e})
	}
	// Work of tens of milliseconds, so that the limits bind; longer for drop and replace,
	// so that the burst's later jobs meet a full slot.
	short := func() int { return 20 + d.rng.IntN(60) }
	switch {
	case r < 0.179:
		k := slotKeys[d.rng.IntN(len(slotKeys))]
		for range 3 + d.rng.IntN(4) {
			add(Slotted{Seq: seq, Key: k.key, Limit: k.limit, Policy: venturi.SlotQueue, WorkMs: short()},
				expect{scenario: scSlot, slotKey: k.key, slotLim: k.limit, part: k.key})
		}
	case r < 0.182:
		for range 4 + d.rng.IntN(5) {
			part := cappedParts[d.rng.IntN(len(cappedParts))]
			add(Capped{Seq: seq, Part: part, WorkMs: 40 + d.rng.IntN(80)}, expect{scenario: scCapped, part: part})
		}
	case r < 0.185:
		part := ratedParts[d.rng.IntN(len(ratedParts))]
		for range 5 + d.rng.IntN(8) {
			add(Rated{Seq: seq, Part: part, WorkMs: short()}, expect{scenario: scRated, part: part})
		}
	case r < 0.187:
		for range 3 + d.rng.IntN(4) {
			add(Queued{Seq: seq, WorkMs: short()}, expect{scenario: scQueued})
		}
	case r < 0.1895:
		key := "drop-" + grp
		for range 2 + d.rng.IntN(3) {
			add(Slotted{Seq: seq, Key: key, Limit: 1, Policy: venturi.SlotDropIfRunning, WorkMs: 150 + d.rng.IntN(150)},
				expect{scenario: scDrop, state: "completed|cancelled", slotKey: key, slotLim: 1, part: key})
		}
	default:
		key := "replace-" + grp
		for range 2 + d.rng.IntN(2) {
			add(Slotted{Seq: seq, Key: key, Limit: 1, Policy: venturi.SlotReplace, WorkMs: 400 + d.rng.IntN(400)},
				expect{scenario: scReplace, state: "completed|cancelled", slotKey: key, slotLim: 1, part: key})
		}
	}
	return out
}

// ---- worker processes ---------------------------------------------------------------

func (d *driver) spawn(slot int) error {
	dsn, err := d.workerDSN(slot)
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(d.o.logdir, fmt.Sprintf("worker-%d.log", slot)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	exe, old := d.exeFor(slot)
	cmd := exec.Command(exe, "worker", "-n", fmt.Sprint(slot), "-lease", d.o.lease.String(),
		fmt.Sprintf("-poll-only=%v", d.behindPgBouncer(slot)), "-ledger", ledgerPath(d.o.logdir, slot))
	cmd.Env = append(os.Environ(), "CHAOS_DSN="+dsn)
	if rdsn, err := d.retainDSN(slot); err != nil {
		return err
	} else if rdsn != "" {
		cmd.Env = append(cmd.Env, "CHAOS_DSN_RETAIN="+rdsn)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own process group (killed as a group); SIGKILL if the driver dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	fmt.Fprintf(logf, "--- chaos: worker %d started, pid %d, %s\n", slot, cmd.Process.Pid, filepath.Base(exe))
	p := &proc{slot: slot, cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		if !p.ending.Load() {
			d.mu.Lock()
			d.exits = append(d.exits, fmt.Sprintf("worker %d (pid %d) exited at %s: %v", slot, p.pid, time.Now().Format("15:04:05.000"), err))
			d.mu.Unlock()
		}
		close(p.done)
	}()
	d.mu.Lock()
	for len(d.procs) < slot {
		d.procs = append(d.procs, nil)
	}
	d.procs[slot-1] = p
	d.spawns++
	if old {
		d.roll.oldPIDs = append(d.roll.oldPIDs, p.pid)
	}
	d.mu.Unlock()
	return nil
}

func signalGroup(p *proc, sig syscall.Signal) {
	_ = syscall.Kill(-p.pid, sig)
}

// fleetStop stops the workers gracefully (SIGTERM), then kills what is left.
func (d *driver) fleetStop() {
	d.mu.Lock()
	procs := slices.Clone(d.procs)
	d.mu.Unlock()
	for _, p := range procs {
		if p != nil {
			p.ending.Store(true)
			signalGroup(p, syscall.SIGCONT)
			signalGroup(p, syscall.SIGTERM)
		}
	}
	deadline := time.After(12 * time.Second)
	for _, p := range procs {
		if p == nil {
			continue
		}
		select {
		case <-p.done:
		case <-deadline:
		}
	}
	d.fleetKillAll()
}

func (d *driver) fleetKillAll() {
	d.mu.Lock()
	procs := slices.Clone(d.procs)
	d.mu.Unlock()
	for _, p := range procs {
		if p == nil {
			continue
		}
		select {
		case <-p.done:
			continue
		default:
		}
		p.ending.Store(true)
		signalGroup(p, syscall.SIGKILL)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
		}
	}
}

// ---- faults -------------------------------------------------------------------------

type plannedFault struct {
	at   time.Duration // after the workers started
	kind string
	mode string // restart mode
}

// quietAfter is how long after a whole-system fault no kill, stop, burst or LISTEN kill
// is scheduled (3s before it too), so that its recovery is measured on its own.
func (pf plannedFault) quietAfter(lease time.Duration) time.Duration {
	switch pf.kind {
	case "half-open":
		return lease*5/2 + time.Second + lease + 4*time.Second // the cut, a lease, recovery
	case "pgbouncer-restart":
		return 8 * time.Second
	case "failover":
		return failoverQuiet
	}
	return 15 * time.Second
}

func (d *driver) plan() []plannedFault {
	p := d.o.prof
	lo, hi := 3*time.Second, p.arrival-2*time.Second
	var out []plannedFault
	// Whole-system faults (PostgreSQL restarts, half-open cuts, PgBouncer restarts): in a
	// seeded order, spread evenly (one per slice of the window) so each one is observed
	// alone.
	var big []plannedFault
	for _, m := range p.restarts {
		big = append(big, plannedFault{kind: "pg-restart", mode: m})
	}
	for range p.halfOpen {
		big = append(big, plannedFault{kind: "half-open"})
	}
	if p.pgbWorkers > 0 {
		for range p.pgbRestart {
			big = append(big, plannedFault{kind: "pgbouncer-restart"})
		}
	}
	for range p.failovers {
		big = append(big, plannedFault{kind: "failover"})
	}
	for range p.walFull {
		big = append(big, plannedFault{kind: "wal-full"})
	}
	d.rng.Shuffle(len(big), func(i, j int) { big[i], big[j] = big[j], big[i] })
	for i := range big {
		slice := (hi - lo) / time.Duration(len(big))
		big[i].at = lo + time.Duration(i)*slice + slice/4 + time.Duration(d.rng.Int64N(int64(slice/4)))
		out = append(out, big[i])
	}
	// Other faults at random moments, but not close to a whole-system fault: a restart
	// takes seconds, and the faults scheduled meanwhile would fire together when it
	// returns; recovery from a kill is measured apart from recovery from an outage.
	span := func() time.Duration {
		for range 1000 {
			at := lo + time.Duration(d.rng.Int64N(int64(hi-lo)))
			quiet := true
			for _, b := range big {
				if at > b.at-3*time.Second && at < b.at+b.quietAfter(d.o.lease) {
					quiet = false
				}
			}
			if quiet {
				return at
			}
		}
		return hi
	}
	for range p.kills {
		out = append(out, plannedFault{at: span(), kind: "sigkill"})
	}
	for range p.stops {
		out = append(out, plannedFault{at: span(), kind: "sigstop"})
	}
	for range p.bursts {
		out = append(out, plannedFault{at: span(), kind: "terminate-burst"})
	}
	for range p.listenKill {
		out = append(out, plannedFault{at: span(), kind: "listen-kill"})
	}
	slices.SortFunc(out, func(a, b plannedFault) int { return int(a.at - b.at) })
	return out
}

func (d *driver) record(f fault) {
	d.mu.Lock()
	d.faults = append(d.faults, f)
	d.mu.Unlock()
}

func (d *driver) injectFaults(ctx context.Context) {
	var stops sync.WaitGroup
	defer stops.Wait()
	for _, pf := range d.plan() {
		wait := time.Until(d.started.Add(pf.at))
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
		switch pf.kind {
		case "sigkill":
			d.kill(ctx)
		case "sigstop":
			stops.Add(1)
			go func() { defer stops.Done(); d.stop(ctx) }()
		case "pg-restart":
			d.restartPG(ctx, pf.mode)
		case "terminate-burst":
			d.terminateBurst(ctx)
		case "listen-kill":
			d.listenKill(ctx)
		case "half-open":
			d.halfOpen(ctx)
		case "pgbouncer-restart":
			d.pgbouncerRestart(ctx)
		case "failover":
			d.failover(ctx)
		case "wal-full":
			d.fullDiskFault(ctx)
		}
	}
}

// runFaults runs the fault schedule, and beside it the live producer (for the arrival
// window), the long transaction and the replication-lag sampler, when the mode has them.
func (d *driver) runFaults(ctx context.Context) {
	var wg sync.WaitGroup
	if d.prod != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithDeadline(ctx, d.started.Add(d.o.prof.arrival))
			defer cancel()
			d.prod.run(pctx)
		}()
	}
	if d.ltx != nil {
		wg.Add(1)
		go func() { defer wg.Done(); d.ltx.run(ctx) }()
	}
	if d.roll != nil {
		wg.Add(1)
		go func() { defer wg.Done(); d.runRolling(ctx) }()
	}
	if d.repl != nil {
		d.repl.killed = make(chan struct{})
		wg.Add(1)
		go func() { defer wg.Done(); d.sampleLag(ctx, d.repl.killed) }()
	}
	d.injectFaults(ctx)
	if d.repl != nil {
		d.repl.markKilled()
	}
	wg.Wait()
}

// pickRunning chooses a worker that is not stopped.
func (d *driver) pickRunning() *proc {
	d.mu.Lock()
	defer d.mu.Unlock()
	var c []*proc
	for _, p := range d.procs {
		if p != nil && !p.stopped {
			c = append(c, p)
		}
	}
	if len(c) == 0 {
		return nil
	}
	return c[d.rng.IntN(len(c))]
}

func (d *driver) kill(ctx context.Context) {
	d.swap.Lock()
	defer d.swap.Unlock()
	p := d.pickRunning()
	if p == nil {
		return
	}
	d.record(fault{Kind: "sigkill", At: time.Now(), Worker: p.slot, PID: p.pid})
	p.ending.Store(true)
	signalGroup(p, syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
	}
	if ctx.Err() != nil {
		return
	}
	if err := d.spawn(p.slot); err != nil {
		d.logf("restart of worker %d failed: %v", p.slot, err)
	}
}

// pickBusiest chooses the (not stopped) worker that holds the most running jobs, so
// that a stall has runs to cut; a random one if the query fails.
func (d *driver) pickBusiest(ctx context.Context) *proc {
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	rows, err := d.pool.Query(qctx, `SELECT worker_id, count(*) FROM venturi_job WHERE state = 'running' GROUP BY 1 ORDER BY 2 DESC`)
	if err == nil {
		defer rows.Close()
		for rows.Next() {
			var w string
			var n int
			if rows.Scan(&w, &n) != nil {
				break
			}
			pid := pidOf(w)
			d.mu.Lock()
			for _, p := range d.procs {
				if p != nil && p.pid == pid && !p.stopped {
					d.mu.Unlock()
					return p
				}
			}
			d.mu.Unlock()
		}
	}
	return d.pickRunning()
}

func (d *driver) stop(ctx context.Context) {
	p := d.pickBusiest(ctx)
	if p == nil {
		return
	}
	d.mu.Lock()
	p.stopped = true
	d.mu.Unlock()
	hold := d.o.lease*5/2 + time.Second
	at := time.Now()
	signalGroup(p, syscall.SIGSTOP)
	d.logf("SIGSTOP worker %d (pid %d) for %v", p.slot, p.pid, hold)
	t := time.NewTimer(hold)
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	signalGroup(p, syscall.SIGCONT)
	d.record(fault{Kind: "sigstop", At: at, Until: time.Now(), Worker: p.slot, PID: p.pid, Detail: hold.String()})
	d.mu.Lock()
	p.stopped = false
	d.mu.Unlock()
}

func (d *driver) restartPG(ctx context.Context, mode string) {
	at := time.Now()
	d.logf("restarting PostgreSQL (%s)", mode)
	cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, d.o.pgsh, "restart", mode)
	cmd.Env = os.Environ() // VENTURI_PGDATA points at the chaos cluster (checked at start)
	out, err := cmd.CombinedOutput()
	up := time.Now()
	detail := ""
	if err != nil {
		detail = fmt.Sprintf("pg.sh restart failed: %v: %s", err, strings.TrimSpace(string(out)))
		d.logf("%s", detail)
	}
	d.record(fault{Kind: "pg-restart-" + mode, At: at, Until: up, Detail: detail})
	d.logf("PostgreSQL back after %v", up.Sub(at).Round(time.Millisecond))
}

// terminateBurst kills the workers' backends (all three) five times, 200ms apart.
func (d *driver) terminateBurst(ctx context.Context) {
	at := time.Now()
	total := 0
	for i := range 5 {
		var n int
		err := d.pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE application_name LIKE 'chaos-worker-%' AND pid <> pg_backend_pid()`).Scan(&n)
		if err == nil {
			total += n
		}
		if i < 4 {
			sleepCtx(ctx, 200*time.Millisecond)
		}
	}
	d.record(fault{Kind: "terminate-burst", At: at, Until: time.Now(), Detail: fmt.Sprintf("%d backends", total)})
}

// listenKill terminates the workers' LISTEN connections. pg_stat_activity shows a
// backend's last statement: LISTEN, or the listener's SELECT 1 heartbeat when quiet.
func (d *driver) listenKill(ctx context.Context) {
	at := time.Now()
	var n int
	err := d.pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name LIKE 'chaos-worker-%' AND state = 'idle'
		  AND (query LIKE 'LISTEN%' OR query = 'SELECT 1')`).Scan(&n)
	detail := fmt.Sprintf("%d listener(s)", n)
	if err != nil {
		detail = "query failed: " + err.Error()
	}
	d.record(fault{Kind: "listen-kill", At: at, Until: time.Now(), Detail: detail})
}

// waitDelivery is the delivery ID of a wait job's signal: every send to the job uses it,
// so the job gets the signal once however often it is sent.
func waitDelivery(id ulid.ULID) string { return "go-" + id.String() }

// signaller sends waitSignal to every waiting wait job, twice, every 200 ms until ctx
// ends: the signals of the wait scenario. Errors (the database restarting) wait for the
// next round.
func (d *driver) signaller(ctx context.Context) {
	q := venturi.NewQueue(d.pool, venturi.QueueConfig{})
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		rows, err := d.pool.Query(qctx, `SELECT id FROM venturi_job WHERE kind = $1 AND state = 'waiting'`, Waiter{}.Kind())
		var ids []ulid.ULID
		if err == nil {
			for rows.Next() {
				var u pgtype.UUID
				if rows.Scan(&u) == nil {
					ids = append(ids, ulid.ULID(u.Bytes))
				}
			}
			rows.Close()
		}
		for _, id := range ids {
			for range 2 {
				_, _ = q.Signal(qctx, id, waitSignal, nil, waitDelivery(id))
			}
		}
		cancel()
	}
}

func sleepCtx(ctx context.Context, dur time.Duration) {
	t := time.NewTimer(dur)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// waitTerminal polls until every job is completed, dead or cancelled (but the singleton,
// which runs forever, and the cron schedule's ticks, which keep coming), no enqueue from
// SQL waits for a Go merge, and the fault schedule ran,
// or the deadline passes. It returns the number of jobs not terminal.
func (d *driver) waitTerminal(ctx context.Context, faultsDone <-chan struct{}) (int, error) {
	last := -1
	lastLog := time.Now()
	for {
		var n int
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		// Enqueues from SQL waiting for a Go merge (sqlproducer.go) may still become jobs.
		err := d.pool.QueryRow(qctx, `SELECT (SELECT count(*) FROM venturi_job WHERE state NOT IN ('completed', 'dead', 'cancelled') AND kind <> ALL($1))
			+ (SELECT count(*) FROM venturi_deferred_merge)`,
			[]string{singletonKind, cronKind}).Scan(&n)
		// Workflows: open ones and unsettled changes (a settle may release more), in both
		// schemas (wfdriver.go).
		for _, pool := range []*pgxpool.Pool{d.pool, d.wf.rpool} {
			if err == nil && pool != nil && d.wfOn() {
				var m int
				m, err = wfPending(qctx, pool)
				n += m
			}
		}
		cancel()
		if err == nil {
			last = n
			select {
			case <-faultsDone:
				if n == 0 {
					return 0, nil
				}
			default:
			}
			if time.Since(lastLog) > 10*time.Second {
				d.logf("%d jobs not terminal yet", n)
				lastLog = time.Now()
			}
		}
		t := time.NewTimer(250 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return last, fmt.Errorf("deadline: %w", ctx.Err())
		}
	}
}

func (d *driver) saveFaults(ctx context.Context) error {
	d.mu.Lock()
	fs := slices.Clone(d.faults)
	d.mu.Unlock()
	var rows [][]any
	for _, f := range fs {
		var until any
		if !f.Until.IsZero() {
			until = f.Until
		}
		rows = append(rows, []any{f.Kind, f.At, until, f.Worker, f.PID, f.Detail})
	}
	var err error
	for range 20 { // the database may still be coming back from the last restart
		_, err = d.pool.CopyFrom(ctx, pgx.Identifier{"chaos_fault"},
			[]string{"kind", "at", "until", "worker", "pid", "detail"}, pgx.CopyFromRows(rows))
		if err == nil {
			return nil
		}
		sleepCtx(ctx, 500*time.Millisecond)
	}
	return err
}

// checkOnlyMain re-runs the checker on the schema an earlier run left behind.
func checkOnlyMain(o options) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dsn, err := withParams(o.dsn, "search_path", o.schema, "application_name", "chaos-driver")
	if err != nil {
		return 2, err
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return 1, err
	}
	defer pool.Close()
	cfg := checkConfig{lease: o.lease, control: o.control}
	// The retention schema (wfdriver.go), when the run had one.
	var hasRetain bool
	if err := pool.QueryRow(ctx, `SELECT to_regnamespace($1) IS NOT NULL`, o.schema+"_retain").Scan(&hasRetain); err != nil {
		return 1, err
	}
	if hasRetain {
		rdsn, err := withParams(o.dsn, "search_path", o.schema+"_retain", "application_name", "chaos-driver")
		if err != nil {
			return 2, err
		}
		if cfg.retain, err = pgxpool.New(ctx, rdsn); err != nil {
			return 1, err
		}
		defer cfg.retain.Close()
	}
	rep, err := check(ctx, pool, cfg)
	if err != nil {
		return 1, fmt.Errorf("check: %w", err)
	}
	rep.print(os.Stdout, "check of schema "+o.schema, o.seed, 0, 0)
	if len(rep.violations) > 0 {
		return 1, fmt.Errorf("%d invariant violation(s)", len(rep.violations))
	}
	return 0, nil
}

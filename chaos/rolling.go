package main

// The rolling-deploy mode (-rolling REV, make chaos/rolling): workers built from an older
// commit run the scripted workload on the schema of that commit; under load and with the
// usual faults the driver applies the newer migrations, then replaces the older workers
// one by one with workers of this checkout, so that for most of the run both versions work
// the same queue. The check is the usual one: nothing lost, no job completed twice by
// acknowledged commits, every job readable (through venturi_job_all, after the run).
//
// Each migration's header says what older workers may do meanwhile; this mode is its test.
// The driver enqueues before any worker starts, on the older schema, with the statements
// the older version sends too (venturi's InsertJobs; the mode leaves out the dedup groups
// and the early signals, whose statements need the newer schema, as a newer producer
// would only run once the migration has applied). The signaller's deliveries fail until
// then and are retried.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi"
)

// invRolled: the mode did what it is for.
const invRolled = "rolling deploy: the newer migrations applied under load, beside the older workers"

// rollingProfile is the short profile's workload and faults without PgBouncer, over a
// longer window: the migration and three worker replacements take their places in it.
var rollingProfile = profile{name: "rolling", jobs: 2500, arrival: 90 * time.Second, workMs: 250, workers: 3,
	kills: 15, stops: 1, restarts: []string{"immediate"}, bursts: 1, listenKill: 1,
	halfOpen: 1, deadline: 4 * time.Minute}

// The rolling schedule, from the workers' start: the migration, then each slot's
// replacement by a newer worker (slot 1 last, so that an older worker runs beside newer
// ones for most of the window).
const rollingMigrateAt = 12 * time.Second

var rollingUpgrades = []struct {
	slot int
	at   time.Duration
}{{2, 30 * time.Second}, {3, 45 * time.Second}, {1, 65 * time.Second}}

// rolling is the mode's state: the older build and which slots run it.
type rolling struct {
	rev        string // the older commit, as given
	oldExe     string // its chaos binary
	oldVersion int    // its highest migration
	dir        string // the temporary directory of the build

	migrated chan struct{} // closed once the newer migrations applied
	upgraded map[int]bool  // slots whose next start runs this checkout's binary (under driver.mu)
	oldPIDs  []int         // the processes started from the older build (under driver.mu)
}

// buildRolling checks REV out into a temporary git worktree of this repository, builds its
// chaos binary there (the worktree's go.work: its own venturi) and reads its schema
// version from its migrations. The worktree is removed; the binary stays until cleanup.
func buildRolling(ctx context.Context, rev string, logf func(string, ...any)) (*rolling, error) {
	top, err := exec.CommandContext(ctx, "git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return nil, fmt.Errorf("-rolling needs the repository (git rev-parse --show-toplevel): %w", err)
	}
	repo := strings.TrimSpace(string(top))
	dir, err := os.MkdirTemp("", "venturi-chaos-rolling-")
	if err != nil {
		return nil, err
	}
	r := &rolling{rev: rev, dir: dir, migrated: make(chan struct{}), upgraded: map[int]bool{}}
	tree := filepath.Join(dir, "tree")
	run := func(cmdDir string, env []string, name string, args ...string) error {
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = cmdDir
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := run(repo, nil, "git", "worktree", "add", "--detach", tree, rev); err != nil {
		r.cleanup()
		return nil, err
	}
	defer func() { _ = run(repo, nil, "git", "worktree", "remove", "--force", tree) }()
	r.oldExe = filepath.Join(dir, "chaos-"+rev)
	t0 := time.Now()
	// GOWORK unset: the worktree's go.work, so the older chaos builds against the older venturi.
	if err := run(filepath.Join(tree, "chaos"), []string{"GOWORK="}, "go", "build", "-o", r.oldExe, "."); err != nil {
		r.cleanup()
		return nil, err
	}
	ms, err := venturi.ReadMigrations(os.DirFS(filepath.Join(tree, "venturi", "migration")))
	if err != nil || len(ms) == 0 {
		r.cleanup()
		return nil, fmt.Errorf("the migrations of %s: %v (%d)", rev, err, len(ms))
	}
	for _, m := range ms {
		r.oldVersion = max(r.oldVersion, m.Version)
	}
	logf("rolling: built the workers of %s (schema version %d) in %v", rev, r.oldVersion, time.Since(t0).Round(time.Millisecond))
	return r, nil
}

func (r *rolling) cleanup() { _ = os.RemoveAll(r.dir) }

// migrateOld applies this checkout's migrations up to the older version only.
func (r *rolling) migrateOld(ctx context.Context, pool *pgxpool.Pool) error {
	all, err := venturi.ReadMigrations(venturi.MigrationsFS())
	if err != nil {
		return err
	}
	fsys := fstest.MapFS{}
	for _, m := range all {
		if m.Version <= r.oldVersion {
			fsys[m.Name+".up.sql"] = &fstest.MapFile{Data: []byte(m.SQL)}
		}
	}
	if len(fsys) == 0 {
		return errors.New("no migration at or below the older version")
	}
	_, err = venturi.MigrateFS(ctx, pool, fs.FS(fsys), "venturi_migration")
	return err
}

// exeFor is the binary a slot's next start runs, and whether it is the older build.
func (d *driver) exeFor(slot int) (string, bool) {
	if d.roll == nil {
		return d.exe, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.roll.upgraded[slot] {
		return d.exe, false
	}
	return d.roll.oldExe, true
}

// runRolling runs the schedule: the newer migrations at rollingMigrateAt (tried again
// until they apply: a fault may cut the first attempt off), then the replacements.
func (d *driver) runRolling(ctx context.Context) {
	if !sleepUntil(ctx, d.started.Add(rollingMigrateAt)) {
		return
	}
	for {
		f := fault{Kind: "migrate", At: time.Now()}
		mctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		applied, err := venturi.Migrate(mctx, d.pool)
		cancel()
		f.Until = time.Now()
		if err == nil {
			f.Detail = fmt.Sprintf("versions %v", applied)
			d.record(f)
			d.logf("rolling: migrated %v in %v, beside the workers of %s", applied, f.Until.Sub(f.At).Round(time.Millisecond), d.roll.rev)
			close(d.roll.migrated)
			break
		}
		f.Detail = "failed: " + err.Error()
		d.record(f)
		d.logf("rolling: migration failed (%v), again", err)
		if !sleepUntil(ctx, time.Now().Add(time.Second)) {
			return
		}
	}
	for _, u := range rollingUpgrades {
		if !sleepUntil(ctx, d.started.Add(u.at)) {
			return
		}
		d.upgrade(ctx, u.slot)
	}
}

// upgrade stops a slot's worker as a deploy does (SIGTERM: it releases what it has not
// started and finishes the rest within its stop timeout) and starts this checkout's in
// its place.
func (d *driver) upgrade(ctx context.Context, slot int) {
	d.swap.Lock()
	defer d.swap.Unlock()
	d.mu.Lock()
	d.roll.upgraded[slot] = true
	var p *proc
	if slot <= len(d.procs) {
		p = d.procs[slot-1]
	}
	d.mu.Unlock()
	f := fault{Kind: "upgrade", At: time.Now(), Worker: slot}
	if p != nil {
		f.PID = p.pid
		p.ending.Store(true)
		signalGroup(p, syscall.SIGCONT) // a SIGSTOPped worker must see the SIGTERM
		signalGroup(p, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(40 * time.Second):
			signalGroup(p, syscall.SIGKILL)
			<-p.done
			f.Detail = "did not stop in 40s: killed"
		}
	}
	f.Until = time.Now()
	d.record(f)
	if ctx.Err() != nil {
		return
	}
	if err := d.spawn(slot); err != nil {
		d.logf("rolling: start of the newer worker %d failed: %v", slot, err)
		return
	}
	d.logf("rolling: worker %d now runs this checkout (the older one stopped in %v)", slot, f.Until.Sub(f.At).Round(time.Millisecond))
}

// sleepUntil waits until t; false when ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	sleepCtx(ctx, time.Until(t))
	return ctx.Err() == nil
}

// rollingReport adds what the mode did to the report: how many runs each build started.
func (d *driver) rollingReport(ctx context.Context, rep *report) error {
	d.mu.Lock()
	pids := slices.Clone(d.roll.oldPIDs)
	d.mu.Unlock()
	var old, cur int64
	if err := d.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pid = ANY($1)), count(*) FILTER (WHERE pid <> ALL($1)) FROM chaos_start`,
		pids).Scan(&old, &cur); err != nil {
		return err
	}
	rep.extra += fmt.Sprintf("rolling deploy from %s (schema version %d): %d runs started by its workers (%d processes), %d by this checkout's\n",
		d.roll.rev, d.roll.oldVersion, old, len(pids), cur)
	return nil
}

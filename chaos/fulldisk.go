package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Full disk (`chaos -fulldisk D`, README.md "Full disk"): the cluster's WAL is on a small
// tmpfs of its own (scripts/pg-waldisk.sh, which sets VENTURI_WALDISK); mid-run the driver
// fills it with a file, holds it full for D while the workload and the live producer
// go on, removes the file and, if PostgreSQL stopped, starts it again. Enqueues must fail
// with an error a producer can act on (transient), the workers must stay up and back off
// (their error logs and CPU while the database is gone are measured and bounded), and
// everything resumes once space is back; nothing acknowledged may be lost.

// Bounds on a worker while the database is gone: a worker that spins (retries without
// backing off) logs thousands of lines a second and burns a core.
const (
	backoffMaxLogRate = 20.0 // warnings and errors per second, over the fault's window
	backoffMaxCPU     = 0.5  // cores
)

const (
	invAlive   = "worker processes stay up (none exits unless the driver kills it)"
	invBackoff = "workers back off while the database is gone (log rate, CPU)"
)

type fullDisk struct {
	dir  string // the WAL's filesystem (VENTURI_WALDISK)
	hold time.Duration

	mu        sync.Mutex
	filler    int64
	fillErr   string
	fillTook  time.Duration
	downAt    time.Time // first probe that failed
	downErr   string
	restarted bool
	restartIn time.Duration
	freedAt   time.Time
	cpu       map[int]float64 // slot -> cores used over the fault's window
	window    [2]time.Time
}

func (fd *fullDisk) fillerPath() string { return filepath.Join(fd.dir, "chaos-filler") }

// fill writes zeros to the filler file until the filesystem has no room left.
func (fd *fullDisk) fill() (int64, error) {
	f, err := os.OpenFile(fd.fillerPath(), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	var n int64
	for {
		w, err := f.Write(buf)
		n += int64(w)
		if errors.Is(err, syscall.ENOSPC) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// probe says whether PostgreSQL accepts a connection and a write-free query within a
// second.
func (d *driver) probe(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	conn, err := pgx.Connect(pctx, d.o.dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(pctx, "SELECT 1")
	return err
}

// pgRunning asks pg.sh whether the postmaster runs.
func (d *driver) pgRunning(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return exec.CommandContext(cctx, d.o.pgsh, "status").Run() == nil
}

// fullDiskFault fills the WAL's filesystem, holds it full, frees it and brings
// PostgreSQL back if it stopped (PostgreSQL PANICs when it cannot write WAL; its crash
// recovery then fails for want of room and the postmaster exits).
func (d *driver) fullDiskFault(ctx context.Context) {
	fd := d.disk
	cpu0 := d.workerCPU()
	at := time.Now()
	d.logf("full disk: filling %s", fd.dir)
	n, err := fd.fill()
	fd.mu.Lock()
	fd.filler, fd.fillTook = n, time.Since(at)
	if err != nil {
		fd.fillErr = err.Error()
	}
	fd.mu.Unlock()
	d.logf("full disk: %d MiB of filler; holding it for %v", n>>20, fd.hold)
	end := time.Now().Add(fd.hold)
	for time.Now().Before(end) && ctx.Err() == nil {
		if err := d.probe(ctx); err != nil {
			fd.mu.Lock()
			if fd.downAt.IsZero() {
				fd.downAt, fd.downErr = time.Now(), errClass(err.Error())
			}
			fd.mu.Unlock()
		}
		sleepCtx(ctx, 250*time.Millisecond)
	}
	if err := os.Remove(fd.fillerPath()); err != nil {
		d.logf("full disk: removing the filler: %v", err)
	}
	freed := time.Now()
	d.logf("full disk: filler removed")
	// Back: PostgreSQL accepts connections again, by itself or after a start.
	var up time.Time
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if d.probe(ctx) == nil {
			up = time.Now()
			break
		}
		if !d.pgRunning(ctx) {
			t0 := time.Now()
			d.logf("full disk: PostgreSQL stopped; starting it again")
			cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
			out, err := exec.CommandContext(cctx, d.o.pgsh, "restart", "fast").CombinedOutput()
			cancel()
			if err != nil {
				d.logf("full disk: pg.sh restart: %v: %s", err, strings.TrimSpace(string(out)))
			}
			fd.mu.Lock()
			fd.restarted, fd.restartIn = true, time.Since(t0)
			fd.mu.Unlock()
			continue
		}
		sleepCtx(ctx, 250*time.Millisecond)
	}
	if up.IsZero() {
		up = time.Now()
		d.logf("full disk: PostgreSQL is not back after 90s")
	}
	cpu1 := d.workerCPU()
	fd.mu.Lock()
	fd.freedAt = freed
	fd.window = [2]time.Time{at, up}
	fd.cpu = map[int]float64{}
	for slot, c := range cpu1 {
		if c0, ok := cpu0[slot]; ok && c.pid == c0.pid {
			fd.cpu[slot] = (c.secs - c0.secs) / up.Sub(at).Seconds()
		}
	}
	detail := fmt.Sprintf("%d MiB of filler; held %v; PostgreSQL %s; back %v after the filler was removed",
		n>>20, fd.hold, fd.downLocked(at), up.Sub(freed).Round(time.Millisecond))
	fd.mu.Unlock()
	d.record(fault{Kind: "wal-full", At: at, Until: up, Detail: detail})
	d.logf("full disk: PostgreSQL accepts connections again (%s)", detail)
}

func (fd *fullDisk) downLocked(at time.Time) string {
	s := "never refused a connection"
	if !fd.downAt.IsZero() {
		s = fmt.Sprintf("refused connections %v after the disk filled (%s)", fd.downAt.Sub(at).Round(time.Millisecond), fd.downErr)
	}
	if fd.restarted {
		s += fmt.Sprintf(", stopped and was started again (in %v)", fd.restartIn.Round(time.Millisecond))
	}
	return s
}

type cpuSample struct {
	pid  int
	secs float64
}

// workerCPU reads each worker process's CPU time (user + system) from /proc.
func (d *driver) workerCPU() map[int]cpuSample {
	d.mu.Lock()
	procs := slices.Clone(d.procs)
	d.mu.Unlock()
	out := map[int]cpuSample{}
	for _, p := range procs {
		if p == nil {
			continue
		}
		if s, err := procCPU(p.pid); err == nil {
			out[p.slot] = cpuSample{pid: p.pid, secs: s}
		}
	}
	return out
}

// procCPU is a process's utime + stime in seconds (/proc/PID/stat, clock ticks of 1/100 s).
func procCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	// Fields after the command name, which is in parentheses and may hold spaces.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("unexpected /proc stat")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, errors.New("short /proc stat")
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("bad /proc stat")
	}
	return (ut + st) / 100, nil
}

// logRate is a worker's warnings and errors inside a window.
type logRate struct {
	lines  int
	perSec float64
	peak   int // most in one second
	sample string
}

// warnRate counts the slog lines of level WARN or ERROR whose time is in [from, to].
func warnRate(log string, from, to time.Time) logRate {
	var r logRate
	perSec := map[int64]int{}
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "time=") || !(strings.Contains(line, " level=WARN ") || strings.Contains(line, " level=ERROR ")) {
			continue
		}
		ts, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		t, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil || t.Before(from) || t.After(to) {
			continue
		}
		r.lines++
		perSec[t.Unix()]++
		if r.sample == "" {
			r.sample = trunc(line, 200)
		}
	}
	for _, n := range perSec {
		r.peak = max(r.peak, n)
	}
	if s := to.Sub(from).Seconds(); s > 0 {
		r.perSec = float64(r.lines) / s
	}
	return r
}

// backoffViolations holds each worker to the bounds over the fault's window.
func backoffViolations(rates map[int]logRate, cpu map[int]float64) []string {
	var out []string
	slots := map[int]bool{}
	for s := range rates {
		slots[s] = true
	}
	for s := range cpu {
		slots[s] = true
	}
	keys := make([]int, 0, len(slots))
	for s := range slots {
		keys = append(keys, s)
	}
	slices.Sort(keys)
	for _, s := range keys {
		if r, ok := rates[s]; ok && r.perSec > backoffMaxLogRate {
			out = append(out, fmt.Sprintf("%s: worker %d logged %d warnings in the window (%.1f/s, at most %d in a second; bound %.0f/s): %s",
				invBackoff, s, r.lines, r.perSec, r.peak, backoffMaxLogRate, r.sample))
		}
		if c, ok := cpu[s]; ok && c > backoffMaxCPU {
			out = append(out, fmt.Sprintf("%s: worker %d used %.2f cores while the disk was full (bound %.2f)", invBackoff, s, c, backoffMaxCPU))
		}
	}
	return out
}

// report adds the full disk's figures and invariants to the summary.
func (fd *fullDisk) report(r *report, logdir string) {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "full disk (WAL on %s)\n", fd.dir)
	from, to := fd.window[0], fd.window[1]
	if from.IsZero() {
		fmt.Fprintf(&b, "  the disk was never filled\n")
		r.require(invBackoff, []string{invBackoff + ": the full-disk fault did not run"})
		r.extra += b.String()
		return
	}
	fmt.Fprintf(&b, "  filler %d MiB written in %v%s; held %v; PostgreSQL %s\n", fd.filler>>20, fd.fillTook.Round(time.Millisecond),
		map[bool]string{true: "", false: " (" + fd.fillErr + ")"}[fd.fillErr == ""], fd.hold, fd.downLocked(from))
	fmt.Fprintf(&b, "  from full to back: %v; back %v after the filler was removed\n", to.Sub(from).Round(time.Millisecond), to.Sub(fd.freedAt).Round(time.Millisecond))
	rates := map[int]logRate{}
	files, _ := filepath.Glob(filepath.Join(logdir, "worker-*.log"))
	for _, f := range files {
		var slot int
		if _, err := fmt.Sscanf(filepath.Base(f), "worker-%d.log", &slot); err != nil {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		rates[slot] = warnRate(string(data), from, to)
	}
	var slots []int
	for s := range rates {
		slots = append(slots, s)
	}
	slices.Sort(slots)
	for _, s := range slots {
		lr := rates[s]
		cpu := "?"
		if c, ok := fd.cpu[s]; ok {
			cpu = fmt.Sprintf("%.3f cores", c)
		}
		fmt.Fprintf(&b, "  worker %d while the database was gone: %d warnings (%.2f/s, at most %d in a second), CPU %s\n", s, lr.lines, lr.perSec, lr.peak, cpu)
	}
	r.require(invBackoff, backoffViolations(rates, fd.cpu))
	r.extra += b.String()
}

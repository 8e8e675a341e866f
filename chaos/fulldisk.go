package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
// go on (topping the file up whenever PostgreSQL frees WAL segments, so that the disk stays
// full), removes the file and, if PostgreSQL stopped, starts it again. Enqueues must fail
// with an error a producer can act on (transient), the workers must stay up and back off
// (their error logs and CPU while the database is gone are measured and bounded), and
// everything resumes once space is back; nothing acknowledged may be lost. The report
// quotes PostgreSQL's server log: the PANIC that stopped it and how the postmaster ended,
// and, for a start that failed, what the server said before it exited.

// Bounds on a worker while the database is gone: a worker that spins (retries without
// backing off) logs thousands of lines a second and burns a core.
const (
	backoffMaxLogRate = 20.0 // warnings and errors per second, over the fault's window
	backoffMaxCPU     = 0.5  // cores
)

const (
	invAlive   = "worker processes stay up (none exits unless the driver kills it)"
	invBackoff = "workers back off while the database is gone (log rate, CPU)"
	invBack    = "PostgreSQL accepts connections again within 90s of the disk being freed"
)

type fullDisk struct {
	dir       string // the WAL's filesystem (VENTURI_WALDISK)
	serverLog string // the cluster's server log ($VENTURI_PGDATA/server.log), quoted in the report
	hold      time.Duration

	mu        sync.Mutex
	filler    int64
	topUp     int64 // of the filler, what was written during the hold into room PostgreSQL freed
	fillErr   string
	fillTook  time.Duration
	downAt    time.Time // first probe that failed
	downErr   string
	restarted bool
	restartIn time.Duration
	freedAt   time.Time
	back      bool            // PostgreSQL accepted a connection after the filler's removal
	said      []string        // the server log from the fill to the first start (or to the return)
	panicked  bool            // ... and it has a PANIC
	failed    []startFailure  // starts that failed
	cpu       map[int]float64 // slot -> cores used over the fault's window
	window    [2]time.Time
}

// startFailure is a `pg.sh restart` that did not bring PostgreSQL up.
type startFailure struct {
	at    time.Time
	err   string   // its exit and pg_ctl's word ("pg_ctl: could not start server")
	quote []string // what the server log said from the attempt on (serverSaid)
}

// reason is the failure without its times and process ids: two starts that failed the
// same way have the same reason.
func (sf startFailure) reason() string {
	var b strings.Builder
	b.WriteString(sf.err)
	for _, l := range sf.quote {
		b.WriteString("\n" + quotePrefix.ReplaceAllString(l, ""))
	}
	return b.String()
}

var quotePrefix = regexp.MustCompile(`^\S+ \[\d+\] `)

func (fd *fullDisk) fillerPath() string { return filepath.Join(fd.dir, "chaos-filler") }

var zeros = make([]byte, 1<<20) // the filler's content; only ever read

// fill writes zeros to the filler file until the filesystem has no room left; with more,
// it appends to the file (a top-up during the hold) instead of starting it afresh.
func (fd *fullDisk) fill(more bool) (int64, error) {
	flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if more {
		flags = os.O_WRONLY | os.O_APPEND
	}
	f, err := os.OpenFile(fd.fillerPath(), flags, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var n int64
	for {
		w, err := f.Write(zeros)
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
	if pgdata := os.Getenv("VENTURI_PGDATA"); pgdata != "" { // pg.sh with sets it
		fd.serverLog = filepath.Join(pgdata, "server.log")
	}
	cpu0 := d.workerCPU()
	logOff := logSize(fd.serverLog)
	at := time.Now()
	d.logf("full disk: filling %s", fd.dir)
	n, err := fd.fill(false)
	fd.mu.Lock()
	fd.filler, fd.fillTook = n, time.Since(at)
	if err != nil {
		fd.fillErr = err.Error()
	}
	fd.mu.Unlock()
	d.logf("full disk: %d MiB of filler; holding it for %v", n>>20, fd.hold)
	// A checkpoint that ends during the hold removes old WAL segments: without a top-up
	// PostgreSQL would write its WAL into that room and the disk would not be full.
	tctx, stopTopUp := context.WithCancel(ctx)
	toppedUp := make(chan struct{})
	go func() {
		defer close(toppedUp)
		for tctx.Err() == nil {
			if n, _ := fd.fill(true); n > 0 {
				fd.mu.Lock()
				fd.filler += n
				fd.topUp += n
				fd.mu.Unlock()
			}
			sleepCtx(tctx, 20*time.Millisecond)
		}
	}()
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
	stopTopUp()
	<-toppedUp
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
			startOff := logSize(fd.serverLog)
			fd.mu.Lock()
			first := !fd.restarted
			if first {
				fd.said, fd.panicked = serverSaid(readLog(fd.serverLog, logOff, startOff), 4)
			}
			said := fd.said
			fd.mu.Unlock()
			if first {
				d.logf("full disk: PostgreSQL stopped; the server log since the fill:\n    %s", strings.Join(said, "\n    "))
			}
			t0 := time.Now()
			d.logf("full disk: starting PostgreSQL again")
			cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
			out, err := exec.CommandContext(cctx, d.o.pgsh, "restart", "fast").CombinedOutput()
			cancel()
			fd.mu.Lock()
			fd.restarted, fd.restartIn = true, time.Since(t0)
			fd.mu.Unlock()
			if err != nil {
				quote, _ := serverSaid(readLog(fd.serverLog, startOff, -1), 8)
				sf := startFailure{at: t0, err: pgCtlWord(err, string(out)), quote: quote}
				fd.mu.Lock()
				same := len(fd.failed) > 0 && fd.failed[len(fd.failed)-1].reason() == sf.reason()
				fd.failed = append(fd.failed, sf)
				n := len(fd.failed)
				fd.mu.Unlock()
				if same {
					d.logf("full disk: the start failed again, the same way (%d failed starts)", n)
				} else {
					d.logf("full disk: the start failed (%s); the server log since the attempt:\n    %s", sf.err, strings.Join(quote, "\n    "))
				}
				// What keeps it from starting (a port someone else holds) rarely goes
				// away at once.
				sleepCtx(ctx, 2*time.Second)
			}
			continue
		}
		sleepCtx(ctx, 250*time.Millisecond)
	}
	back := !up.IsZero()
	if !back {
		up = time.Now()
		fd.mu.Lock()
		why := "it was never started again (pg.sh status said it runs)"
		if n := len(fd.failed); n > 0 {
			sf := fd.failed[n-1]
			why = fmt.Sprintf("%d start(s) failed, the last (%s) with the server log saying:\n    %s", n, sf.err, strings.Join(sf.quote, "\n    "))
		}
		fd.mu.Unlock()
		d.logf("full disk: PostgreSQL is not back after 90s: %s", why)
	}
	cpu1 := d.workerCPU()
	fd.mu.Lock()
	fd.freedAt, fd.back = freed, back
	if !fd.restarted { // it came back by itself, or never stopped
		fd.said, fd.panicked = serverSaid(readLog(fd.serverLog, logOff, -1), 4)
	}
	fd.window = [2]time.Time{at, up}
	fd.cpu = map[int]float64{}
	for slot, c := range cpu1 {
		if c0, ok := cpu0[slot]; ok && c.pid == c0.pid {
			fd.cpu[slot] = (c.secs - c0.secs) / up.Sub(at).Seconds()
		}
	}
	detail := fmt.Sprintf("%d MiB of filler; held %v; PostgreSQL %s; %s %v after the filler was removed",
		fd.filler>>20, fd.hold, fd.downLocked(at), map[bool]string{true: "back", false: "NOT back"}[back], up.Sub(freed).Round(time.Millisecond))
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
		s += fmt.Sprintf(", stopped and was started again (the last start took %v", fd.restartIn.Round(time.Millisecond))
		if len(fd.failed) > 0 {
			s += fmt.Sprintf("; %d start(s) failed", len(fd.failed))
		}
		s += ")"
	}
	return s
}

// logSize is the server log's size, 0 when it cannot be read.
func logSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// readLog returns the server log from byte off to byte end (to its end when end < 0), at
// most the last 4 MiB of that stretch. A log shorter than off was started afresh: it is
// read from its beginning.
func readLog(path string, off, end int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	if end < 0 || end > st.Size() {
		end = st.Size()
	}
	if off > end {
		off = 0
	}
	off = max(off, end-4<<20)
	b := make([]byte, end-off)
	n, _ := f.ReadAt(b, off)
	return string(b[:n])
}

// pgEntry is one message of a PostgreSQL server log written with the default
// log_line_prefix ('%m [%p] ': time with zone, process id): its time of day, process,
// severity and text, with the DETAIL, HINT, STATEMENT and CONTEXT lines (and the further
// lines of a message over several lines) that came with it.
type pgEntry struct {
	when, pid, sev, msg string
	more                []string
}

var pgLogLine = regexp.MustCompile(`^(?:\d{4}-\d\d-\d\d )?(\d\d:\d\d:\d\d(?:\.\d+)?)(?: \S+)? \[(\d+)\] ([A-Z]+):  (.*)$`)

// parsePGLog splits a stretch of server log into its messages. A line cut at the
// stretch's start, before any message, is dropped.
func parsePGLog(text string) []pgEntry {
	var out []pgEntry
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimRight(line, "\r")
		m := pgLogLine.FindStringSubmatch(line)
		if m == nil {
			if len(out) > 0 && strings.TrimSpace(line) != "" {
				last := &out[len(out)-1]
				last.more = append(last.more, strings.TrimSpace(line))
			}
			continue
		}
		switch m[3] {
		case "DETAIL", "HINT", "STATEMENT", "CONTEXT", "QUERY", "LOCATION":
			if len(out) > 0 && out[len(out)-1].pid == m[2] {
				last := &out[len(out)-1]
				last.more = append(last.more, m[3]+":  "+m[4])
				continue
			}
		}
		out = append(out, pgEntry{when: m[1], pid: m[2], sev: m[3], msg: m[4]})
	}
	return out
}

// pgLogNoise marks the messages that say nothing about why the server stopped or would
// not start: the clients it turned away or lost while it was down or recovering (hundreds
// in a full-disk run) and the checkpoints' reports.
var pgLogNoise = []string{
	"the database system is in recovery mode",
	"the database system is not yet accepting connections",
	"the database system is starting up",
	"the database system is shutting down",
	"Consistent recovery state has not been yet reached",
	"in cancel request did not match any process",
	"terminating connection because of crash of another server process",
	"terminating connection due to administrator command",
	"connection to client lost",
	"could not receive data from client",
	"could not send data to client",
	"unexpected EOF on client connection",
	"checkpoint starting:",
	"checkpoint complete:",
	"checkpoints are occurring too frequently",
}

func (e pgEntry) noise() bool {
	for _, s := range pgLogNoise {
		if strings.Contains(e.msg, s) {
			return true
		}
	}
	return false
}

// String is the message as the report quotes it: time, process, severity and text, then
// its further lines after " | ".
func (e pgEntry) String() string {
	s := fmt.Sprintf("%s [%s] %s:  %s", e.when, e.pid, e.sev, e.msg)
	for _, m := range e.more {
		s += " | " + m
	}
	return trunc(s, 300)
}

// serverSaid picks what the report quotes of a stretch of server log: its last n messages
// about the server (noise left out) and, before them, the first three PANIC or FATAL
// messages they leave out, so that the reason is there even when the server went on
// writing after it. panicked says whether the stretch has a PANIC.
func serverSaid(text string, n int) (quote []string, panicked bool) {
	var rel []pgEntry
	for _, e := range parsePGLog(text) {
		if !e.noise() {
			rel = append(rel, e)
			panicked = panicked || e.sev == "PANIC"
		}
	}
	cut := max(0, len(rel)-n)
	skipped := 0
	for _, e := range rel[:cut] {
		if (e.sev == "PANIC" || e.sev == "FATAL") && len(quote) < 3 {
			quote = append(quote, e.String())
		} else {
			skipped++
		}
	}
	if skipped > 0 {
		quote = append(quote, fmt.Sprintf("… (%d more)", skipped))
	}
	for _, e := range rel[cut:] {
		quote = append(quote, e.String())
	}
	if len(quote) == 0 {
		quote = []string{"(nothing but client and checkpoint messages)"}
	}
	return quote, panicked
}

// pgCtlWord is a failed `pg.sh restart` in a line: its exit, what pg.sh said itself (the
// port taken by another program, an old postmaster still there) and pg_ctl's last
// message (the start's; the stop before it may have complained too).
func pgCtlWord(err error, out string) string {
	var words []string
	pgctl := ""
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "pg.sh: "):
			words = append(words, line)
		case strings.HasPrefix(line, "pg_ctl: "):
			pgctl = line
		}
	}
	if pgctl != "" {
		words = append(words, pgctl)
	}
	if len(words) == 0 {
		return err.Error()
	}
	return fmt.Sprintf("%v: %s", err, strings.Join(words, "; "))
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
	if fd.topUp > 0 {
		fmt.Fprintf(&b, "  filler topped up by %d KiB during the hold, as PostgreSQL freed WAL segments\n", fd.topUp>>10)
	}
	if fd.back {
		fmt.Fprintf(&b, "  from full to back: %v; back %v after the filler was removed\n", to.Sub(from).Round(time.Millisecond), to.Sub(fd.freedAt).Round(time.Millisecond))
	} else {
		fmt.Fprintf(&b, "  PostgreSQL NOT back %v after the filler was removed\n", to.Sub(fd.freedAt).Round(time.Millisecond))
	}
	what := "from the fill to the first start"
	if !fd.restarted {
		what = "from the fill to the return"
	}
	if !fd.panicked {
		what += ", no PANIC"
	}
	fmt.Fprintf(&b, "  the server log %s:\n", what)
	for _, l := range fd.said {
		fmt.Fprintf(&b, "    %s\n", l)
	}
	var notBack []string
	// Each run of starts that failed the same way: the first in full, then how many more.
	for i := 0; i < len(fd.failed); {
		sf := fd.failed[i]
		j := i + 1
		for j < len(fd.failed) && fd.failed[j].reason() == sf.reason() {
			j++
		}
		fmt.Fprintf(&b, "  start at %s failed (%s); the server log since the attempt:\n", sf.at.Format("15:04:05.000"), sf.err)
		for _, l := range sf.quote {
			fmt.Fprintf(&b, "    %s\n", l)
		}
		if j > i+1 {
			fmt.Fprintf(&b, "  %d more starts failed the same way, the last at %s\n", j-i-1, fd.failed[j-1].at.Format("15:04:05.000"))
		}
		i = j
	}
	if !fd.back {
		v := fmt.Sprintf("%s: PostgreSQL did not accept connections within 90s of the filler's removal", invBack)
		if n := len(fd.failed); n > 0 {
			sf := fd.failed[n-1]
			v += fmt.Sprintf("; %d start(s) failed, the last (%s) with the server log saying: %s", n, sf.err, strings.Join(sf.quote, " / "))
		}
		notBack = append(notBack, v)
	}
	r.require(invBack, notBack)
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

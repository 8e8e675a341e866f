package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/venturi-dev/venturi"
)

// statsStates are the states stats prints, in lifecycle order.
var statsStates = []venturi.State{
	venturi.StateAvailable, venturi.StateRunning, venturi.StateScheduled, venturi.StateWaiting,
	venturi.StateCompleted, venturi.StateDead, venturi.StateCancelled,
}

// noSample is what stats and top say before any worker has sampled.
const noSample = "no stats sample yet: a running worker writes one every Config.StatsInterval"

func statsCmd(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	c := connFlags(fs, true)
	kinds := fs.Bool("kinds", true, "print each queue's kinds under it")
	var sampled string
	return readCommand(a, c, noArgs, func(ctx context.Context, q *venturi.Queue, _ []string) (venturi.Stats, error) {
		s, err := q.Stats(ctx)
		if err == nil {
			sampled, err = a.sampledText(ctx, s.SampledAt)
		}
		return s, err
	}, func(w io.Writer, s venturi.Stats) error {
		if s.SampledAt.IsZero() {
			fmt.Fprintln(w, noSample)
			return deferredText(w, s.DeferredMerges)
		}
		fmt.Fprintln(w, sampled)
		head := []string{"QUEUE", "KIND", "STATE"}
		for _, st := range statsStates {
			head = append(head, strings.ToUpper(string(st)))
		}
		t := newTable(w, append(head, "LAG", "DONE/S", "FAILED/S", "DEAD/S")...)
		for _, qs := range s.Queues {
			cells := []string{qs.Queue, "(all)", pausedText(qs.Paused)}
			cells = append(cells, countCells(qs.Counts)...)
			t.row(append(cells, durText(qs.Lag), rateText(qs.CompletedPerSec), rateText(qs.FailedPerSec), rateText(qs.DeadPerSec))...)
			if !*kinds {
				continue
			}
			for _, ks := range qs.Kinds {
				cells := append([]string{qs.Queue, ks.Kind, ""}, countCells(ks.Counts)...)
				t.row(append(cells, "", rateText(ks.CompletedPerSec), rateText(ks.FailedPerSec), rateText(ks.DeadPerSec))...)
			}
		}
		if err := t.flush(); err != nil {
			return err
		}
		return deferredText(w, s.DeferredMerges)
	})
}

// deferredText writes the enqueues from SQL that wait for a Go merge, by kind (read live,
// not from the sample): a line saying there are none, or a table.
func deferredText(w io.Writer, ds []venturi.DeferredMergeStats) error {
	if len(ds) == 0 {
		fmt.Fprintln(w, "deferred merges waiting (enqueues from SQL for a worker to merge): none")
		return nil
	}
	fmt.Fprintln(w, "\ndeferred merges waiting (enqueues from SQL for a worker that registered the kind to merge):")
	t := newTable(w, "KIND", "WAITING", "KEYS", "OLDEST AGE")
	for _, d := range ds {
		t.row(d.Kind, fmt.Sprint(d.Waiting), fmt.Sprint(d.Keys), spanText(d.OldestAge))
	}
	return t.flush()
}

// countCells writes counts by state in statsStates' order.
func countCells(counts map[venturi.State]int64) []string {
	out := make([]string, len(statsStates))
	for i, st := range statsStates {
		out[i] = fmt.Sprint(counts[st])
	}
	return out
}

// sampledText says when a stats sample was taken and how long ago, by the database's
// clock (a stale sample means no worker is sampling).
func (a *app) sampledText(ctx context.Context, at time.Time) (string, error) {
	if at.IsZero() {
		return "", nil
	}
	var now time.Time
	if err := a.pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return "", err
	}
	return fmt.Sprintf("sampled at %s (%s ago)", timeText(at), spanText(now.Sub(at))), nil
}

// ---- top ---------------------------------------------------------------------------------

func topCmd(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	c := connFlags(fs, false)
	interval := fs.Duration("interval", 2*time.Second, "how often to redraw (at least 100ms)")
	window := fs.Duration("window", 5*time.Minute, "how much history the trend columns show (at most 24h)")
	once := fs.Bool("once", false, "print one frame and exit")
	return func(ctx context.Context, args []string) error {
		if err := noArgs(args); err != nil {
			return err
		}
		if *interval < 100*time.Millisecond {
			return usagef("--interval %v: want at least 100ms", *interval)
		}
		if *window <= 0 || *window > 24*time.Hour {
			return usagef("--window %v: want more than 0, at most 24h", *window)
		}
		q, err := a.connect(ctx, c.schema)
		if err != nil {
			return err
		}
		v := &topView{q: q, sampled: a.sampledText, schema: a.schemaName(), window: *window, interval: *interval}
		if *once {
			frame, err := v.frame(ctx)
			if err != nil {
				return err
			}
			_, err = io.WriteString(a.stdout, frame)
			return err
		}
		return a.topLoop(ctx, v)
	}
}

// topLoop redraws v every interval until q (or Ctrl-C, which cancels ctx).
func (a *app) topLoop(ctx context.Context, v *topView) error {
	if a.stdinTTY {
		if restore := cbreak(); restore != nil {
			defer restore()
		}
	}
	quit := make(chan struct{})
	// The reader ends with the process: a read of stdin cannot be interrupted.
	go readQuit(a.stdin, quit)
	if a.stdoutTTY {
		fmt.Fprint(a.stdout, "\x1b[?1049h\x1b[?25l") // alternate screen, cursor hidden
		defer fmt.Fprint(a.stdout, "\x1b[?25h\x1b[?1049l")
	}
	tick := time.NewTicker(v.interval)
	defer tick.Stop()
	for {
		frame, err := v.frame(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil // Ctrl-C
			}
			frame = "error: " + a.redact(err.Error()) + "\n" // shown until the next frame
		}
		if a.stdoutTTY {
			frame = "\x1b[H" + strings.ReplaceAll(frame, "\n", "\x1b[K\n") + "\x1b[J"
		} else {
			frame += "\n"
		}
		if _, err := io.WriteString(a.stdout, frame); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-quit:
			return nil
		case <-tick.C:
		}
	}
}

// readQuit closes quit when r yields q, Q or Ctrl-C (in cbreak mode the terminal sends
// keys one by one; otherwise a line "q").
func readQuit(r io.Reader, quit chan<- struct{}) {
	br := bufio.NewReader(r)
	for {
		b, err := br.ReadByte()
		if err != nil {
			return // EOF (stdin closed or /dev/null): only Ctrl-C quits
		}
		if b == 'q' || b == 'Q' || b == 3 {
			close(quit)
			return
		}
	}
}

// cbreak puts the terminal on stdin in cbreak mode (keys arrive unbuffered and are not
// echoed; Ctrl-C still interrupts) with stty, and returns the function that restores it;
// nil when stty is not there (then q needs Enter).
func cbreak() func() {
	saved, err := stty("-g")
	if err != nil {
		return nil
	}
	if _, err := stty("-icanon", "-echo", "min", "1"); err != nil {
		return nil
	}
	return func() { _, _ = stty(strings.TrimSpace(saved)) }
}

func stty(args ...string) (string, error) {
	cmd := exec.Command("stty", args...)
	cmd.Stdin = os.Stdin
	out, err := cmd.Output()
	return string(out), err
}

// topView is top's state between frames: the history of samples it has read.
type topView struct {
	q                *venturi.Queue
	sampled          func(context.Context, time.Time) (string, error) // app.sampledText
	schema           string
	window, interval time.Duration
	history          map[string][]venturi.StatsSample // by queue, oldest first
	last             time.Time                        // the newest sample in history
}

// frame reads the latest stats and the samples since the last frame, and draws.
func (v *topView) frame(ctx context.Context) (string, error) {
	s, err := v.q.Stats(ctx)
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "venturi top  schema %s  every %v  (q quits)\n", v.schema, v.interval)
	if s.SampledAt.IsZero() {
		fmt.Fprintln(&b, noSample)
		return b.String(), nil
	}
	if err := v.readHistory(ctx, s.SampledAt); err != nil {
		return "", err
	}
	var depth, running, done, failed, dead float64
	for _, qs := range s.Queues {
		depth += float64(qs.Counts[venturi.StateAvailable])
		running += float64(qs.Counts[venturi.StateRunning])
		done, failed, dead = done+qs.CompletedPerSec, failed+qs.FailedPerSec, dead+qs.DeadPerSec
	}
	sampled, err := v.sampled(ctx, s.SampledAt)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&b, "%s  queues %d  available %.0f  running %.0f  done/s %s  failed/s %s  dead/s %s\n\n",
		sampled, len(s.Queues), depth, running, rateText(done), rateText(failed), rateText(dead))
	t := newTable(&b, "QUEUE", "STATE", "AVAILABLE", "RUNNING", "SCHEDULED", "WAITING", "LAG", "DONE/S", "FAILED/S", "DEAD/S",
		"DEPTH "+durText(v.window), "DONE/S "+durText(v.window))
	for _, qs := range s.Queues {
		hist := v.history[qs.Queue]
		avail, rate := make([]float64, len(hist)), make([]float64, len(hist))
		for i, h := range hist {
			avail[i], rate[i] = float64(h.Available), h.CompletedPerSec
		}
		t.row(qs.Queue, pausedText(qs.Paused), fmt.Sprint(qs.Counts[venturi.StateAvailable]), fmt.Sprint(qs.Counts[venturi.StateRunning]),
			fmt.Sprint(qs.Counts[venturi.StateScheduled]), fmt.Sprint(qs.Counts[venturi.StateWaiting]), durText(qs.Lag),
			rateText(qs.CompletedPerSec), rateText(qs.FailedPerSec), rateText(qs.DeadPerSec), sparkline(avail, 30), sparkline(rate, 30))
	}
	if err := t.flush(); err != nil {
		return "", err
	}
	return b.String(), nil
}

// readHistory adds the samples newer than the last one read (the first time: the window
// before the latest sample, by the database's clock) and forgets those older than the
// window.
func (v *topView) readHistory(ctx context.Context, latest time.Time) error {
	since := latest.Add(-v.window)
	if v.last.After(since) {
		since = v.last
	}
	samples, err := v.q.StatsHistory(ctx, since)
	if err != nil {
		return err
	}
	if v.history == nil {
		v.history = map[string][]venturi.StatsSample{}
	}
	for _, s := range samples {
		if !s.At.After(v.last) {
			continue // read by the previous frame
		}
		v.history[s.Queue] = append(v.history[s.Queue], s)
	}
	for _, s := range samples {
		if s.At.After(v.last) {
			v.last = s.At
		}
	}
	cut := latest.Add(-v.window)
	for name, hs := range v.history {
		i := 0
		for i < len(hs) && hs[i].At.Before(cut) {
			i++
		}
		if i == len(hs) {
			delete(v.history, name)
			continue
		}
		v.history[name] = hs[i:]
	}
	return nil
}

// sparkline draws the last n values as a bar of block characters, scaled to their
// maximum.
func sparkline(vals []float64, n int) string {
	if len(vals) > n {
		vals = vals[len(vals)-n:]
	}
	if len(vals) == 0 {
		return ""
	}
	const bars = "▁▂▃▄▅▆▇█"
	blocks := []rune(bars)
	top := 0.0
	for _, x := range vals {
		top = max(top, x)
	}
	out := make([]rune, len(vals))
	for i, x := range vals {
		k := 0
		if top > 0 {
			k = int(x / top * float64(len(blocks)-1))
		}
		out[i] = blocks[k]
	}
	return string(out)
}

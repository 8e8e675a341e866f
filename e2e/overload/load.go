package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"
)

// group is who sent a request: the calibration's creates, the steady producers, the
// greedy key's producers, or the burst.
type group int

const (
	gCalibration group = iota
	gSteady
	gGreedy
	gBurst
	nGroups
)

var groupNames = [nGroups]string{"calibration", "steady", "greedy key", "burst"}

// tally counts one group's requests.
type tally struct {
	attempts     int
	status       map[int]int // answered attempts by status
	noRetryAfter map[int]int // 429s and 503s without a usable Retry-After, by status
	timeouts     int         // no answer within the client timeout
	errs         map[string]int
	retries      int // attempts that followed a 429 or 503 after its Retry-After
	gaveUp       int // creates refused maxAttempts times in a row
	lastAck      time.Time
	ackLat       []time.Duration
	refusedLat   []time.Duration // 429 and 503 answers
	e2eLat       []time.Duration // first attempt to acknowledgement, Retry-After waits included
}

func newTally() *tally {
	return &tally{status: map[int]int{}, noRetryAfter: map[int]int{}, errs: map[string]int{}}
}

// window is one 10 s window of the overload: the steady and greedy producers' acknowledged
// attempts (by start time) and their refusals.
type window struct {
	lat     []time.Duration
	refused int
}

// ovRun is one run: its phases (run) and its measurements (report).
type ovRun struct {
	s      *system
	steady []string // API keys of the steady producers (the first keysFor(target) are used)
	greedy string
	burst  []string

	seq                    atomic.Int64
	inflight, inflightPeak atomic.Int64 // client-side requests in flight

	mu      sync.Mutex
	tallies [nGroups]*tally
	acked   []string  // IDs of the acknowledged bookmarks
	windows []*window // by 10 s since start

	calAcked     int
	drainRate    float64 // calibration: fetches per second between 10% and 90% done
	calSpan      time.Duration
	target       float64
	keysUsed     int
	start        time.Time // of the overload
	enqSpan      time.Duration
	offered      [nGroups]int64 // pacer permits handed out
	dropped      [nGroups]int64 // permits no producer was free to take
	burstFired   bool
	burstSpan    time.Duration // from the burst to its last acknowledgement
	burstAcked   int
	burstBacklog int           // the backlog when the burst's creates were all answered
	burstDrain   time.Duration // from the burst to the backlog's end
	burstDrained bool
	burstRSS     [2][]int64 // api, worker: VmRSS (KiB) once a second from just before the burst

	backlog     []int // once a second from the overload's start to the drain's end
	backlogPeak int
	backlogEnd  int // when the producers were done
	drainTime   time.Duration
	drained     bool
	afterRate   float64
	rss         [2][]int64 // api, worker: VmRSS (KiB) once a second from the overload's start
	rssHalf     int        // samples in the first half of the overload
	inflightMax []int64    // client-side requests in flight, the most per second

	final   map[string]int // fetch_status of the acknowledged bookmarks at the end
	missing int            // acknowledged bookmarks not in the table
}

func newRun(s *system, steady []string, greedy string, burst []string) *ovRun {
	r := &ovRun{s: s, steady: steady, greedy: greedy, burst: burst}
	for g := range r.tallies {
		r.tallies[g] = newTally()
	}
	return r
}

// answer is the outcome of one POST /bookmarks.
type answer struct {
	status     int
	retryAfter time.Duration
	hasRA      bool
	id         string
	timeout    bool
	err        error
}

// post sends one create.
func (s *system) post(ctx context.Context, key, body string) answer {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.apiURL+"/bookmarks", strings.NewReader(body))
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := s.client.Do(req)
	if err != nil {
		return answer{err: err, timeout: isTimeout(err)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return answer{err: err, timeout: isTimeout(err)}
	}
	a := answer{status: resp.StatusCode}
	if v := resp.Header.Get("Retry-After"); v != "" {
		a.retryAfter, a.hasRA = parseRetryAfter(v, time.Now())
	}
	if resp.StatusCode/100 == 2 {
		var bm struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(b, &bm); err != nil || bm.ID == "" {
			return answer{status: resp.StatusCode, err: fmt.Errorf("%d without a bookmark ID: %.100s", resp.StatusCode, b)}
		}
		a.id = bm.ID
	}
	return a
}

// isTimeout reports whether err is the client's timeout (the whole request, body included).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// parseRetryAfter reads a Retry-After header (RFC 9110: delay-seconds or an HTTP date).
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if n, err := strconv.Atoi(v); err == nil {
		if n < 0 {
			return 0, false
		}
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, t.Sub(now)), true
	}
	return 0, false
}

// create creates one bookmark on key, retrying after each 429 or 503 once its Retry-After
// has passed (a second when there is none, which is counted), and records every attempt.
// It returns whether the create was acknowledged.
func (r *ovRun) create(ctx context.Context, g group, key string) bool {
	o := r.s.o
	seq := int(r.seq.Add(1))
	body := fmt.Sprintf(`{"url":%q,"title":"overload %d"}`, r.s.pages.url(seq%o.hosts, seq), seq)
	first := time.Now()
	for attempt := 1; ; attempt++ {
		n := r.inflight.Add(1)
		for m := r.inflightPeak.Load(); n > m && !r.inflightPeak.CompareAndSwap(m, n); m = r.inflightPeak.Load() {
		}
		t0 := time.Now()
		a := r.s.post(ctx, key, body)
		lat := time.Since(t0)
		r.inflight.Add(-1)
		if ctx.Err() != nil {
			return false // interrupted: not a measurement
		}
		refused := a.err == nil && (a.status == http.StatusTooManyRequests || a.status == http.StatusServiceUnavailable)
		r.mu.Lock()
		t := r.tallies[g]
		t.attempts++
		if attempt > 1 {
			t.retries++
		}
		var w *window
		if (g == gSteady || g == gGreedy) && !r.start.IsZero() {
			i := int(t0.Sub(r.start) / (10 * time.Second))
			for len(r.windows) <= i {
				r.windows = append(r.windows, &window{})
			}
			w = r.windows[i]
		}
		switch {
		case a.timeout:
			t.timeouts++
		case a.err != nil:
			if a.status != 0 {
				t.status[a.status]++
			}
			t.errs[trunc(a.err.Error(), 100)]++
		default:
			t.status[a.status]++
		}
		acked := a.err == nil && a.status/100 == 2
		switch {
		case acked:
			t.ackLat = append(t.ackLat, lat)
			t.e2eLat = append(t.e2eLat, time.Since(first))
			t.lastAck = time.Now()
			r.acked = append(r.acked, a.id)
			if w != nil {
				w.lat = append(w.lat, lat)
			}
		case refused:
			t.refusedLat = append(t.refusedLat, lat)
			if !a.hasRA {
				t.noRetryAfter[a.status]++
			}
			if w != nil {
				w.refused++
			}
			if attempt == maxAttempts {
				t.gaveUp++
			}
		}
		r.mu.Unlock()
		if !refused || attempt == maxAttempts {
			return acked
		}
		d := a.retryAfter
		if !a.hasRA {
			d = time.Second
		}
		if wait(ctx, d) != nil {
			return false
		}
	}
}

// pace hands out permits at rate per second into permits until ctx ends, then closes it.
// A permit that no producer is free to take is dropped (and counted): the achieved rate
// shows it.
func pace(ctx context.Context, rate float64, permits chan<- struct{}, offered, dropped *int64) {
	defer close(permits)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	owed := 0.0
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			owed += rate * now.Sub(last).Seconds()
			last = now
			for ; owed >= 1; owed-- {
				atomic.AddInt64(offered, 1)
				select {
				case permits <- struct{}{}:
				default:
					atomic.AddInt64(dropped, 1)
				}
			}
		}
	}
}

// pending is the backlog: fetch jobs not yet ended (read-only).
func (r *ovRun) pending(ctx context.Context) (int, error) {
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var n int
	err := r.s.db.Pool.QueryRow(qctx, `SELECT count(*) FROM venturi_job
		WHERE kind = 'fetch_bookmark' AND state IN ('scheduled', 'available', 'running', 'waiting')`).Scan(&n)
	return n, err
}

// run runs the four phases. An error is a setup failure (or an interruption), not a
// violated invariant.
func (r *ovRun) run(ctx context.Context) error {
	s, o := r.s, r.s.o

	// 1. Calibration: the backlog exists before the worker starts; its drain rate is
	// measured between 10% and 90% of it done (start-up and tail excluded).
	s.logf("creating %d calibration bookmarks over %d hosts (%d keys)", o.calibration, o.hosts, len(r.steady))
	jobs := make(chan int)
	var wg sync.WaitGroup
	var calAcked atomic.Int64
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if r.create(ctx, gCalibration, r.steady[i%len(r.steady)]) {
					calAcked.Add(1)
				}
			}
		}()
	}
	for i := range o.calibration {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	r.calAcked = int(calAcked.Load())
	if r.calAcked < o.calibration*9/10 {
		return fmt.Errorf("only %d of %d calibration creates were acknowledged", r.calAcked, o.calibration)
	}
	if err := s.worker.Start(); err != nil {
		return err
	}
	s.logf("worker started (%d handlers, pages answer after %v)", o.concurrency, o.pageDelay)
	var t10, t90 time.Time
	calDeadline := time.Now().Add(10 * time.Minute)
	for t90.IsZero() {
		if time.Now().After(calDeadline) {
			return fmt.Errorf("calibration: the backlog of %d did not reach 90%% done in 10 minutes", r.calAcked)
		}
		if n, err := r.pending(ctx); err == nil {
			done := r.calAcked - n
			if t10.IsZero() && done >= r.calAcked/10 {
				t10 = time.Now()
			}
			if done >= r.calAcked*9/10 {
				t90 = time.Now()
			}
		}
		if err := wait(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	r.calSpan = t90.Sub(t10)
	r.drainRate = float64(r.calAcked*9/10-r.calAcked/10) / r.calSpan.Seconds()
	r.target = o.factor * r.drainRate
	r.keysUsed = min(keysFor(r.target), len(r.steady))
	s.logf("drain rate %.1f fetches/s; producers create at %.1f/s over %d keys (+ a greedy key at %.0f/s) for %v",
		r.drainRate, r.target, r.keysUsed, greedyKeyLoad*writeRate, o.dur)

	// 2. Overload: pacers hand out permits; producers take them.
	r.mu.Lock()
	r.start = time.Now()
	r.mu.Unlock()
	octx, stop := context.WithTimeout(ctx, o.dur)
	defer stop()
	var pwg sync.WaitGroup
	producers := func(g group, rate float64, workers int, key func(i int64) string) {
		permits := make(chan struct{}, 256)
		go pace(octx, rate, permits, &r.offered[g], &r.dropped[g])
		var n atomic.Int64
		for range workers {
			pwg.Add(1)
			go func() {
				defer pwg.Done()
				for range permits {
					if octx.Err() != nil {
						continue // left in the buffer when the overload ended
					}
					r.create(ctx, g, key(n.Add(1)))
				}
			}()
		}
	}
	steady := r.steady[:r.keysUsed]
	// Enough producers for a second of latency at the target rate: the load stays open
	// (it does not slow down with the API) until the answers take longer than that.
	producers(gSteady, r.target, max(64, int(r.target)), func(i int64) string { return steady[i%int64(len(steady))] })
	greedyRate := greedyKeyLoad * writeRate
	// Twice as many producers as its rate: while they wait out Retry-After, its permits
	// are dropped (and counted) rather than queued without end.
	producers(gGreedy, greedyRate, int(2*greedyRate), func(int64) string { return r.greedy })

	// Sampler: VmRSS of both processes, the backlog and the client's requests in flight,
	// once a second, through the overload and the drain.
	sample := func() {
		for i, p := range []int{s.api.PID(), s.worker.PID()} {
			if kb, err := vmRSS(p); err == nil {
				r.rss[i] = append(r.rss[i], kb)
			}
		}
		if n, err := r.pending(ctx); err == nil {
			r.backlog = append(r.backlog, n)
			r.backlogPeak = max(r.backlogPeak, n)
		}
		r.inflightMax = append(r.inflightMax, r.inflightPeak.Swap(r.inflight.Load()))
		if time.Since(r.start) < o.dur/2 {
			r.rssHalf++
		}
	}
	producersDone := make(chan struct{})
	go func() { pwg.Wait(); close(producersDone) }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastLog := time.Now()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-producersDone:
			done = true
		case <-tick.C:
			sample()
			if time.Since(lastLog) >= 30*time.Second {
				lastLog = time.Now()
				bl := -1
				if len(r.backlog) > 0 {
					bl = r.backlog[len(r.backlog)-1]
				}
				s.logf("overload: %d acknowledged, backlog %d", r.ackedCount(), bl)
			}
		}
	}
	r.enqSpan = time.Since(r.start)
	sample()

	// 3. Drain: the backlog left, timed to its last job.
	drainFrom := time.Now()
	n0, err := r.pending(ctx)
	if err != nil {
		return err
	}
	r.backlogEnd = n0
	r.backlogPeak = max(r.backlogPeak, n0)
	deadline := drainFrom.Add(time.Minute + time.Duration(3*float64(n0)/r.drainRate*float64(time.Second)))
	s.logf("producers done after %v (%d acknowledged); backlog %d; draining (deadline %v)",
		r.enqSpan.Round(time.Second), r.ackedCount(), n0, time.Until(deadline).Round(time.Second))
	lastSample := time.Now()
	for {
		n, err := r.pending(ctx)
		if err == nil && n == 0 {
			r.drained = true
			break
		}
		if time.Now().After(deadline) {
			break
		}
		if time.Since(lastSample) >= time.Second {
			sample()
			lastSample = time.Now()
		}
		if err := wait(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
	r.drainTime = time.Since(drainFrom)
	if r.drainTime > 0 {
		r.afterRate = float64(n0) / r.drainTime.Seconds()
	}
	sample()
	s.logf("drain: %v", r.drainTime.Round(time.Millisecond))

	// 4. Burst: after the drain, so that the memory its connections take does not count
	// as the overload's.
	if o.burst > 0 && r.drained {
		if err := r.fireBurst(ctx); err != nil {
			return err
		}
	}
	s.logf("checking every acknowledged bookmark")
	return r.checkFetched(ctx)
}

// fireBurst sends o.burst creates at once, each on a burst key with write burst to
// spare, waits for all of them (their retries included), and then for the backlog they
// made to drain. It samples both processes' VmRSS once a second meanwhile.
func (r *ovRun) fireBurst(ctx context.Context) error {
	o := r.s.o
	r.s.logf("burst: %d creates at once (the API serves %d at a time)", o.burst, shedLimit)
	r.burstFired = true
	sampled := make(chan struct{})
	stop := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			for i, p := range []int{r.s.api.PID(), r.s.worker.PID()} {
				if kb, err := vmRSS(p); err == nil {
					r.burstRSS[i] = append(r.burstRSS[i], kb)
				}
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	defer func() { close(stop); <-sampled }()
	t0 := time.Now()
	gate := make(chan struct{})
	var wg sync.WaitGroup
	var acked atomic.Int64
	for i := range o.burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			if r.create(ctx, gBurst, r.burst[i/writeBurst]) {
				acked.Add(1)
			}
		}()
	}
	close(gate)
	wg.Wait()
	r.burstSpan = time.Since(t0)
	r.burstAcked = int(acked.Load())
	if err := ctx.Err(); err != nil {
		return err
	}
	n0, err := r.pending(ctx)
	if err != nil {
		return err
	}
	r.burstBacklog = n0
	deadline := time.Now().Add(time.Minute + time.Duration(3*float64(n0)/r.drainRate*float64(time.Second)))
	for {
		n, err := r.pending(ctx)
		if err == nil && n == 0 {
			r.burstDrained = true
			break
		}
		if time.Now().After(deadline) {
			break
		}
		if err := wait(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
	r.burstDrain = time.Since(t0)
	return nil
}

func (r *ovRun) ackedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.acked)
}

// checkFetched reads the fetch status of every acknowledged bookmark (read-only).
func (r *ovRun) checkFetched(ctx context.Context) error {
	r.mu.Lock()
	ids := make([]pgtype.UUID, 0, len(r.acked))
	for _, s := range r.acked {
		id, err := ulid.Parse(s)
		if err != nil {
			r.mu.Unlock()
			return fmt.Errorf("the API answered bookmark ID %q: %w", s, err)
		}
		ids = append(ids, pgtype.UUID{Bytes: id, Valid: true})
	}
	r.mu.Unlock()
	r.final = map[string]int{}
	found := 0
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), 10000)]
		ids = ids[len(chunk):]
		rows, err := r.s.db.Pool.Query(ctx, `SELECT fetch_status, count(*) FROM bookmark WHERE id = ANY($1) GROUP BY 1`, chunk)
		if err != nil {
			return err
		}
		for rows.Next() {
			var st string
			var n int
			if err := rows.Scan(&st, &n); err != nil {
				rows.Close()
				return err
			}
			r.final[st] += n
			found += n
		}
		if err := rows.Err(); err != nil {
			return err
		}
	}
	r.missing = len(r.acked) - found
	return nil
}

// vmRSS reads a process's resident set size in KiB.
func vmRSS(pid int) (int64, error) {
	if pid == 0 {
		return 0, errors.New("not running")
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			return strconv.ParseInt(f[1], 10, 64)
		}
	}
	return 0, errors.New("no VmRSS")
}

func trunc(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

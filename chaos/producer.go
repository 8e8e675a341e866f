package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// The live producer (failover, full disk, long transaction): ordinary `ok` jobs enqueued
// one Enqueue call at a time at a steady rate while the fault happens, as a service's
// request handlers would. It remembers, in the driver's memory, every acknowledged
// enqueue (the job's ID) and every failed one (its seq and error: a failed enqueue may
// still have committed, when the connection broke after the server committed but before
// the client heard it). After the run, the jobs that exist are expected like the scripted
// workload's; an acknowledged job that does not exist was lost by the database.

// producerSeqBase keeps the producer's seqs apart from the scripted workload's.
const producerSeqBase = 1_000_000_000

type producedJob struct {
	id  ulid.ULID
	seq int64
	at  time.Time // when the enqueue was sent (the driver's clock, for the windows)
	lat time.Duration
}

type failedEnqueue struct {
	seq       int64
	at        time.Time
	err       string
	transient bool // venturi.IsTransient: a producer would answer "try again"
}

type producer struct {
	d      *driver
	rate   float64 // enqueues per second
	workMs int
	conc   int // enqueues in flight at most

	mu     sync.Mutex
	seq    int64
	acked  []producedJob
	failed []failedEnqueue
	start  time.Time
	stop   time.Time
}

func newProducer(d *driver, rate float64, workMs int) *producer {
	return &producer{d: d, rate: rate, workMs: workMs, conc: 8, seq: producerSeqBase}
}

// run enqueues at the producer's rate until ctx ends. Each enqueue has 5s; a permit that
// finds every producer busy is dropped (the rate achieved says so).
func (p *producer) run(ctx context.Context) {
	q := venturi.NewQueue(p.d.pool, venturi.QueueConfig{})
	permits := make(chan struct{}, p.conc)
	var wg sync.WaitGroup
	for range p.conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range permits {
				p.enqueueOne(ctx, q)
			}
		}()
	}
	p.mu.Lock()
	p.start = time.Now()
	p.mu.Unlock()
	tick := time.NewTicker(time.Duration(float64(time.Second) / p.rate))
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-tick.C:
			select {
			case permits <- struct{}{}:
			default:
			}
		}
	}
	tick.Stop()
	close(permits)
	wg.Wait()
	p.mu.Lock()
	p.stop = time.Now()
	p.mu.Unlock()
}

func (p *producer) enqueueOne(ctx context.Context, q *venturi.Queue) {
	p.mu.Lock()
	p.seq++
	seq := p.seq
	p.mu.Unlock()
	t0 := time.Now()
	// Not ctx: an enqueue in flight when the producer stops still gets its answer.
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	res, err := q.Enqueue(ectx, Job{Seq: seq, Scenario: scOK, WorkMs: p.workMs})
	cancel()
	lat := time.Since(t0)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.failed = append(p.failed, failedEnqueue{seq: seq, at: t0, err: err.Error(), transient: venturi.IsTransient(err)})
		return
	}
	p.acked = append(p.acked, producedJob{id: res.ID, seq: seq, at: t0, lat: lat})
}

// producedResult is what became of the producer's enqueues.
type producedResult struct {
	acked     int
	failed    int
	committed int // failed enqueues whose job exists anyway (the answer was lost, not the commit)
	lost      []producedJob
	nonTrans  int // failed enqueues whose error venturi does not call transient
	errs      map[string]int
	expects   []expect // the jobs that exist: expected like the scripted workload's
	latencies []time.Duration
	span      time.Duration
}

const (
	invAckedEnq  = "every acknowledged enqueue is in the database (live producer)"
	invEnqErrors = "every failed enqueue is a transient error (a producer answers try again)"
)

// classifyProduced sorts the producer's enqueues by what the database holds after the
// run: present holds the acknowledged IDs that exist, committed the failed seqs whose job
// exists. An acknowledged job that does not exist is lost: a violation, or with lossy
// set (an asynchronous failover) the measured figure.
func classifyProduced(acked []producedJob, failed []failedEnqueue, present map[ulid.ULID]bool, committed map[int64]ulid.ULID, lossy bool) (res producedResult, violations []string) {
	res.acked, res.failed, res.errs = len(acked), len(failed), map[string]int{}
	for _, a := range acked {
		res.latencies = append(res.latencies, a.lat)
		if !present[a.id] {
			res.lost = append(res.lost, a)
			if !lossy {
				violations = append(violations, fmt.Sprintf("%s: job %s (seq %d), acknowledged at %s, is not in the database",
					invAckedEnq, a.id, a.seq, a.at.Format("15:04:05.000")))
			}
			continue
		}
		res.expects = append(res.expects, expect{id: a.id, seq: a.seq, scenario: scOK, state: "completed"})
	}
	for _, f := range failed {
		res.errs[errClass(f.err)]++
		if !f.transient {
			res.nonTrans++
			violations = append(violations, fmt.Sprintf("%s: seq %d at %s: %s", invEnqErrors, f.seq, f.at.Format("15:04:05.000"), trunc(f.err, 160)))
		}
		if id, ok := committed[f.seq]; ok {
			res.committed++
			res.expects = append(res.expects, expect{id: id, seq: f.seq, scenario: scOK, state: "completed"})
		}
	}
	slices.Sort(res.latencies)
	return res, violations
}

// errClass shortens an error message to its kind, for counting: the text after the last
// ": " (the cause: "connection refused", a server error with its SQLSTATE).
func errClass(msg string) string {
	if i := strings.LastIndex(msg, ": "); i >= 0 && i+2 < len(msg) {
		msg = msg[i+2:]
	}
	return trunc(msg, 90)
}

// resolve looks the producer's jobs up after the run, writes the expected state of the
// ones that exist, and classifies the rest.
func (p *producer) resolve(ctx context.Context, lossy bool) (producedResult, []string, error) {
	p.mu.Lock()
	acked, failed := slices.Clone(p.acked), slices.Clone(p.failed)
	span := p.stop.Sub(p.start)
	p.mu.Unlock()
	ids := make([]pgtype.UUID, 0, len(acked))
	for _, a := range acked {
		ids = append(ids, uuidOf(a.id))
	}
	present := map[ulid.ULID]bool{}
	rows, err := p.d.pool.Query(ctx, `SELECT id FROM venturi_job_all WHERE id = ANY($1)`, ids)
	if err != nil {
		return producedResult{}, nil, err
	}
	for rows.Next() {
		var u pgtype.UUID
		if err := rows.Scan(&u); err != nil {
			return producedResult{}, nil, err
		}
		present[ulid.ULID(u.Bytes)] = true
	}
	if err := rows.Err(); err != nil {
		return producedResult{}, nil, err
	}
	seqs := make([]string, 0, len(failed))
	for _, f := range failed {
		seqs = append(seqs, strconv.FormatInt(f.seq, 10))
	}
	committed := map[int64]ulid.ULID{}
	rows, err = p.d.pool.Query(ctx, `SELECT id, payload->>'seq' FROM venturi_job_all WHERE kind = $1 AND payload->>'seq' = ANY($2::text[])`, Job{}.Kind(), seqs)
	if err != nil {
		return producedResult{}, nil, err
	}
	for rows.Next() {
		var u pgtype.UUID
		var s string
		if err := rows.Scan(&u, &s); err != nil {
			return producedResult{}, nil, err
		}
		n, _ := strconv.ParseInt(s, 10, 64)
		committed[n] = ulid.ULID(u.Bytes)
	}
	if err := rows.Err(); err != nil {
		return producedResult{}, nil, err
	}
	res, violations := classifyProduced(acked, failed, present, committed, lossy)
	res.span = span
	out := make([][]any, 0, len(res.expects))
	for _, e := range res.expects {
		out = append(out, []any{uuidOf(e.id), e.seq, e.scenario, e.state})
	}
	if _, err := p.d.pool.CopyFrom(ctx, pgx.Identifier{"chaos_expect"}, []string{"job_id", "seq", "scenario", "want_state"}, pgx.CopyFromRows(out)); err != nil {
		return producedResult{}, nil, err
	}
	return res, violations, nil
}

// String is the producer's line of the summary.
func (r producedResult) String() string {
	var b strings.Builder
	rate := 0.0
	if r.span > 0 {
		rate = float64(r.acked+r.failed) / r.span.Seconds()
	}
	fmt.Fprintf(&b, "live producer: %d enqueues (%.0f/s); acknowledged %d, lost by the database %d; failed %d (transient %d), of which committed anyway %d\n",
		r.acked+r.failed, rate, r.acked, len(r.lost), r.failed, r.failed-r.nonTrans, r.committed)
	if l := r.latencies; len(l) > 0 {
		fmt.Fprintf(&b, "  enqueue latency (acknowledged)  p50 %v  p99 %v  max %v\n", pct(l, 50).Round(100*time.Microsecond),
			pct(l, 99).Round(100*time.Microsecond), l[len(l)-1].Round(100*time.Microsecond))
	}
	var classes []string
	for c := range r.errs {
		classes = append(classes, c)
	}
	slices.SortFunc(classes, func(a, b string) int { return r.errs[b] - r.errs[a] })
	for _, c := range classes {
		fmt.Fprintf(&b, "  enqueue error %5d x %s\n", r.errs[c], c)
	}
	for i, l := range r.lost {
		if i == 5 {
			fmt.Fprintf(&b, "  … %d more lost\n", len(r.lost)-5)
			break
		}
		fmt.Fprintf(&b, "  lost: job %s (seq %d), acknowledged at %s after %v\n", l.id, l.seq, l.at.Format("15:04:05.000"), l.lat.Round(time.Millisecond))
	}
	return b.String()
}

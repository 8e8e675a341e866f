package main

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// hist is a log-linear histogram of non-negative microsecond values: exact below 64µs,
// then 64 buckets per power of two, so a percentile read from it is within 1/64 (1.6%)
// of the true value. Merging two windows is adding their counts, which per-window
// percentiles could not do.
type hist struct {
	counts [histBuckets]int64
	n      int64
}

const (
	histSub     = 64 // buckets per power of two
	histMaxBits = 40 // values are clamped to 2^40-1 µs (12 days)
	histBuckets = histSub * (1 + histMaxBits - 6)
)

func histIndex(v int64) int {
	if v < histSub {
		return int(max(v, 0))
	}
	v = min(v, 1<<histMaxBits-1)
	s := bits.Len64(uint64(v)) - 7 // v>>s is in [64, 128)
	return histSub*(1+s) + int(v>>s) - histSub
}

// histValue is the middle of bucket i's range, in µs.
func histValue(i int) float64 {
	if i < histSub {
		return float64(i)
	}
	s := (i - histSub) / histSub
	lo := int64((i-histSub)%histSub+histSub) << s
	return float64(lo) + float64(int64(1)<<s-1)/2
}

func (h *hist) add(us int64) {
	h.counts[histIndex(us)]++
	h.n++
}

func (h *hist) merge(o *hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// quantile returns the q-quantile in milliseconds, NaN for an empty histogram.
func (h *hist) quantile(q float64) float64 {
	if h.n == 0 {
		return math.NaN()
	}
	rank := max(int64(math.Ceil(q*float64(h.n))), 1)
	var seen int64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return histValue(i) / 1000
		}
	}
	return histValue(histBuckets-1) / 1000
}

// encode writes the non-empty buckets as "index:count,…" ("-" when empty).
func (h *hist) encode() string {
	var b strings.Builder
	for i, c := range h.counts {
		if c == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d:%d", i, c)
	}
	if b.Len() == 0 {
		return "-"
	}
	return b.String()
}

func decodeHist(s string) (*hist, error) {
	h := &hist{}
	if s == "-" {
		return h, nil
	}
	for _, part := range strings.Split(s, ",") {
		is, cs, ok := strings.Cut(part, ":")
		i, err1 := strconv.Atoi(is)
		c, err2 := strconv.ParseInt(cs, 10, 64)
		if !ok || err1 != nil || err2 != nil || i < 0 || i >= histBuckets || c < 0 {
			return nil, fmt.Errorf("bad histogram bucket %q", part)
		}
		h.counts[i] += c
		h.n += c
	}
	return h, nil
}

// sustainRec is the recorder of scenario 8 in a worker process. Handlers report their
// start on the database clock: this process's wall clock plus the offset measured at
// start-up against clock_timestamp() (the probe with the shortest round trip, so the
// offset is known within half of it; on one machine both read the same clock and the
// offset is about zero). Latencies go into the current window's histograms, which a
// "sample" line on stdin takes and resets.
type sustainRec struct {
	offsetUs, rttUs int64

	mu  sync.Mutex
	enq hist  // enqueue → handler start, immediate jobs
	due hist  // due time → handler start, delayed jobs
	neg int64 // negative latencies (clock error), counted as zero
}

func newSustainRec(ctx context.Context, pool *pgxpool.Pool) (*sustainRec, error) {
	off, rtt, err := dbClockOffset(ctx, pool)
	if err != nil {
		return nil, err
	}
	return &sustainRec{offsetUs: off, rttUs: rtt}, nil
}

// dbClockOffset measures the database clock (clock_timestamp()) against this process's
// wall clock: 16 probes, the one with the shortest round trip kept; it returns the offset
// to add to a local Unix time, known within half the round trip, both in µs.
func dbClockOffset(ctx context.Context, pool *pgxpool.Pool) (offsetUs, rttUs int64, err error) {
	rttUs = math.MaxInt64
	for range 16 {
		t0 := time.Now()
		var db time.Time
		if err := pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&db); err != nil {
			return 0, 0, err
		}
		rtt := time.Since(t0)
		if rtt.Microseconds() < rttUs {
			rttUs = rtt.Microseconds()
			offsetUs = db.UnixMicro() - t0.Add(rtt/2).UnixMicro()
		}
	}
	return offsetUs, rttUs, nil
}

// start records a handler start for a job enqueued at enqUs and, if delayed, due at
// dueUs.
func (r *sustainRec) start(enqUs, dueUs int64) {
	if r == nil {
		return
	}
	now := time.Now().UnixMicro() + r.offsetUs
	from, h := enqUs, &r.enq
	if dueUs != 0 {
		from, h = dueUs, &r.due
	}
	r.mu.Lock()
	if now < from {
		r.neg++
	}
	h.add(now - from)
	r.mu.Unlock()
}

// take returns the window's sample line and starts a new window.
func (r *sustainRec) take() string {
	r.mu.Lock()
	enq, due, neg := r.enq, r.due, r.neg
	r.enq, r.due, r.neg = hist{}, hist{}, 0
	r.mu.Unlock()
	return fmt.Sprintf("sample off=%d rtt=%d neg=%d enq=%s due=%s", r.offsetUs, r.rttUs, neg, enq.encode(), due.encode())
}

// workerSample is a parsed sample line.
type workerSample struct {
	offsetUs, rttUs, neg int64
	enq, due             *hist
}

func parseWorkerSample(line string) (*workerSample, error) {
	f := strings.Fields(line)
	if len(f) != 6 || f[0] != "sample" {
		return nil, fmt.Errorf("unexpected worker reply %q", line)
	}
	ws := &workerSample{}
	for _, kv := range f[1:] {
		k, v, _ := strings.Cut(kv, "=")
		var err error
		switch k {
		case "off":
			ws.offsetUs, err = strconv.ParseInt(v, 10, 64)
		case "rtt":
			ws.rttUs, err = strconv.ParseInt(v, 10, 64)
		case "neg":
			ws.neg, err = strconv.ParseInt(v, 10, 64)
		case "enq":
			ws.enq, err = decodeHist(v)
		case "due":
			ws.due, err = decodeHist(v)
		default:
			err = fmt.Errorf("unknown field %q", k)
		}
		if err != nil {
			return nil, err
		}
	}
	if ws.enq == nil || ws.due == nil {
		return nil, fmt.Errorf("incomplete worker reply %q", line)
	}
	return ws, nil
}

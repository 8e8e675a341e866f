package dashboard

import (
	"context"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/venturi-dev/venturi"
)

// The pages. Each one says in its comment what it reads: none counts jobs.

// states are the states the stats table counts, in the order of a job's life: the
// overview's cards and the job list's tabs.
var states = []venturi.State{venturi.StateAvailable, venturi.StateScheduled, venturi.StateRunning, venturi.StateWaiting,
	venturi.StateDead, venturi.StateCompleted, venturi.StateCancelled}

// tabStates are the job list's tabs: the counted states, and blocked (a workflow's jobs
// that wait for what they need), which the stats table does not count.
var tabStates = append(slices.Clone(states), venturi.StateBlocked)

// url returns the dashboard path with the query pairs (key, value, ...) whose value is set.
func (h *handler) url(path string, kv ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			v.Set(kv[i], kv[i+1])
		}
	}
	u := h.cfg.Prefix + path
	if len(v) > 0 {
		u += "?" + v.Encode()
	}
	return u
}

// ---- overview ------------------------------------------------------------------------

type overviewData struct {
	Stats venturi.Stats
	// DeferredTotal is the enqueues from SQL that wait for a Go merge, all kinds.
	DeferredTotal int64
	Totals        map[venturi.State]int64
	Queues        []queueRow
	Recent        []venturi.JobSummary
	Window        string
	States        []venturi.State
	DeadURL       string
}

type queueRow struct {
	venturi.QueueStats
	Depth, Rate sparkline
}

// overview reads the latest stats sample, the last hour of samples for the charts, and the
// ten newest dead jobs (from the dead jobs' index).
func (h *handler) overview(rq *request) (*view, error) {
	st, err := h.q.Stats(rq.ctx)
	if err != nil {
		return nil, err
	}
	d := &overviewData{Stats: st, DeferredTotal: deferredTotal(st), Totals: totals(st, venturi.JobFilter{}), States: states,
		Window: "last hour", DeadURL: h.url("/dead")}
	var hist []venturi.StatsSample
	if !st.SampledAt.IsZero() {
		if hist, err = h.q.StatsHistory(rq.ctx, st.SampledAt.Add(-time.Hour)); err != nil {
			return nil, err
		}
	}
	byQueue := map[string][]venturi.StatsSample{}
	for _, s := range hist {
		byQueue[s.Queue] = append(byQueue[s.Queue], s)
	}
	for _, qs := range st.Queues {
		samples := byQueue[qs.Queue]
		depth := make([]float64, len(samples))
		rate := make([]float64, len(samples))
		for i, s := range samples {
			depth[i] = float64(s.Available)
			rate[i] = s.CompletedPerSec
		}
		d.Queues = append(d.Queues, queueRow{QueueStats: qs, Depth: newSparkline(depth, fmtFloatCount), Rate: newSparkline(rate, fmtRate)})
	}
	page, err := h.q.ListJobs(rq.ctx, venturi.JobFilter{States: []venturi.State{venturi.StateDead}}, "", 10)
	if err != nil {
		return nil, err
	}
	d.Recent = page.Jobs
	return &view{tmpl: "overview", title: "Overview", nav: "overview", live: true, sampled: st.SampledAt, data: d}, nil
}

// totals sums a stats sample's counts by state over the queues (and kinds) f names.
func totals(st venturi.Stats, f venturi.JobFilter) map[venturi.State]int64 {
	out := map[venturi.State]int64{}
	for _, qs := range st.Queues {
		if len(f.Queues) > 0 && !slices.Contains(f.Queues, qs.Queue) {
			continue
		}
		if len(f.Kinds) == 0 {
			for s, n := range qs.Counts {
				out[s] += n
			}
			continue
		}
		for _, ks := range qs.Kinds {
			if slices.Contains(f.Kinds, ks.Kind) {
				for s, n := range ks.Counts {
					out[s] += n
				}
			}
		}
	}
	return out
}

// ---- queues ------------------------------------------------------------------------------

type queuesData struct {
	Stats  venturi.Stats
	States []venturi.State
	Max    int
}

// queues reads the latest stats sample: each queue's settings, counts, lag and rates.
func (h *handler) queues(rq *request) (*view, error) {
	st, err := h.q.Stats(rq.ctx)
	if err != nil {
		return nil, err
	}
	return &view{tmpl: "queues", title: "Queues", nav: "queues", live: true, sampled: st.SampledAt,
		data: &queuesData{Stats: st, States: states, Max: MaxQueueConcurrency}}, nil
}

// queueAction pauses or resumes a queue, or sets its concurrency limit.
func (h *handler) queueAction(rq *request) (string, error) {
	name := rq.r.PostFormValue("queue")
	if name == "" || len(name) > 128 || !storableText(name) {
		return "", badRequest("Name a queue of 1 to 128 bytes of text.")
	}
	var err error
	done := ""
	switch rq.r.PathValue("action") {
	case "pause":
		if err = rq.need(PauseQueues); err == nil {
			err, done = h.q.PauseQueue(rq.ctx, name), "paused"
		}
	case "resume":
		if err = rq.need(PauseQueues); err == nil {
			err, done = h.q.ResumeQueue(rq.ctx, name), "resumed"
		}
	case "concurrency":
		if err = rq.need(SetLimits); err != nil {
			break
		}
		n, perr := strconv.Atoi(rq.r.PostFormValue("concurrency"))
		if perr != nil || n < 0 || n > MaxQueueConcurrency {
			return "", badRequest("The concurrency limit must be a number from 0 (no limit) to " + strconv.Itoa(MaxQueueConcurrency) + ".")
		}
		err, done = h.q.SetQueueConcurrency(rq.ctx, name, n), "limited"
	default:
		return "", errNotFound
	}
	if err != nil {
		return "", err
	}
	return "/queues?done=" + done, nil
}

// ---- cron ----------------------------------------------------------------------------------

// cron reads the schedules table (one row per schedule).
func (h *handler) cron(rq *request) (*view, error) {
	return listView(rq, h.q.Schedules, "cron", "Cron schedules")
}

// listView is a page of one list read whole (a small table).
func listView[T any](rq *request, read func(context.Context) ([]T, error), tmpl, title string) (*view, error) {
	l, err := read(rq.ctx)
	if err != nil {
		return nil, err
	}
	return &view{tmpl: tmpl, title: title, nav: tmpl, data: l}, nil
}

// cronAction pauses or resumes a schedule.
func (h *handler) cronAction(rq *request) (string, error) {
	if err := rq.need(PauseCron); err != nil {
		return "", err
	}
	name := rq.r.PostFormValue("schedule")
	if name == "" || len(name) > venturi.MaxScheduleNameBytes || !storableText(name) {
		return "", badRequest("Name a schedule.")
	}
	var err error
	done := ""
	switch rq.r.PathValue("action") {
	case "pause":
		err, done = h.q.PauseSchedule(rq.ctx, name), "cron-paused"
	case "resume":
		err, done = h.q.ResumeSchedule(rq.ctx, name), "cron-resumed"
	default:
		return "", errNotFound
	}
	if err != nil {
		return "", err
	}
	return "/cron?done=" + done, nil
}

// ---- breakers --------------------------------------------------------------------------------

type breakersData struct {
	Circuits []venturi.Circuit
	NextURL  string
	FirstURL string
}

// breakers reads one page of the circuit breakers (one row per breaker that has seen a
// claim), by kind and partition, from the breakers' primary key.
func (h *handler) breakers(rq *request) (*view, error) {
	q := rq.r.URL.Query()
	cursor := q.Get("cursor")
	if len(cursor) > 1024 {
		return nil, badRequest("The page cursor is too long.")
	}
	limit, lim := DefaultPageSize, ""
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxPageSize {
			return nil, badRequest("The page size must be a number from 1 to " + strconv.Itoa(MaxPageSize) + ".")
		}
		limit, lim = n, s
	}
	page, err := h.q.ListCircuits(rq.ctx, cursor, limit)
	if err != nil {
		return nil, err
	}
	d := &breakersData{Circuits: page.Circuits}
	if page.Next != "" {
		d.NextURL = h.url("/breakers", "limit", lim, "cursor", page.Next)
	}
	if cursor != "" {
		d.FirstURL = h.url("/breakers", "limit", lim)
	}
	return &view{tmpl: "breakers", title: "Circuit breakers", nav: "breakers", data: d}, nil
}

// resetBreaker closes one breaker.
func (h *handler) resetBreaker(rq *request) (string, error) {
	if err := rq.need(ResetCircuits); err != nil {
		return "", err
	}
	kind, part := rq.r.PostFormValue("kind"), rq.r.PostFormValue("partition")
	if kind == "" || len(kind) > 128 || len(part) > venturi.MaxPartitionBytes || !storableText(kind) || !storableText(part) {
		return "", badRequest("Name a breaker by its kind and partition.")
	}
	if err := h.q.ResetCircuit(rq.ctx, kind, part); err != nil {
		return "", err
	}
	return "/breakers?done=reset", nil
}

// storableText reports whether s is text PostgreSQL stores: valid UTF-8 without NUL.
func storableText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// ---- audit log ---------------------------------------------------------------------------------

type auditData struct {
	Entries  []venturi.AuditEntry
	OlderURL string
}

// audit reads one page of the audit log, newest first, by its primary key.
func (h *handler) audit(rq *request) (*view, error) {
	var before int64
	if s := rq.r.URL.Query().Get("before"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return nil, badRequest("Bad page of the audit log.")
		}
		before = n
	}
	const per = 50
	l, err := h.q.AuditLog(rq.ctx, before, per)
	if err != nil {
		return nil, err
	}
	d := &auditData{Entries: l}
	if len(l) == per {
		d.OlderURL = h.url("/audit", "before", strconv.FormatInt(l[len(l)-1].ID, 10))
	}
	return &view{tmpl: "audit", title: "Audit log", nav: "audit", data: d}, nil
}

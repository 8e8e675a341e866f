package dashboard

import (
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// The job pages: the lists (all jobs, the dead letter view) with their tabs and filter, one
// job, and the actions on it.

type jobsData struct {
	Query     string
	State     string
	Filter    string // the whole filter (box and tab) in the grammar, for the bulk actions
	Tabs      []tab
	Jobs      []venturi.JobSummary
	NextURL   string
	FirstURL  string
	Partial   bool // the page ended at its search window (venturi.ListSearchWindow)
	Window    int  // the window's size
	Limit     int
	Dead      bool
	Counted   bool // there is a stats sample
	TabCounts bool // the tabs show its counts
	SampledAt time.Time
	Bulk      []bulkLink
	Invalid   string
	// DeadCount is the dead view's count from the stats sample (HasDeadCount: shown).
	DeadCount    int64
	HasDeadCount bool
}

type tab struct {
	Label, URL string
	Active     bool
	Count      int64
	HasCount   bool
	Live       string // the stats endpoint's key for the count; empty when filtered
}

type bulkLink struct{ Label, URL, Class string }

func (h *handler) jobs(rq *request) (*view, error) { return h.jobList(rq, false) }

// dead is the job list of dead jobs, with bulk retry over the filter.
func (h *handler) dead(rq *request) (*view, error) { return h.jobList(rq, true) }

// jobList reads one page of ListJobs (from the index of the state tab, or newest first)
// and the latest stats sample for the tabs' counts.
func (h *handler) jobList(rq *request, dead bool) (*view, error) {
	q := rq.r.URL.Query()
	text, state, cursor := q.Get("q"), q.Get("state"), q.Get("cursor")
	if dead {
		state = string(venturi.StateDead)
	}
	limit := DefaultPageSize
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxPageSize {
			return nil, badRequest("The page size must be a number from 1 to " + strconv.Itoa(MaxPageSize) + ".")
		}
		limit = n
	}
	nav, tmplPath := "jobs", "/jobs"
	if dead {
		nav, tmplPath = "dead", "/dead"
	}
	d := &jobsData{Query: text, State: state, Limit: limit, Dead: dead}
	v := &view{tmpl: "jobs", title: "Jobs", nav: nav, live: true, data: d}
	if dead {
		v.title = "Dead jobs"
	}
	if state != "" && !slices.Contains(tabStates, venturi.State(state)) {
		return nil, badRequest("Unknown state tab.")
	}
	if len(cursor) > 1024 {
		return nil, badRequest("The page cursor is too long.")
	}
	f, err := parseFilter(text)
	if err != nil {
		// The filter is the user's text: say what is wrong with it, list nothing.
		d.Invalid, v.status = filterMessage(err), http.StatusBadRequest
		h.fillTabs(rq, d, venturi.JobFilter{}, tmplPath)
		return v, nil
	}
	if state != "" {
		f.States = []venturi.State{venturi.State(state)}
	}
	if searches(f) {
		if err := h.sameOrigin(rq); err != nil {
			return nil, err
		}
	}
	d.Filter = f.String()
	page, err := h.q.ListJobs(rq.ctx, f, cursor, limit)
	if err != nil {
		return nil, err
	}
	d.Jobs, d.Partial, d.Window = page.Jobs, page.Partial, venturi.ListSearchWindow
	lim := ""
	if limit != DefaultPageSize {
		lim = strconv.Itoa(limit)
	}
	if page.Next != "" {
		d.NextURL = h.url(tmplPath, "q", text, "state", tabParam(dead, state), "limit", lim, "cursor", page.Next)
	}
	if cursor != "" {
		d.FirstURL = h.url(tmplPath, "q", text, "state", tabParam(dead, state), "limit", lim)
	}
	if err := h.fillTabs(rq, d, f, tmplPath); err != nil {
		return nil, err
	}
	v.sampled = d.SampledAt
	for _, b := range []struct {
		a            Action
		name, label  string
		class        string
		dead, always bool
	}{
		{Retry, "retry", "Retry all matching…", "primary", true, false},
		{Cancel, "cancel", "Cancel all matching…", "", false, false},
		{Delete, "delete", "Delete all matching…", "danger", true, false},
	} {
		if rq.access.Can(b.a) && (!dead || b.dead) {
			d.Bulk = append(d.Bulk, bulkLink{Label: b.label, Class: b.class, URL: h.url("/bulk/"+b.name, "q", d.Filter)})
		}
	}
	return v, nil
}

func tabParam(dead bool, state string) string {
	if dead {
		return ""
	}
	return state
}

// fillTabs sets the state tabs and their counts from the latest stats sample.
func (h *handler) fillTabs(rq *request, d *jobsData, f venturi.JobFilter, path string) error {
	st, err := h.q.Stats(rq.ctx)
	if err != nil {
		return err
	}
	d.SampledAt, d.Counted = st.SampledAt, !st.SampledAt.IsZero()
	// The counts are the stats table's, by queue and kind: they are shown when the filter
	// names nothing else.
	unfiltered := len(f.Queues) == 0 && len(f.Kinds) == 0
	byStats := len(f.IDs) == 0 && f.DedupKey == "" && f.Workflow == (ulid.ULID{}) && f.CreatedAfter.IsZero() && f.CreatedBefore.IsZero() &&
		f.CreatedWithin == 0 && f.Note == "" && len(f.Payload) == 0 && len(f.Attachment) == 0
	t := totals(st, f)
	d.TabCounts = d.Counted && byStats && !d.Dead
	if d.Dead {
		d.DeadCount, d.HasDeadCount = t[venturi.StateDead], d.Counted && byStats
		return nil
	}
	d.Tabs = append(d.Tabs, tab{Label: "all", URL: h.url(path, "q", d.Query), Active: d.State == ""})
	for _, s := range tabStates {
		counted := slices.Contains(states, s)
		tb := tab{Label: string(s), URL: h.url(path, "q", d.Query, "state", string(s)), Active: d.State == string(s),
			Count: t[s], HasCount: d.Counted && byStats && counted}
		if unfiltered && byStats && counted {
			tb.Live = "t:" + string(s)
		}
		d.Tabs = append(d.Tabs, tb)
	}
	return nil
}

// searches reports whether ListJobs reads a search window for f (venturi.ListSearchWindow
// jobs a page): it has a predicate that no index serves, a note, payload or attachment
// match, or a dedup key without a kind.
func searches(f venturi.JobFilter) bool {
	return f.Note != "" || len(f.Payload) > 0 || len(f.Attachment) > 0 || (f.DedupKey != "" && len(f.Kinds) == 0)
}

// filterMessage says what is wrong with a filter.
func filterMessage(err error) string {
	var ue *userError
	if errors.As(err, &ue) {
		return ue.msg
	}
	return filterReason(err)
}

// parseFilter bounds and parses a filter box's text.
func parseFilter(text string) (venturi.JobFilter, error) {
	if len(text) > MaxFilterBytes {
		return venturi.JobFilter{}, badRequest("The filter is longer than " + strconv.Itoa(MaxFilterBytes) + " bytes.")
	}
	if !utf8.ValidString(text) {
		return venturi.JobFilter{}, badRequest("The filter is not valid text.")
	}
	if text == "" {
		return venturi.JobFilter{}, nil
	}
	return venturi.ParseJobFilter(text)
}

// ---- one job ---------------------------------------------------------------------------

type jobData struct {
	*venturi.JobDetail
	Retry, Cancel, Delete bool // the actions that apply to its state and are granted
	BackURL               string
}

// job reads JobDetail: the job's row, its moved journal (bounded), steps, signals, hooks
// and explanation, each by the job's primary key.
func (h *handler) job(rq *request) (*view, error) {
	id, err := ulid.ParseStrict(rq.r.PathValue("id"))
	if err != nil {
		return nil, errNotFound
	}
	j, err := h.q.JobDetail(rq.ctx, id)
	if err != nil {
		return nil, err
	}
	d := &jobData{JobDetail: j, BackURL: h.url("/jobs")}
	switch j.State {
	case venturi.StateDead, venturi.StateCancelled, venturi.StateCompleted, venturi.StateScheduled:
		d.Retry = rq.access.Can(Retry)
	}
	switch j.State {
	case venturi.StateAvailable, venturi.StateScheduled, venturi.StateWaiting, venturi.StateRunning, venturi.StateBlocked:
		d.Cancel = rq.access.Can(Cancel) && !j.StopRequested
	}
	d.Delete = j.State != venturi.StateRunning && rq.access.Can(Delete)
	return &view{tmpl: "job", title: "Job " + j.ID.String(), nav: "jobs", data: d}, nil
}

// jobAction retries, cancels or deletes one job (a bulk action over its ID).
func (h *handler) jobAction(rq *request) (string, error) {
	id, err := ulid.ParseStrict(rq.r.PathValue("id"))
	if err != nil {
		return "", errNotFound
	}
	act, err := bulkOf(rq.r.PathValue("action"))
	if err != nil {
		return "", err
	}
	if err := rq.need(act.grant); err != nil {
		return "", err
	}
	reason, err := reasonOf(rq.r)
	if err != nil {
		return "", err
	}
	res, err := act.run(h.q, rq, venturi.JobFilter{IDs: []ulid.ULID{id}}, venturi.BulkOptions{Limit: 1, Reason: reason})
	if err != nil {
		return "", err
	}
	n := strconv.Itoa(res.Changed)
	if act.name == "delete" && res.Changed > 0 {
		return "/jobs?done=deleted&n=" + n, nil
	}
	return "/jobs/" + id.String() + "?done=" + act.done + "&n=" + n, nil
}

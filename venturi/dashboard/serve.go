package dashboard

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/venturi-dev/venturi"
)

// request is one request to a page or an action, with what it may do.
type request struct {
	w      http.ResponseWriter
	r      *http.Request
	ctx    context.Context
	access Access
}

// view is what a page handler renders: the template, its title and navigation entry, and
// the page's own data.
type view struct {
	tmpl    string
	title   string
	nav     string
	live    bool      // the page polls the stats endpoint
	sampled time.Time // the stats sample the page shows; zero for none
	status  int       // 0 for 200
	data    any
}

// page is the data every template gets.
type page struct {
	Title   string
	Brand   string
	Nav     string
	Prefix  string
	CSRF    string
	Actor   string
	Grants  string
	Live    bool
	Sampled time.Time
	Refresh int64 // milliseconds
	Flash   string
	Error   string
	Data    any
	access  Access
}

// grantsText says in the header what the actor may do.
func grantsText(a Action) string {
	switch a {
	case NoActions:
		return "read-only"
	case AllActions:
		return "all actions"
	}
	return "may " + strings.ReplaceAll(strings.ReplaceAll(a.String(), "|", ", "), "_", " ")
}

// Can reports whether the request may take the named action (an [Action] name such as
// "retry"); the templates show an action's forms only when it may.
func (p *page) Can(name string) bool {
	a, err := ParseActions(name)
	return err == nil && a != 0 && p.access.Can(a)
}

// userError is a problem with the request that the page may show as it is: its message
// is written for the user and says nothing about the server.
type userError struct {
	status int
	msg    string
	link   string // a dashboard URL the error page offers (the refused request, to run it from here)
}

func (e *userError) Error() string { return e.msg }

func badRequest(msg string) error { return &userError{status: http.StatusBadRequest, msg: msg} }

var errNotFound = &userError{status: http.StatusNotFound, msg: "There is no such page, job or item (it may have been deleted or pruned)."}

// routes registers every page and action under the prefix.
func (h *handler) routes() {
	p := h.cfg.Prefix
	m := http.NewServeMux()
	get := func(path string, f func(*request) (*view, error)) { m.Handle("GET "+p+path, h.page(f)) }
	post := func(path string, f func(*request) (string, error)) { m.Handle("POST "+p+path, h.action(f)) }
	m.Handle("GET "+p+"/assets/{file}", h.assets())
	m.HandleFunc("GET "+p+"/api/stats", h.statsJSON)
	get("/{$}", h.overview)
	get("/jobs", h.jobs)
	get("/dead", h.dead)
	get("/jobs/{id}", h.job)
	get("/bulk/{action}", h.bulkConfirm)
	get("/queues", h.queues)
	get("/cron", h.cron)
	get("/breakers", h.breakers)
	get("/audit", h.audit)
	get("/workflows", h.workflows)
	get("/workflows/{id}", h.workflow)
	get("/", func(*request) (*view, error) { return nil, errNotFound })
	post("/jobs/{id}/{action}", h.jobAction)
	post("/bulk/{action}", h.bulkAction)
	post("/queues/{action}", h.queueAction)
	post("/cron/{action}", h.cronAction)
	post("/breakers/reset", h.resetBreaker)
	post("/workflows/{id}/{action}", h.workflowAction)
	m.HandleFunc(p+"/", func(w http.ResponseWriter, _ *http.Request) {
		// Any other method on any path: only GET (and HEAD) and POST are served.
		methodNotAllowed(w)
	})
	h.mux = m
}

// methodNotAllowed answers a method the dashboard does not serve (405).
func methodNotAllowed(w http.ResponseWriter) {
	w.Header().Set("Allow", "GET, HEAD, POST")
	http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
}

func (h *handler) newRequest(w http.ResponseWriter, r *http.Request) *request {
	return &request{w: w, r: r, ctx: r.Context(), access: h.cfg.Access(r)}
}

// page serves a GET page.
func (h *handler) page(f func(*request) (*view, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rq := h.newRequest(w, r)
		v, err := f(rq)
		if err != nil {
			h.fail(rq, err)
			return
		}
		h.render(rq, v, "")
	})
}

// action serves a POST that changes something: it must come from the dashboard's own
// origin (origin.go) and carry the form's token; f checks the grant of its action (403
// when not granted) and returns where to redirect.
func (h *handler) action(f func(*request) (string, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rq := h.newRequest(w, r)
		if !h.origin.allows(r) {
			h.fail(rq, &userError{status: http.StatusForbidden, msg: "The request came from another site and was refused."})
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxFormBytes)
		if err := r.ParseForm(); err != nil {
			h.fail(rq, badRequest("The form could not be read (is it larger than 16 KiB?)."))
			return
		}
		if !h.csrf.check(r, rq.access) {
			h.fail(rq, &userError{status: http.StatusForbidden, msg: "The form has expired or did not come from this dashboard: reload the page and try again."})
			return
		}
		rq.ctx = venturi.WithActor(r.Context(), rq.access.auditActor())
		to, err := f(rq)
		if err != nil {
			h.fail(rq, err)
			return
		}
		http.Redirect(w, r, h.cfg.Prefix+to, http.StatusSeeOther)
	})
}

// need refuses an action that the request is not granted.
func (rq *request) need(a Action) error {
	if !rq.access.Can(a) {
		return &userError{status: http.StatusForbidden, msg: "You are not allowed to do this here."}
	}
	return nil
}

// sameOrigin refuses a GET that costs (a bulk action's dry run, a listing's search
// window) when a browser sent it from another site (origin.go): another site could
// otherwise make a signed-in browser run it again and again. Same-origin navigation, the
// user's own (a typed URL, a bookmark) and requests that are not a browser's pass. The
// refusal links the same request, which runs when followed from the refusal's page.
func (h *handler) sameOrigin(rq *request) error {
	if h.origin.allows(rq.r) {
		return nil
	}
	link := rq.r.URL.Path
	if q := rq.r.URL.Query().Encode(); q != "" {
		link += "?" + q
	}
	return &userError{status: http.StatusForbidden, link: link,
		msg: "This page runs a costly count or search, and the request came from another site, so it was refused. " +
			"Run it from the dashboard's own pages, or follow the link below."}
}

// fail renders an error page. A userError shows its message; anything else is logged with
// a reference, and the page shows only the reference.
func (h *handler) fail(rq *request, err error) {
	ue := userErrorOf(err)
	if ue == nil {
		ref := newRef()
		h.log.ErrorContext(rq.r.Context(), "venturi dashboard: request failed", slog.String("ref", ref),
			slog.String("method", rq.r.Method), slog.String("path", rq.r.URL.Path), slog.Any("error", err))
		ue = &userError{status: http.StatusInternalServerError, msg: "Something went wrong on the server. The error was logged with reference " + ref + "."}
	}
	h.render(rq, &view{tmpl: "error", title: http.StatusText(ue.status), status: ue.status, data: ue.link}, ue.msg)
}

// userErrorOf is the page's message for an error about the request itself: its own
// userErrors, and venturi's errors that say what is wrong with the input. Nil for any other
// error (the page then shows only a reference).
func userErrorOf(err error) *userError {
	var ue *userError
	switch {
	case errors.As(err, &ue):
		return ue
	case errors.Is(err, venturi.ErrInvalidFilter):
		return &userError{status: http.StatusBadRequest, msg: "The filter is not valid: " + filterReason(err)}
	case errors.Is(err, venturi.ErrInvalidListCursor):
		return &userError{status: http.StatusBadRequest, msg: "The page cursor is not valid: start again from the first page."}
	case errors.Is(err, venturi.ErrListTimeout):
		return &userError{status: http.StatusUnprocessableEntity, msg: "The listing took longer than " + venturi.ListTimeout.String() +
			" and was stopped: narrow the filter with a state, kind, queue, id or time range (they use indexes; a count of a note or payload match reads every job)."}
	case errors.Is(err, venturi.ErrNotFound), errors.Is(err, venturi.ErrNoSchedule), errors.Is(err, venturi.ErrNoCircuit),
		errors.Is(err, venturi.ErrWorkflowNotFound):
		return errNotFound
	case errors.Is(err, venturi.ErrInvalidQueue):
		return &userError{status: http.StatusBadRequest, msg: "That is not a valid queue name."}
	}
	return nil
}

// filterReason is what a filter error says about the filter, without venturi's prefix.
func filterReason(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, venturi.ErrInvalidFilter.Error()+": "); i >= 0 {
		return msg[i+len(venturi.ErrInvalidFilter.Error())+2:]
	}
	return msg
}

func newRef() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// render executes a page's template into a buffer first, so that a failing template
// sends a clean error page, not half a page.
func (h *handler) render(rq *request, v *view, errMsg string) {
	hd := rq.w.Header()
	hd.Set("Cache-Control", "no-store")
	p := &page{Title: v.title, Brand: h.cfg.Title, Nav: v.nav, Prefix: h.cfg.Prefix, Actor: rq.access.Actor,
		Grants: grantsText(rq.access.Grants), Live: v.live, Sampled: v.sampled, Refresh: h.cfg.Refresh.Milliseconds(),
		Flash: flashOf(rq.r.URL.Query()), Error: errMsg, Data: v.data, access: rq.access}
	if p.Actor == "" {
		p.Actor = "unknown"
	}
	if rq.access.Grants != 0 {
		p.CSRF = h.csrf.token(rq.w, rq.r, rq.access)
	}
	t := h.pages[v.tmpl]
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout", p); err != nil {
		ref := newRef()
		h.log.ErrorContext(rq.r.Context(), "venturi dashboard: render", slog.String("ref", ref), slog.String("template", v.tmpl), slog.Any("error", err))
		hd.Set("Content-Type", "text/plain; charset=utf-8")
		rq.w.WriteHeader(http.StatusInternalServerError)
		_, _ = rq.w.Write([]byte("Something went wrong on the server. The error was logged with reference " + ref + ".\n"))
		return
	}
	hd.Set("Content-Type", "text/html; charset=utf-8")
	if v.status != 0 {
		rq.w.WriteHeader(v.status)
	}
	_, _ = buf.WriteTo(rq.w)
}

// flashes are the messages a redirect after an action may ask for (?done=code&n=count):
// fixed texts, so a link cannot make the page say anything else.
var flashes = map[string]string{
	"retried":      "Retried %s.",
	"cancelled":    "Cancelled %s (running jobs are asked to stop).",
	"deleted":      "Deleted %s.",
	"paused":       "Queue paused: no worker starts its jobs until it is resumed.",
	"resumed":      "Queue resumed.",
	"limited":      "Queue concurrency limit set.",
	"cron-paused":  "Schedule paused.",
	"cron-resumed": "Schedule resumed.",
	"reset":        "Circuit breaker closed.",
	"wf-cancelled": "Workflow cancelled: its blocked nodes ended and its released jobs were cancelled (running ones are asked to stop).",
	"wf-retried":   "Workflow retried: %s run again once what they need allows.",
}

func flashOf(q url.Values) string {
	msg, ok := flashes[q.Get("done")]
	if !ok {
		return ""
	}
	n, err := strconv.Atoi(q.Get("n"))
	if err != nil || n < 0 {
		n = 0
	}
	jobs := strconv.Itoa(n) + " jobs"
	if n == 1 {
		jobs = "1 job"
	}
	return strings.Replace(msg, "%s", jobs, 1)
}

// parsePages parses each page's template with the layout.
func parsePages(prefix string) (map[string]*template.Template, error) {
	names := []string{"overview", "jobs", "job", "bulk", "queues", "cron", "breakers", "audit", "workflows", "workflow", "error"}
	out := make(map[string]*template.Template, len(names))
	for _, n := range names {
		t, err := template.New(n).Funcs(funcs(prefix)).ParseFS(files, "templates/layout.html", "templates/"+n+".html")
		if err != nil {
			return nil, err
		}
		out[n] = t
	}
	return out, nil
}

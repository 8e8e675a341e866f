// Package dashboard is venturi's web dashboard: an [http.Handler] that a service mounts
// under a path prefix to watch and operate its queues. It shows the stats table (depth,
// lag and throughput per queue and kind), lists jobs over the filter grammar of
// [venturi.ParseJobFilter], one job's runs, steps, signals, hooks and explanation, the
// workflows and batches (each with its graph of nodes, drawn on the server), the queues,
// cron schedules, circuit breakers and the audit log of operator actions.
//
// Pages are rendered on the server with html/template; a small stylesheet and script are
// embedded and served as files (no build step, no inline script: the Content-Security-Policy
// allows scripts from the dashboard's own origin only). Live updates poll one small JSON
// endpoint that reads the stats table only, never counting jobs.
//
// The dashboard is read-only unless the host grants actions: [Config].Access says, per
// request, which actions its user may take and under what name they are audited. Every
// state-changing request is a POST that must come from the dashboard's own origin (the
// rules of [net/http.CrossOriginProtection], the scheme compared too) and carry a per-form
// token bound to the user; the GETs that cost (a bulk action's dry run, a listing's search
// window) must come from its own origin too (see the package README, "CSRF"). Errors are
// logged, never shown.
package dashboard

import (
	"crypto/rand"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/venturi-dev/venturi"
)

// Action is a set of operator actions the dashboard can take; [Access].Grants holds the
// ones a request may take.
type Action uint

// Actions. Each guards the forms and buttons of one kind of change.
const (
	// Retry makes dead, cancelled, completed and scheduled jobs available now
	// ([venturi.Queue.RetryJobs]), and runs a failed or cancelled workflow again from where
	// it failed ([venturi.Queue.RetryWorkflow]).
	Retry Action = 1 << iota
	// Cancel cancels pending jobs and asks running ones to stop ([venturi.Queue.CancelJobs]),
	// and cancels an open workflow ([venturi.Queue.CancelWorkflow]).
	Cancel
	// Delete deletes jobs that are not running ([venturi.Queue.DeleteJobs]).
	Delete
	// PauseQueues pauses and resumes queues.
	PauseQueues
	// SetLimits sets a queue's concurrency limit.
	SetLimits
	// PauseCron pauses and resumes cron schedules.
	PauseCron
	// ResetCircuits closes circuit breakers ([venturi.Queue.ResetCircuit]).
	ResetCircuits

	// NoActions grants nothing: the dashboard is read-only.
	NoActions Action = 0
	// AllActions grants every action.
	AllActions = Retry | Cancel | Delete | PauseQueues | SetLimits | PauseCron | ResetCircuits
)

var actionNames = []struct {
	a    Action
	name string
}{
	{Retry, "retry"}, {Cancel, "cancel"}, {Delete, "delete"}, {PauseQueues, "pause_queues"},
	{SetLimits, "set_limits"}, {PauseCron, "pause_cron"}, {ResetCircuits, "reset_circuits"},
}

// String names the actions of the set, separated by "|" ("retry|pause_queues"), or "none".
func (a Action) String() string {
	var names []string
	for _, n := range actionNames {
		if a&n.a != 0 {
			names = append(names, n.name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, "|")
}

// ParseActions reads a set of actions written as [Action.String] writes it, with "|" or ","
// between names; "all" is [AllActions] and "none" or "" is [NoActions].
func ParseActions(s string) (Action, error) {
	var a Action
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == '|' || r == ',' }) {
		f = strings.TrimSpace(f)
		switch f {
		case "all":
			a |= AllActions
			continue
		case "none", "":
			continue
		}
		found := false
		for _, n := range actionNames {
			if n.name == f {
				a, found = a|n.a, true
			}
		}
		if !found {
			return 0, fmt.Errorf("dashboard: unknown action %q (want retry, cancel, delete, pause_queues, set_limits, pause_cron, reset_circuits, all or none)", f)
		}
	}
	return a, nil
}

// Access is what one request may do, as [Config].Access returns it.
type Access struct {
	// Actor names who acts: the header shows it, and the audit log records it for every
	// action taken ([venturi.WithActor]); empty records "unknown".
	Actor string
	// Subject identifies who acts, uniquely and stably, where names may repeat or change:
	// a user's or an API key's ID. The forms' tokens bind to it, so a form served to one
	// subject does not work for another of the same name, and the audit log records
	// "Actor (Subject)" (the Subject alone without an Actor). Empty: the Actor is the
	// identity, as it was before Subject existed: the tokens bind to the Actor and the
	// audit log records it alone, so two users of one name share both. Set it whenever
	// names are not unique.
	Subject string
	// Grants are the actions the request may take; the zero value grants none. The pages
	// show no form or button of an action that is not granted, and a POST of one is
	// refused with 403 Forbidden.
	Grants Action
}

// Can reports whether a grants every action of b.
func (a Access) Can(b Action) bool { return b != 0 && a.Grants&b == b }

// auditActor is who the audit log records: "Actor (Subject)", or whichever is set.
func (a Access) auditActor() string {
	switch {
	case a.Subject == "":
		return a.Actor
	case a.Actor == "":
		return a.Subject
	}
	return a.Actor + " (" + a.Subject + ")"
}

// Config configures the dashboard. The zero value serves a read-only dashboard at the root
// of the handler's server.
type Config struct {
	// Prefix is the path the dashboard is mounted at, such as "/ops": it starts with "/"
	// and does not end with one (empty: the root). The handler serves Prefix + "/..." and
	// writes its links under it, so mount it with the prefix left on the request
	// (mux.Handle("/ops/", h)), not behind http.StripPrefix. A request for Prefix alone
	// is redirected to Prefix + "/".
	Prefix string
	// Access says what a request may do; nil grants nothing (read-only, actor "unknown").
	// Authentication is the host's: the dashboard shows every page to any request that
	// reaches it, so mount it behind the host's authentication.
	Access func(*http.Request) Access
	// Logger receives the errors the pages do not show (a page says only that something
	// went wrong, with a reference that the log line carries). Default slog.Default().
	Logger *slog.Logger
	// Refresh is how often the overview and the lists poll the stats endpoint. Default
	// DefaultRefresh; at least MinRefresh.
	Refresh time.Duration
	// CSRFKey is the secret that signs the forms' tokens, at least 32 bytes. Default: 32
	// random bytes drawn by New, which is right for one process; replicas behind a load
	// balancer that does not pin sessions share one key so that a form served by one is
	// accepted by the others.
	CSRFKey []byte
	// TrustedOrigins are origins ("https://admin.example.com") whose cross-origin requests
	// are allowed (as [net/http.CrossOriginProtection.AddTrustedOrigin] allows them): POSTs,
	// which must still carry their form's token, and the GETs that cost.
	TrustedOrigins []string
	// PublicOrigin is the origin browsers reach the dashboard at, scheme://host[:port]
	// ("https://ops.example.com"), for a dashboard behind a proxy that terminates TLS
	// without sending X-Forwarded-Proto: https, or that changes the Host. The origin check
	// compares a request's Origin header (sent by browsers without Sec-Fetch-Site) with
	// it. Default: the request's own, https over TLS or behind a proxy that says so, and
	// its Host. An https origin also marks the nonce cookie Secure.
	PublicOrigin string
	// Title names the dashboard in page titles and the header. Default "venturi".
	Title string
}

// Defaults and bounds of [Config] and of the inputs the dashboard accepts.
const (
	DefaultRefresh = 5 * time.Second
	MinRefresh     = time.Second
	// MaxFilterBytes bounds a filter's text.
	MaxFilterBytes = 2048
	// DefaultPageSize and MaxPageSize bound a job list's page.
	DefaultPageSize = 50
	MaxPageSize     = 200
	// MaxReasonBytes bounds the reason an operator gives for a bulk action.
	MaxReasonBytes = 500
	// MaxFormBytes bounds a POST body.
	MaxFormBytes = 16 << 10
	// MaxQueueConcurrency is the largest concurrency limit the queues page sets.
	MaxQueueConcurrency = 100_000
)

// New returns the dashboard's handler on q. It returns an error for an invalid Config.
func New(q *venturi.Queue, cfg Config) (http.Handler, error) {
	if q == nil {
		return nil, errors.New("dashboard: New with a nil Queue")
	}
	if cfg.Prefix != "" && (!strings.HasPrefix(cfg.Prefix, "/") || strings.HasSuffix(cfg.Prefix, "/") ||
		strings.ContainsAny(cfg.Prefix, "{}?#%\\ \t\r\n")) {
		return nil, fmt.Errorf("dashboard: Config.Prefix %q: want a path such as /ops (a leading /, no trailing /, no {}?#%% or spaces)", cfg.Prefix)
	}
	if cfg.Refresh == 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.Refresh < MinRefresh {
		return nil, fmt.Errorf("dashboard: Config.Refresh %v is shorter than MinRefresh %v", cfg.Refresh, MinRefresh)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Title == "" {
		cfg.Title = "venturi"
	}
	if cfg.Access == nil {
		cfg.Access = func(*http.Request) Access { return Access{} }
	}
	key := cfg.CSRFKey
	switch {
	case key == nil:
		key = make([]byte, 32)
		_, _ = rand.Read(key) // crypto/rand.Read never fails
	case len(key) < 32:
		return nil, fmt.Errorf("dashboard: Config.CSRFKey has %d bytes; want at least 32", len(key))
	default:
		key = append([]byte(nil), key...)
	}
	origin, err := newOriginCheck(cfg.PublicOrigin, cfg.TrustedOrigins)
	if err != nil {
		return nil, err
	}
	pages, err := parsePages(cfg.Prefix)
	if err != nil {
		return nil, err
	}
	h := &handler{q: q, cfg: cfg, log: cfg.Logger, pages: pages, origin: origin,
		csrf: csrf{key: key, path: cfg.Prefix + "/", secure: strings.HasPrefix(origin.public, "https:")}}
	h.routes()
	return h, nil
}

// handler is the dashboard.
type handler struct {
	q      *venturi.Queue
	cfg    Config
	log    *slog.Logger
	csrf   csrf
	origin *originCheck
	pages  map[string]*template.Template
	mux    *http.ServeMux
}

// contentSecurityPolicy allows the dashboard's own script, stylesheet and stats endpoint,
// and nothing else: no inline script or style, no frames, forms posting only to itself.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", contentSecurityPolicy)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
	if r.URL.Path == h.cfg.Prefix && h.cfg.Prefix != "" {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			methodNotAllowed(w)
			return
		}
		http.Redirect(w, r, h.cfg.Prefix+"/", http.StatusMovedPermanently)
		return
	}
	h.mux.ServeHTTP(w, r)
}

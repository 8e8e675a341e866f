// Package httpapi is the bookmarks HTTP API on Echo v4. Echo types stay inside this package.
package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/oklog/ulid/v2"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/venturi-dev/bookmarks/bookmarks-api/internal/apikey"
	"github.com/venturi-dev/bookmarks/bookmarks-api/internal/store"
	"github.com/venturi-dev/bookmarks/shared/tasks"
	"github.com/venturi-dev/venturi"
)

// Body limits. They are part of the API's contract (documented in the README).
const (
	BodyLimit       = "64K" // every endpoint but imports
	ImportBodyLimit = "1M"  // POST /imports
	MaxImportItems  = 5000
	summaryRunes    = 280
	// MaxJournalEntries is how many of a job's latest journal entries GET /bookmarks/{id}
	// and GET /imports/{id} show; journal_total counts them all.
	MaxJournalEntries = 20
)

// Config configures the handlers.
type Config struct {
	// TagIndexDelay debounces tag-index rebuilds: a rebuild runs once the tag edits have
	// been quiet this long (and at most tasks.TagIndexMaxWait after a burst began), so a
	// burst of edits merges into one job. Default 2s.
	TagIndexDelay time.Duration
	// RequestTimeout bounds one request's handler. Default 10s.
	RequestTimeout time.Duration
	// RefetchDelay throttles refetches: the fetch runs this long after the first refetch of
	// a burst, and every refetch until then merges into that pending job (the fetch's merge
	// keeps its due time), so a bookmark is fetched at most once per RefetchDelay. Default 1s.
	RefetchDelay time.Duration
	// WriteLimit limits each API key's requests to the endpoints that change something
	// (POST, DELETE). Default DefaultWriteLimit; Unlimited turns it off.
	WriteLimit RateLimit
	// ImportLimit limits each API key's POST /imports on top of WriteLimit: one import
	// makes up to MaxImportItems fetches. Default DefaultImportLimit; Unlimited turns it off.
	ImportLimit RateLimit
	// ImportConfirmAbove: an import of more items than this waits for a confirmation
	// before it imports anything (see confirm.go). Default DefaultImportConfirmAbove;
	// NoImportConfirmation turns confirmations off.
	ImportConfirmAbove int
	// ImportConfirmTimeout is how long an import waits for its confirmation, and how long
	// its confirmation link works; then the import is cancelled. Default
	// DefaultImportConfirmTimeout.
	ImportConfirmTimeout time.Duration
	// MaxInFlight is the most requests served at once; a request that finds no place
	// within InFlightWait is refused with 503 and Retry-After (the health checks are never
	// refused). Default DefaultMaxInFlight; NoInFlightLimit turns it off.
	MaxInFlight int
	// PublicURL is the API's address as clients reach it (https://bookmarks.example.com),
	// without a trailing slash, for the links the API returns. Empty: links are paths
	// (/imports/...), relative to the address the client called.
	PublicURL string
	// TracerProvider and Propagator trace every request: a server span per request (see
	// traceRequests), the parent of the spans of the jobs it enqueues. Default: no
	// tracing (a no-op provider) and W3C trace context.
	TracerProvider trace.TracerProvider
	Propagator     propagation.TextMapPropagator
	// QueueMiddleware is the enqueue middleware of the API's venturi queue (the
	// OpenTelemetry adapter's, venturiotel). Default: none.
	QueueMiddleware []venturi.EnqueueMiddleware
	// MaxLongPollsPerKey is the most GET /events?wait= requests one API key may have
	// waiting at once; another is refused with 429 and Retry-After. Default
	// DefaultMaxLongPollsPerKey.
	MaxLongPollsPerKey int
	// MaxLongPolls is the most GET /events?wait= requests waiting at once in the process,
	// whatever their keys; another is refused with 503 and Retry-After. Default
	// DefaultMaxLongPolls.
	MaxLongPolls int

	// afterCreateCommit, for tests only, runs when a create's transaction has committed,
	// before the answer is read back.
	afterCreateCommit func(ctx context.Context)
}

// API holds the handlers' dependencies.
type API struct {
	pool      *pgxpool.Pool
	queue     *venturi.Queue
	q         *store.Queries
	keys      *apikey.Store
	log       *slog.Logger
	cfg       Config
	longPolls *longPolls // GET /events?wait= requests waiting
}

// New returns the Echo instance serving the API. Every route but /healthz and /readyz
// requires an API key (see requireKey): a route added here is authenticated by default.
// The operations dashboard at /ops requires a key with a dashboard role (ops.go).
func New(pool *pgxpool.Pool, log *slog.Logger, cfg Config) *echo.Echo {
	e, _ := newAPI(pool, log, cfg)
	return e
}

// newAPI is New that also returns the handlers' state (for tests).
func newAPI(pool *pgxpool.Pool, log *slog.Logger, cfg Config) (*echo.Echo, *API) {
	if cfg.TagIndexDelay <= 0 {
		cfg.TagIndexDelay = 2 * time.Second
	}
	if cfg.RefetchDelay <= 0 {
		cfg.RefetchDelay = time.Second
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 10 * time.Second
	}
	if cfg.WriteLimit == (RateLimit{}) {
		cfg.WriteLimit = DefaultWriteLimit
	}
	if cfg.ImportLimit == (RateLimit{}) {
		cfg.ImportLimit = DefaultImportLimit
	}
	if cfg.ImportConfirmAbove == 0 {
		cfg.ImportConfirmAbove = DefaultImportConfirmAbove
	}
	if cfg.ImportConfirmTimeout <= 0 {
		cfg.ImportConfirmTimeout = DefaultImportConfirmTimeout
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.MaxLongPollsPerKey <= 0 {
		cfg.MaxLongPollsPerKey = DefaultMaxLongPollsPerKey
	}
	if cfg.MaxLongPolls <= 0 {
		cfg.MaxLongPolls = DefaultMaxLongPolls
	}
	cfg.PublicURL = strings.TrimRight(cfg.PublicURL, "/")
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = noop.NewTracerProvider()
	}
	if cfg.Propagator == nil {
		cfg.Propagator = propagation.TraceContext{}
	}
	a := &API{pool: pool, queue: venturi.NewQueue(pool, venturi.QueueConfig{Middleware: cfg.QueueMiddleware}), q: store.New(),
		keys: apikey.NewStore(pool), log: log, cfg: cfg, longPolls: newLongPolls(cfg.MaxLongPollsPerKey, cfg.MaxLongPolls)}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = errorHandler(log)
	e.IPExtractor = echo.ExtractIPDirect()
	e.Use(
		sanitizeRequestID, // before RequestID, which echoes what it leaves
		middleware.RequestID(),
		noStore, // first after the ID: every answer carries it, refusals and errors included
		traceRequests(cfg.TracerProvider, cfg.Propagator), // outside the logger, which logs the trace ID
		middleware.RequestLoggerWithConfig(middleware.RequestLoggerConfig{
			LogStatus: true, LogURIPath: true, LogMethod: true, LogLatency: true, LogRequestID: true, LogError: true,
			HandleError: true,
			LogValuesFunc: func(c echo.Context, v middleware.RequestLoggerValues) error {
				// Redacted whatever the route: a path that misses one by a character may hold a
				// token. A secret route's path is logged as the route.
				path := redactPath(v.URIPath)
				if secretRoutes[c.Path()] {
					path = c.Path()
				}
				attrs := []slog.Attr{slog.String("method", v.Method), slog.String("path", path), slog.Int("status", v.Status),
					slog.Float64("latency_ms", float64(v.Latency.Microseconds())/1000), slog.String("request_id", v.RequestID)}
				if id, ok := keyID(c); ok { // the key's ID, never the key
					attrs = append(attrs, slog.String("key_id", id.String()))
				}
				if sc := trace.SpanContextFromContext(c.Request().Context()); sc.IsValid() {
					attrs = append(attrs, slog.String("trace_id", sc.TraceID().String()))
				}
				log.LogAttrs(c.Request().Context(), slog.LevelInfo, "request", attrs...)
				return nil
			},
		}),
		middleware.Recover(),
		middleware.Secure(),
		shedLoad(cfg.MaxInFlight), // before the timeout and the key check: a shed request costs nothing
		middleware.ContextTimeout(cfg.RequestTimeout),
		a.requireKey(),
	)
	e.GET("/healthz", a.healthz)
	e.HEAD("/healthz", a.healthz)
	e.GET("/readyz", a.readyz)
	e.HEAD("/readyz", a.readyz)
	small := bodyLimit(BodyLimit)
	write := rateLimit(cfg.WriteLimit)
	e.POST("/bookmarks", a.createBookmark, write, small, requireJSON)
	e.GET("/bookmarks", a.listBookmarks)
	e.GET("/bookmarks/:id", a.getBookmark)
	e.POST("/bookmarks/:id/refetch", a.refetchBookmark, write, small, noSimpleBody)
	e.DELETE("/bookmarks/:id", a.deleteBookmark, write, small, noSimpleBody)
	e.POST("/imports", a.createImport, write, rateLimit(cfg.ImportLimit), bodyLimit(ImportBodyLimit), requireJSON)
	e.GET("/imports/:id", a.getImport)
	e.DELETE("/imports/:id", a.cancelImport, write, small, noSimpleBody)
	e.POST("/imports/:id/confirm", a.confirmImport, write, small, noSimpleBody)
	e.POST(confirmLinkRoute, a.confirmImportByLink, small, noSimpleBody) // no key: the token is the credential
	e.GET("/tags", a.listTags)
	e.GET("/events", a.listEvents)
	e.POST("/tags/rebuild", a.rebuildTags, write, small, requireJSON)
	a.mountOps(e, write)
	return e, a
}

// bodyLimit is Echo's BodyLimit whose 413 says what the limit is ("64K" reads "64 KiB").
func bodyLimit(limit string) echo.MiddlewareFunc {
	mw := middleware.BodyLimit(limit)
	human := strings.NewReplacer("K", " KiB", "M", " MiB", "G", " GiB").Replace(limit)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		h := mw(next)
		return func(c echo.Context) error {
			err := h(c)
			var he *echo.HTTPError
			if errors.As(err, &he) && he.Code == http.StatusRequestEntityTooLarge {
				return echo.NewHTTPError(http.StatusRequestEntityTooLarge, "the request body is larger than the limit of "+human)
			}
			return err
		}
	}
}

func (a *API) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

func (a *API) readyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	if err := a.pool.Ping(ctx); err != nil {
		a.log.WarnContext(ctx, "readiness: database unreachable", "err", err)
		return c.JSON(http.StatusServiceUnavailable, map[string]string{"status": "database unreachable"})
	}
	return c.JSON(http.StatusOK, map[string]string{"status": "ready"})
}

// ---- bookmarks ---------------------------------------------------------------------------

// CreateBookmarkRequest is the body of POST /bookmarks.
type CreateBookmarkRequest struct {
	URL   string   `json:"url"`
	Title string   `json:"title"`
	Tags  []string `json:"tags"`
}

// Bookmark is a bookmark as the API returns it.
type Bookmark struct {
	ID             string     `json:"id"`
	URL            string     `json:"url"`
	Title          string     `json:"title"`
	Tags           []string   `json:"tags"`
	FetchStatus    string     `json:"fetch_status"`
	FetchError     string     `json:"fetch_error,omitempty"`
	FetchAttempts  int32      `json:"fetch_attempts"`
	PageTitle      string     `json:"page_title,omitempty"`
	ContentSummary string     `json:"content_summary,omitempty"`
	ContentLength  int        `json:"content_length"`
	HTTPStatus     *int32     `json:"http_status,omitempty"`
	ContentType    string     `json:"content_type,omitempty"`
	FinalURL       string     `json:"final_url,omitempty"`
	FetchedAt      *time.Time `json:"fetched_at,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
	FetchJob       *Job       `json:"fetch_job,omitempty"`
}

// Job is a venturi job's state and the latest entries of its journal.
type Job struct {
	ID       string          `json:"id"`
	Kind     string          `json:"kind"`
	State    string          `json:"state"`
	Runs     int             `json:"runs"`
	Failures int             `json:"failures"`
	RunAt    time.Time       `json:"run_at"`
	Carry    json.RawMessage `json:"carry,omitempty"`
	// Journal is the last MaxJournalEntries entries of the job's journal, oldest first.
	Journal []JournalEntry `json:"journal"`
	// JournalTotal is how many entries the journal has in all (more than len(Journal) when
	// older ones are not shown).
	JournalTotal int `json:"journal_total"`
	// Queue is the job's queue: "default", or "imports" for an import and the fetches of
	// the bookmarks it created.
	Queue string `json:"queue,omitempty"`
	// Partition is the host a fetch belongs to: fetches are polite per host, and each host
	// has its own circuit breaker (see bookmarks-worker/README.md, "Politeness").
	Partition string `json:"partition,omitempty"`
	// Circuit is the breaker of the job's host when it holds the pending job back (open,
	// or letting one probe through); absent otherwise.
	Circuit *Circuit `json:"circuit,omitempty"`
}

// Circuit is a host's circuit breaker that holds a pending fetch back: after too many
// failed fetches of the host in a row, its fetches wait until OpenUntil, then one probe
// fetch decides whether they resume.
type Circuit struct {
	// State is "open", "half_open" (the next claim runs the probe) or "probing".
	State string `json:"state"`
	// Failures is how many fetches of the host failed in a row.
	Failures int `json:"failures"`
	// OpenUntil is when the breaker lets a probe fetch through.
	OpenUntil *time.Time `json:"open_until,omitempty"`
}

// JournalEntry is one run (or merge) in a job's journal, as the API shows it: durations in
// milliseconds, and no worker IDs or fencing tokens (internal detail).
type JournalEntry struct {
	Event      string          `json:"event"`
	Run        int             `json:"run,omitempty"`
	Note       string          `json:"note,omitempty"`
	Attachment json.RawMessage `json:"attachment,omitempty"`
	StartedAt  *time.Time      `json:"started_at,omitempty"`
	At         *time.Time      `json:"at,omitempty"`
	ResumeInMS int64           `json:"resume_in_ms,omitempty"`
	Merge      string          `json:"merge,omitempty"`
	// Wait names the signals a waiting job waits for (event waiting); ResumeInMS is then
	// the wait's timeout.
	Wait []string `json:"wait,omitempty"`
}

// MaxCreateWait bounds POST /bookmarks?wait=: a request waits at most this long for its
// fetch, inside the request's time limit (Config.RequestTimeout, 10s by default).
const MaxCreateWait = 8 * time.Second

// answerReserve is the part of a request's time limit that a wait leaves for the answer.
const answerReserve = time.Second

// parseWait reads POST /bookmarks's ?wait=: a Go duration from 0 to MaxCreateWait.
func parseWait(c echo.Context) (time.Duration, error) {
	s := c.QueryParam("wait")
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 || d > MaxCreateWait || len(s) > 32 {
		return 0, &badRequest{msg: "wait must be a duration such as 5s or 500ms, at most " + MaxCreateWait.String(), field: "wait"}
	}
	return d, nil
}

// createBookmark is POST /bookmarks. Once its transaction has committed, the answer is a
// 201 whatever happens next (answerCommitted): a client that saw an error would retry
// and make a second bookmark and fetch.
func (a *API) createBookmark(c echo.Context) error {
	wait, err := parseWait(c)
	if err != nil {
		return err
	}
	idemKey, err := idempotencyKeyOf(c)
	if err != nil {
		return err
	}
	var req CreateBookmarkRequest
	if err := decodeJSON(c, &req); err != nil {
		return err
	}
	var ve ValidationError
	u, msg := checkURL(req.URL)
	if msg != "" {
		ve.add("url", msg)
	}
	title, msg := checkTitle(req.Title)
	if msg != "" {
		ve.add("title", msg)
	}
	tags, msg := checkTags(req.Tags)
	if msg != "" {
		ve.add("tags", msg)
	}
	if err := ve.orNil(); err != nil {
		return err
	}
	idem, err := newIdempotency(c, idemKey, endpointCreateBookmark, CreateBookmarkRequest{URL: u, Title: title, Tags: tags})
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	id := ulid.Make()
	task := tasks.FetchBookmark{BookmarkID: id.String(), URL: u}
	var (
		job     ulid.ULID
		created *store.Bookmark
	)
	// The bookmark and its fetch commit together: no bookmark without a fetch, no fetch of
	// a bookmark that does not exist. The idempotency key is claimed first, so that a
	// concurrent duplicate waits for this transaction before it writes anything.
	err = pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		if err := a.claim(ctx, tx, idem, id); err != nil {
			return err
		}
		res, err := a.queue.EnqueueTx(ctx, tx, task, fetchMeta(c, id))
		if err != nil {
			return err
		}
		job = res.ID
		if created, err = a.q.InsertBookmark(ctx, tx, store.InsertBookmarkParams{
			ID: uuidOf(id), Url: u, Title: title, Tags: tags, FetchJobID: uuidOf(res.ID)}); err != nil {
			return err
		}
		return a.enqueueTagRebuild(ctx, tx, tags)
	})
	if errors.Is(err, errKeyClaimed) {
		return a.replay(c, idem)
	}
	if err != nil {
		return err
	}
	if a.cfg.afterCreateCommit != nil {
		a.cfg.afterCreateCommit(ctx)
	}
	atCommit := toBookmark(created)
	atCommit.FetchJob = committedJob(job, task, created.CreatedAt)
	if wait > 0 {
		a.awaitFetch(ctx, job, wait)
		return a.answerCommitted(c, http.StatusCreated, atCommit, a.respondBookmark(c, http.StatusCreated, id))
	}
	return a.answerCommitted(c, http.StatusCreated, atCommit, a.respondCreated(c, created))
}

// committedJob is a job as its enqueue in the create's transaction left it at commit: due
// at once (available, run_at the transaction's time), never run, its journal empty, in
// the task's queue and partition. A create answers with it when the job cannot be read
// back.
func committedJob(id ulid.ULID, task venturi.Task, runAt time.Time) *Job {
	j := &Job{ID: id.String(), Kind: task.Kind(), State: string(venturi.StateAvailable), RunAt: runAt,
		Journal: []JournalEntry{}, Queue: venturi.DefaultQueue}
	if q, ok := task.(venturi.Queuer); ok && q.Queue() != "" {
		j.Queue = q.Queue()
	}
	if p, ok := task.(venturi.Partitioner); ok {
		j.Partition = p.Partition()
	}
	return j
}

// answerCommitted ends a create whose transaction has committed: err is what answering
// with the resource as read after the commit returned. If that failed (the database is
// slow or gone, the request's time is spent) and nothing has been written yet, the
// answer is status with atCommit, the resource as the transaction wrote it, and the
// failure is logged: the create succeeded, and an error would make the client retry and
// create again.
func (a *API) answerCommitted(c echo.Context, status int, atCommit any, err error) error {
	if err == nil || c.Response().Committed {
		return err
	}
	a.log.WarnContext(c.Request().Context(), "a committed create could not be read back: answered with what its transaction wrote",
		"err", err, "method", c.Request().Method, "path", c.Path(), "request_id", c.Response().Header().Get(echo.HeaderXRequestID))
	return c.JSON(status, atCommit)
}

// respondCreated answers a create without waiting: the bookmark as its transaction wrote
// it (InsertBookmark's RETURNING) and its fetch job as venturi shows it now, one read
// where respondBookmark makes three. The row written is the row respondBookmark would
// read as long as the job has not run: only a run of the bookmark's fetch job writes a
// new bookmark's fetch result (the worker's other updates skip pending bookmarks, and a
// refetch, which merges into the pending job, writes what the row already holds). A job
// that has run (or is gone) takes respondBookmark's path: the bookmark read again after
// the job, so that it is at least as new as the job shown.
func (a *API) respondCreated(c echo.Context, row *store.Bookmark) error {
	j, err := a.queue.Job(c.Request().Context(), ulid.ULID(row.FetchJobID.Bytes))
	if err != nil && !errors.Is(err, venturi.ErrNotFound) {
		return err
	}
	if err != nil || j.RunCount > 0 || (j.State != venturi.StateAvailable && j.State != venturi.StateScheduled) {
		return a.respondBookmark(c, http.StatusCreated, ulid.ULID(row.ID.Bytes))
	}
	b := toBookmark(row)
	b.FetchJob = toJob(j)
	return c.JSON(http.StatusCreated, b)
}

// awaitFetch waits up to wait for a new bookmark's fetch job to end (completed or dead),
// and less when the request's time limit comes first: it leaves answerReserve to answer.
// It holds no database connection while it waits (venturi's Await: one listening
// connection per Queue for all waiters, and a poll a second). It never fails the request:
// the bookmark exists whatever happens here, and is answered as it is when the wait ends.
func (a *API) awaitFetch(ctx context.Context, job ulid.ULID, wait time.Duration) {
	deadline := time.Now().Add(wait)
	if d, ok := ctx.Deadline(); ok && d.Add(-answerReserve).Before(deadline) {
		deadline = d.Add(-answerReserve)
	}
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if _, err := a.queue.Await(wctx, job); err != nil && wctx.Err() == nil {
		a.log.WarnContext(ctx, "await the fetch of a new bookmark", "job_id", job.String(), "err", err)
	}
}

func (a *API) enqueueTagRebuild(ctx context.Context, tx pgx.Tx, tags []string) error {
	if len(tags) == 0 {
		return nil
	}
	// Debounced: every tag edit pushes the pending rebuild to TagIndexDelay from now, so a
	// burst runs one rebuild once it quiets (at most tasks.TagIndexMaxWait after it began).
	task := tasks.NewRebuildTagIndex(tags...)
	task.QuietMS = a.cfg.TagIndexDelay.Milliseconds()
	_, err := a.queue.EnqueueTx(ctx, tx, task, venturi.After(a.cfg.TagIndexDelay))
	return err
}

func (a *API) getBookmark(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	return a.respondBookmark(c, http.StatusOK, id)
}

func (a *API) respondBookmark(c echo.Context, status int, id ulid.ULID) error {
	ctx := c.Request().Context()
	row, err := a.q.GetBookmark(ctx, a.pool, uuidOf(id))
	if errors.Is(err, pgx.ErrNoRows) {
		return errNotFound
	}
	if err != nil {
		return err
	}
	if !row.FetchJobID.Valid {
		return c.JSON(status, toBookmark(row))
	}
	// The job first, the bookmark again after it: the worker commits a fetch's result and
	// its job's outcome in one transaction, so the row read later is at least as new.
	j, err := a.queue.Job(ctx, ulid.ULID(row.FetchJobID.Bytes))
	if err != nil && !errors.Is(err, venturi.ErrNotFound) { // pruned jobs are simply not shown
		return err
	}
	jobFound := err == nil
	row, err = a.q.GetBookmark(ctx, a.pool, uuidOf(id))
	if errors.Is(err, pgx.ErrNoRows) {
		return errNotFound
	}
	if err != nil {
		return err
	}
	b := toBookmark(row)
	if jobFound && row.FetchJobID.Bytes == j.ID {
		b.FetchJob = toJob(j)
	}
	return c.JSON(status, b)
}

func toBookmark(r *store.Bookmark) *Bookmark {
	b := &Bookmark{
		ID: ulid.ULID(r.ID.Bytes).String(), URL: r.Url, Title: r.Title, Tags: r.Tags,
		FetchStatus: r.FetchStatus, FetchError: r.FetchError, FetchAttempts: r.FetchAttempts,
		PageTitle: r.PageTitle, ContentLength: len(r.Content), ContentType: r.ContentType,
		FinalURL: r.FinalUrl, FetchedAt: r.FetchedAt, CreatedAt: r.CreatedAt,
		ContentSummary: summary(r.Content),
	}
	if r.HttpStatus.Valid {
		b.HTTPStatus = &r.HttpStatus.Int32
	}
	if b.Tags == nil {
		b.Tags = []string{}
	}
	return b
}

func summary(s string) string {
	if utf8.RuneCountInString(s) <= summaryRunes {
		return s
	}
	r := []rune(s)[:summaryRunes]
	return string(r) + "…"
}

func toJob(j *venturi.Job) *Job {
	shown := j.Journal[max(0, len(j.Journal)-MaxJournalEntries):]
	out := &Job{ID: j.ID.String(), Kind: j.Kind, State: string(j.State), Runs: j.RunCount, Failures: j.Failures,
		RunAt: j.RunAt, Journal: make([]JournalEntry, len(shown)), JournalTotal: int(j.JournalLen)}
	if len(j.Carry) > 0 && string(j.Carry) != "null" {
		out.Carry = j.Carry
	}
	timeOrNil := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	for i, e := range shown {
		out.Journal[i] = JournalEntry{Event: string(e.Event), Run: e.Run, Note: e.Note, Attachment: e.Attachment,
			StartedAt: timeOrNil(e.StartedAt), At: timeOrNil(e.At), ResumeInMS: e.ResumeIn.Milliseconds(), Merge: e.Merge, Wait: e.Wait}
	}
	out.Queue, out.Partition = j.Queue, j.Partition
	pending := j.State == venturi.StateAvailable || j.State == venturi.StateScheduled
	if c := j.Circuit; c != nil && pending && c.State != venturi.CircuitClosed {
		out.Circuit = &Circuit{State: string(c.State), Failures: c.Failures, OpenUntil: c.OpenUntil}
	}
	return out
}

// BookmarkList is a page of GET /bookmarks.
type BookmarkList struct {
	Items []BookmarkSummary `json:"items"`
	// Next is the cursor of the following page (pass it as ?before=); empty on the last page.
	Next string `json:"next,omitempty"`
}

// BookmarkSummary is a bookmark in a list.
type BookmarkSummary struct {
	ID          string    `json:"id"`
	URL         string    `json:"url"`
	Title       string    `json:"title"`
	Tags        []string  `json:"tags"`
	FetchStatus string    `json:"fetch_status"`
	PageTitle   string    `json:"page_title,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
}

func (a *API) listBookmarks(c echo.Context) error {
	var ve ValidationError
	limit := 20
	if s := c.QueryParam("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 100 {
			ve.add("limit", "must be an integer from 1 to 100")
		}
		limit = n
	}
	// One row more than the page: next is set only when another page exists.
	p := store.ListBookmarksParams{MaxRows: int32(limit + 1)}
	if s := c.QueryParam("before"); s != "" {
		id, err := ulid.ParseStrict(s)
		if err != nil {
			ve.add("before", "must be a bookmark ID (the previous page's next)")
		}
		p.Before = uuidOf(id)
	}
	if s := c.QueryParam("tag"); s != "" {
		tags, msg := checkTags([]string{s})
		if msg != "" {
			ve.add("tag", msg)
		} else {
			p.Tag = pgtype.Text{String: tags[0], Valid: true}
		}
	}
	if err := ve.orNil(); err != nil {
		return err
	}
	rows, err := a.q.ListBookmarks(c.Request().Context(), a.pool, p)
	if err != nil {
		return err
	}
	more := len(rows) > limit
	rows = rows[:min(len(rows), limit)]
	out := BookmarkList{Items: make([]BookmarkSummary, 0, len(rows))}
	for _, r := range rows {
		tags := r.Tags
		if tags == nil {
			tags = []string{}
		}
		out.Items = append(out.Items, BookmarkSummary{ID: ulid.ULID(r.ID.Bytes).String(), URL: r.Url, Title: r.Title,
			Tags: tags, FetchStatus: r.FetchStatus, PageTitle: r.PageTitle, CreatedAt: r.CreatedAt})
	}
	if more {
		out.Next = out.Items[len(out.Items)-1].ID
	}
	return c.JSON(http.StatusOK, out)
}

// Enqueued reports a job an endpoint enqueued or merged into.
type Enqueued struct {
	JobID  string `json:"job_id"`
	Action string `json:"action"` // inserted, replaced, merged, kept, independent
}

func (a *API) refetchBookmark(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	var res venturi.Result
	err = pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		bm, err := a.q.LockBookmark(ctx, tx, uuidOf(id))
		if errors.Is(err, pgx.ErrNoRows) {
			return errNotFound
		}
		if err != nil {
			return err
		}
		// A pending fetch of this bookmark is replaced, so a burst of refetches is one job.
		// It is throttled by RefetchDelay: the burst rides the first refetch's due time.
		task := tasks.FetchBookmark{BookmarkID: id.String(), URL: bm.Url}
		if res, err = a.queue.EnqueueTx(ctx, tx, task, venturi.After(a.cfg.RefetchDelay), fetchMeta(c, id)); err != nil {
			return err
		}
		return a.q.SetFetchPending(ctx, tx, store.SetFetchPendingParams{FetchJobID: uuidOf(res.ID), ID: uuidOf(id)})
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusAccepted, Enqueued{JobID: res.ID.String(), Action: res.Action.String()})
}

func (a *API) deleteBookmark(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	err = pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		tags, err := a.q.DeleteBookmark(ctx, tx, uuidOf(id))
		if errors.Is(err, pgx.ErrNoRows) {
			return errNotFound
		}
		if err != nil {
			return err
		}
		return a.enqueueTagRebuild(ctx, tx, tags)
	})
	if err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// ---- imports -----------------------------------------------------------------------------

// CreateImportRequest is the body of POST /imports: a browser's bookmarks export as a list.
type CreateImportRequest struct {
	Items []ImportItem `json:"items"`
	// Tags are added to every imported bookmark.
	Tags []string `json:"tags"`
	// PageSize is the number of items imported per step (default 50, at most 1000).
	PageSize int `json:"page_size"`
}

// ImportItem is one exported bookmark. Its URL is validated and normalised as POST
// /bookmarks's is: an import with an invalid item is refused (422, items[i].url). The
// worker still counts as skipped an item its fetcher refuses outright (an IPv4 host in a
// non-canonical form such as 2130706433, which the API does not judge).
type ImportItem struct {
	URL   string `json:"url"`
	Title string `json:"title"`
}

// Import is an import's progress. Status is awaiting_confirmation (a large import, until
// it is confirmed), pending, running, done or cancelled.
type Import struct {
	ID         string     `json:"id"`
	Status     string     `json:"status"`
	Total      int32      `json:"total"`
	Imported   int32      `json:"imported"`
	Skipped    int32      `json:"skipped"`
	Tags       []string   `json:"tags"`
	CreatedAt  time.Time  `json:"created_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// Confirmation is set for an import that waits (or waited) for a confirmation.
	Confirmation *Confirmation `json:"confirmation,omitempty"`
	Job          *Job          `json:"job,omitempty"`
}

// maxItemErrors bounds the per-item messages of a refused import: past it, the field
// items says how many items are invalid in all.
const maxItemErrors = 100

// createImport is POST /imports. Every item's URL is checked and normalised as POST
// /bookmarks's is (checkURL); an import with an invalid item is refused whole, with a
// message per item (items[i].url). Once its transaction has committed the answer is a 202
// whatever happens next, as for createBookmark.
func (a *API) createImport(c echo.Context) error {
	idemKey, err := idempotencyKeyOf(c)
	if err != nil {
		return err
	}
	var req CreateImportRequest
	if err := decodeJSON(c, &req); err != nil {
		return err
	}
	var ve ValidationError
	if len(req.Items) == 0 {
		ve.add("items", "must list at least one bookmark")
	} else if len(req.Items) > MaxImportItems {
		ve.add("items", "at most "+strconv.Itoa(MaxImportItems)+" bookmarks per import")
	}
	tags, msg := checkTags(req.Tags)
	if msg != "" {
		ve.add("tags", msg)
	}
	if req.PageSize < 0 || req.PageSize > 1000 {
		ve.add("page_size", "must be from 1 to 1000 (0 for the default)")
	}
	items := make([]ImportItem, len(req.Items))
	urls := make([]string, len(req.Items))
	titles := make([]string, len(req.Items))
	invalid := 0
	for i, it := range req.Items {
		u, umsg := checkURL(it.URL)
		t, tmsg := checkTitle(it.Title)
		if umsg != "" || tmsg != "" {
			if invalid++; invalid <= maxItemErrors {
				if umsg != "" {
					ve.add("items["+strconv.Itoa(i)+"].url", umsg)
				}
				if tmsg != "" {
					ve.add("items["+strconv.Itoa(i)+"].title", tmsg)
				}
			}
		}
		items[i], urls[i], titles[i] = ImportItem{URL: u, Title: t}, u, t
	}
	if invalid > maxItemErrors {
		ve.add("items", strconv.Itoa(invalid)+" items are invalid; the first "+strconv.Itoa(maxItemErrors)+" are named")
	}
	if err := ve.orNil(); err != nil {
		return err
	}
	idem, err := newIdempotency(c, idemKey, endpointCreateImport, CreateImportRequest{Items: items, Tags: tags, PageSize: req.PageSize})
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	id := ulid.Make()
	task := tasks.ImportBookmarks{ImportID: id.String(), PageSize: req.PageSize}
	confirm := a.cfg.ImportConfirmAbove != NoImportConfirmation && len(urls) > a.cfg.ImportConfirmAbove
	status, link := "pending", ""
	if confirm {
		status = "awaiting_confirmation"
	}
	var (
		created *store.BookmarkImport
		job     ulid.ULID
		expires time.Time
	)
	// The import, its items, its job and (for a large import) its confirmation commit
	// together: the worker never sees an import without the confirmation it must wait for.
	err = pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		if err := a.claim(ctx, tx, idem, id); err != nil {
			return err
		}
		res, err := a.queue.EnqueueTx(ctx, tx, task)
		if err != nil {
			return err
		}
		job = res.ID
		if created, err = a.q.InsertImport(ctx, tx, store.InsertImportParams{ID: uuidOf(id), JobID: uuidOf(res.ID), Status: status,
			Tags: tags, Total: int32(len(urls))}); err != nil {
			return err
		}
		if _, err = a.q.InsertImportItems(ctx, tx, store.InsertImportItemsParams{ImportID: uuidOf(id), Urls: urls, Titles: titles}); err != nil {
			return err
		}
		if !confirm {
			return nil
		}
		token, digest := newConfirmToken()
		if expires, err = a.q.InsertImportConfirmation(ctx, tx, store.InsertImportConfirmationParams{ImportID: uuidOf(id),
			TokenHash: digest[:], TimeoutUs: a.cfg.ImportConfirmTimeout.Microseconds()}); err != nil {
			return err
		}
		link = a.confirmLink(id, token)
		return nil
	})
	if errors.Is(err, errKeyClaimed) {
		return a.replay(c, idem)
	}
	if err != nil {
		return err
	}
	if a.cfg.afterCreateCommit != nil {
		a.cfg.afterCreateCommit(ctx)
	}
	atCommit := toImport(created)
	atCommit.Job = committedJob(job, task, created.CreatedAt)
	if confirm {
		atCommit.Confirmation = &Confirmation{ExpiresAt: expires, URL: link}
	}
	out, err := a.loadImport(ctx, id)
	if err != nil {
		return a.answerCommitted(c, http.StatusAccepted, atCommit, err)
	}
	if out.Confirmation != nil {
		out.Confirmation.URL = link // shown once: only its digest is stored
	}
	return c.JSON(http.StatusAccepted, out)
}

// toImport is an import's row as the API shows it, without its confirmation and job.
func toImport(r *store.BookmarkImport) *Import {
	out := &Import{ID: ulid.ULID(r.ID.Bytes).String(), Status: r.Status, Total: r.Total, Imported: r.Imported, Skipped: r.Skipped,
		Tags: r.Tags, CreatedAt: r.CreatedAt, FinishedAt: r.FinishedAt}
	if out.Tags == nil {
		out.Tags = []string{}
	}
	return out
}

func (a *API) getImport(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	return a.respondImport(c, http.StatusOK, id)
}

func (a *API) respondImport(c echo.Context, status int, id ulid.ULID) error {
	out, err := a.loadImport(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(status, out)
}

// loadImport reads an import, its confirmation and its job. The job is read first and the
// import's rows after it: the worker commits an import's progress and its job's outcome in
// one transaction, so rows read later are at least as new as the job (a completed job never
// shows beside an import still "running").
func (a *API) loadImport(ctx context.Context, id ulid.ULID) (*Import, error) {
	r, err := a.q.GetImport(ctx, a.pool, uuidOf(id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, err
	}
	j, jobErr := a.queue.Job(ctx, ulid.ULID(r.JobID.Bytes))
	if jobErr != nil && !errors.Is(jobErr, venturi.ErrNotFound) {
		return nil, jobErr
	}
	r, err = a.q.GetImport(ctx, a.pool, uuidOf(id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, err
	}
	out := toImport(r)
	conf, err := a.q.GetImportConfirmation(ctx, a.pool, uuidOf(id))
	switch {
	case err == nil:
		out.Confirmation = toConfirmation(conf)
	case !errors.Is(err, pgx.ErrNoRows):
		return nil, err
	}
	if jobErr == nil {
		out.Job = toJob(j)
		// The job is the truth while it exists: a cancel whose status update did not
		// happen (the API stopped between the two) still shows.
		if j.State == venturi.StateCancelled && out.Status != "done" {
			out.Status = "cancelled"
		}
	}
	return out, nil
}

// cancelImport is DELETE /imports/{id}: it cancels the import's job (venturi's Cancel). A
// pending or waiting import ends at once (200); a page in progress is asked to stop (202):
// it commits, and the import stops there, its checkpoint in the job's journal. Cancelling
// again is harmless (200, or 202 while the page still runs). 409 when the import has
// already completed (or failed); 404 for an unknown import. The import's record and the
// bookmarks it created stay (their fetches too): the import stops, it is not undone.
func (a *API) cancelImport(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	r, err := a.q.GetImport(ctx, a.pool, uuidOf(id))
	if errors.Is(err, pgx.ErrNoRows) {
		return errNotFound
	}
	if err != nil {
		return err
	}
	reason := "cancelled by request"
	if k, ok := keyID(c); ok {
		reason = "cancelled with API key " + k.String()
	}
	res, err := a.queue.Cancel(ctx, ulid.ULID(r.JobID.Bytes), reason)
	if errors.Is(err, venturi.ErrJobFinished) || errors.Is(err, venturi.ErrNotFound) {
		return errImportEnded
	}
	if err != nil {
		return err
	}
	// The job is cancelled or will be, unless a completing run wins: the status update
	// leaves a done import done, and the worker's last run makes it done over this.
	if err := a.q.SetImportCancelled(ctx, a.pool, uuidOf(id)); err != nil {
		return err
	}
	out, err := a.loadImport(ctx, id)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if res == venturi.CancelRequested || out.Job != nil && out.Job.State == string(venturi.StateRunning) {
		status = http.StatusAccepted
	}
	return c.JSON(status, out)
}

// ---- tags --------------------------------------------------------------------------------

// Tag is a tag-index entry.
type Tag struct {
	Tag       string    `json:"tag"`
	Count     int32     `json:"count"`
	RebuiltAt time.Time `json:"rebuilt_at"`
}

// TagList is a page of GET /tags.
type TagList struct {
	Items []Tag `json:"items"`
	// Next is the cursor of the following page (pass it as ?after=); empty on the last page.
	Next string `json:"next,omitempty"`
}

// Tag list page sizes.
const (
	DefaultTagPage = 100
	MaxTagPage     = 1000
)

// listTags pages through the tag index, most used first (then by name). The cursor is the
// last row's "count:tag"; a tag whose count changes between two pages may be skipped or
// shown twice, as with any keyset on a changing value.
func (a *API) listTags(c echo.Context) error {
	var ve ValidationError
	limit := DefaultTagPage
	if s := c.QueryParam("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxTagPage {
			ve.add("limit", "must be an integer from 1 to "+strconv.Itoa(MaxTagPage))
		}
		limit = n
	}
	p := store.ListTagIndexParams{MaxRows: int32(limit + 1)}
	if s := c.QueryParam("after"); s != "" {
		count, tag, ok := parseTagCursor(s)
		if !ok {
			ve.add("after", "must be the previous page's next")
		}
		p.AfterCount = pgtype.Int4{Int32: count, Valid: true}
		p.AfterTag = pgtype.Text{String: tag, Valid: true}
	}
	if err := ve.orNil(); err != nil {
		return err
	}
	rows, err := a.q.ListTagIndex(c.Request().Context(), a.pool, p)
	if err != nil {
		return err
	}
	more := len(rows) > limit
	rows = rows[:min(len(rows), limit)]
	out := TagList{Items: make([]Tag, 0, len(rows))}
	for _, r := range rows {
		out.Items = append(out.Items, Tag{Tag: r.Tag, Count: r.BookmarkCount, RebuiltAt: r.RebuiltAt})
	}
	if more {
		last := out.Items[len(out.Items)-1]
		out.Next = strconv.Itoa(int(last.Count)) + ":" + last.Tag
	}
	return c.JSON(http.StatusOK, out)
}

// parseTagCursor parses a GET /tags cursor, "count:tag".
func parseTagCursor(s string) (int32, string, bool) {
	n, tag, ok := strings.Cut(s, ":")
	if !ok || len(tag) > maxTagLen || !tagPattern.MatchString(tag) {
		return 0, "", false
	}
	count, err := strconv.ParseInt(n, 10, 32)
	if err != nil || count < 0 {
		return 0, "", false
	}
	return int32(count), tag, true
}

// RebuildTagsRequest is the body of POST /tags/rebuild.
type RebuildTagsRequest struct {
	Tags []string `json:"tags"`
	All  bool     `json:"all"`
	// DelayMS delays the rebuild so that more requests can merge into it (default: the
	// server's tag-index delay; at most one hour).
	DelayMS *int64 `json:"delay_ms"`
}

func (a *API) rebuildTags(c echo.Context) error {
	var req RebuildTagsRequest
	if err := decodeJSON(c, &req); err != nil {
		return err
	}
	var ve ValidationError
	tags, msg := checkTags(req.Tags)
	if msg != "" {
		ve.add("tags", msg)
	}
	if len(tags) == 0 && !req.All {
		ve.add("tags", "name at least one tag, or set all")
	}
	delay := a.cfg.TagIndexDelay
	if req.DelayMS != nil {
		if *req.DelayMS < 0 || *req.DelayMS > 3_600_000 {
			ve.add("delay_ms", "must be from 0 to 3600000")
		}
		delay = time.Duration(*req.DelayMS) * time.Millisecond
	}
	if err := ve.orNil(); err != nil {
		return err
	}
	task := tasks.NewRebuildTagIndex(tags...)
	if req.All {
		task = tasks.RebuildTagIndex{All: true, Requests: 1}
	}
	res, err := a.queue.Enqueue(c.Request().Context(), task, venturi.After(delay))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusAccepted, Enqueued{JobID: res.ID.String(), Action: res.Action.String()})
}

// ---- helpers -----------------------------------------------------------------------------

// pathID parses the :id parameter; a malformed ID is as unknown as a missing one.
func pathID(c echo.Context) (ulid.ULID, error) {
	id, err := ulid.ParseStrict(c.Param("id"))
	if err != nil {
		return ulid.ULID{}, errNotFound
	}
	return id, nil
}

func uuidOf(id ulid.ULID) pgtype.UUID { return pgtype.UUID{Bytes: id, Valid: true} }

// Package httpapi is the bookmarks HTTP API on Echo v4. Echo types stay inside this package.
package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

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

// pathID parses the :id parameter; a malformed ID is as unknown as a missing one.
func pathID(c echo.Context) (ulid.ULID, error) {
	id, err := ulid.ParseStrict(c.Param("id"))
	if err != nil {
		return ulid.ULID{}, errNotFound
	}
	return id, nil
}

func uuidOf(id ulid.ULID) pgtype.UUID { return pgtype.UUID{Bytes: id, Valid: true} }

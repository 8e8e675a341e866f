package httpapi

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"golang.org/x/time/rate"
)

// RateLimit is a token bucket per API key: up to Burst requests at once, refilled at
// PerSecond requests per second. The buckets live in the process (Echo's memory store), so
// with N replicas behind a load balancer a key gets up to N times the limit; put a shared
// limiter (the load balancer's, or one in PostgreSQL or Redis) in front if that matters.
type RateLimit struct {
	PerSecond float64
	Burst     int
}

// Rate limits: DefaultWriteLimit for every request that changes something, and
// DefaultImportLimit for imports on top of it. Unlimited turns a limit off.
var (
	DefaultWriteLimit  = RateLimit{PerSecond: 10, Burst: 20}
	DefaultImportLimit = RateLimit{PerSecond: 1.0 / 60, Burst: 3}
	Unlimited          = RateLimit{PerSecond: math.Inf(1)}
)

// Off reports whether the limit lets everything through.
func (l RateLimit) Off() bool { return math.IsInf(l.PerSecond, 1) }

// Validate reports a limit that cannot work.
func (l RateLimit) Validate() error {
	switch {
	case l.Off():
		return nil
	case !(l.PerSecond > 0):
		return errors.New("the rate must be positive (or off)")
	case l.Burst < 1:
		return errors.New("the burst must be at least 1")
	}
	return nil
}

// retryAfter is the Retry-After of a refused request: the time one token takes to come
// back, in whole seconds (at least 1). A bucket that refused holds less than one token,
// so a client that waits this long finds one (unless it spent it meanwhile).
func (l RateLimit) retryAfter() int {
	return max(1, int(math.Ceil(1/l.PerSecond)))
}

// errRateLimited is a refused request: 429, with Retry-After set by rateLimit.
var errRateLimited = echo.NewHTTPError(http.StatusTooManyRequests, "too many requests for this API key: retry after the Retry-After header's seconds")

// rateLimit is Echo's RateLimiter keyed by the authenticated API key's ID (requireKey runs
// before it), answering 429 with a Retry-After header when the key's bucket is empty.
func rateLimit(l RateLimit) echo.MiddlewareFunc {
	if l.Off() {
		return func(next echo.HandlerFunc) echo.HandlerFunc { return next }
	}
	// An idle bucket is dropped once it would have refilled anyway, never sooner: a key
	// must not earn a fresh burst by pausing for less than the refill time.
	refill := time.Duration(float64(l.Burst) / l.PerSecond * float64(time.Second))
	store := middleware.NewRateLimiterMemoryStoreWithConfig(middleware.RateLimiterMemoryStoreConfig{
		Rate: rate.Limit(l.PerSecond), Burst: l.Burst, ExpiresIn: max(3*time.Minute, refill+time.Second),
	})
	retryAfter := strconv.Itoa(l.retryAfter())
	return middleware.RateLimiterWithConfig(middleware.RateLimiterConfig{
		Store: store,
		IdentifierExtractor: func(c echo.Context) (string, error) {
			id, ok := keyID(c)
			if !ok {
				return "", errors.New("rate limit: no authenticated API key (requireKey must run first)")
			}
			return id.String(), nil
		},
		ErrorHandler: func(c echo.Context, err error) error { return err }, // a wiring bug: 500
		DenyHandler: func(c echo.Context, _ string, _ error) error {
			c.Response().Header().Set(echo.HeaderRetryAfter, retryAfter)
			return errRateLimited
		},
	})
}

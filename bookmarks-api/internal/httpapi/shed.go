package httpapi

import (
	"errors"
	"time"

	"github.com/labstack/echo/v4"
)

// DefaultMaxInFlight is Config.MaxInFlight's default: the requests the API serves at once.
// With the pool's connections (pgxpool's default is max(4, the CPUs)) far fewer than that,
// more requests would only wait for a connection until their RequestTimeout.
const DefaultMaxInFlight = 256

// NoInFlightLimit turns the in-flight limit off (Config.MaxInFlight).
const NoInFlightLimit = -1

// InFlightWait is how long a request waits for one of the MaxInFlight places before it is
// shed with 503: long enough to ride out a burst, far shorter than a client's timeout.
const InFlightWait = 100 * time.Millisecond

// shedRetryAfter is the Retry-After of a shed request, in seconds.
const shedRetryAfter = "1"

// errOverloaded is a shed request: 503 with Retry-After (toProblem), logged as a warning
// by nobody: under overload, one line per shed request would add to the load.
var errOverloaded = errors.New("the server is overloaded: retry after the Retry-After header's seconds")

// shedLoad admits at most limit requests at once (every route but the health checks, which
// must answer under load). A request that finds no place within InFlightWait is refused at
// once with 503 and Retry-After, before it authenticates or touches the database, so
// that overload turns into fast refusals that a client can retry, not into requests that
// queue until they time out. limit <= 0 turns it off.
func shedLoad(limit int) echo.MiddlewareFunc {
	if limit <= 0 {
		return func(next echo.HandlerFunc) echo.HandlerFunc { return next }
	}
	places := make(chan struct{}, limit)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if p := c.Request().URL.Path; p == "/healthz" || p == "/readyz" {
				return next(c)
			}
			select {
			case places <- struct{}{}:
			default:
				t := time.NewTimer(InFlightWait)
				select {
				case places <- struct{}{}:
					t.Stop()
				case <-t.C:
					c.Response().Header().Set(echo.HeaderRetryAfter, shedRetryAfter)
					return errOverloaded
				case <-c.Request().Context().Done():
					t.Stop()
					return c.Request().Context().Err()
				}
			}
			defer func() { <-places }()
			return next(c)
		}
	}
}

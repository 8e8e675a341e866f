package httpapi

import (
	"errors"
	"net/http"
	"regexp"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/oklog/ulid/v2"
)

// publicRoutes are the routes served without an API key: the probes of load balancers and
// orchestrators, which answer nothing but whether the process and its database are up, and
// the confirmation link of a large import, whose token is its own credential (confirm.go).
// Every other route, including one added later, requires a key.
var publicRoutes = map[string]bool{"/healthz": true, "/readyz": true, confirmLinkRoute: true}

// secretRoutes are the routes whose path holds a secret (a confirmation link's token): the
// request log shows their route, never their path.
var secretRoutes = map[string]bool{confirmLinkRoute: true}

// redacted replaces a path segment that may hold a secret in logged paths.
const redacted = "[redacted]"

// secretSegment is a path segment that may be a secret: a run of 32 or more base64url
// characters (a confirmation token's 43, with or without its bmc_ prefix, mistyped or
// not). IDs (ULIDs, 26 characters) and route words are shorter.
var secretSegment = regexp.MustCompile(`[A-Za-z0-9_-]{32,}`)

// redactPath is a request path as it may be logged: every segment that contains a
// confirmation token's prefix (bmc_) or looks like a secret (secretSegment), and every
// segment after a "confirm" segment, is replaced by [redacted]. It applies to every path,
// whatever route it matched: a path that misses the confirmation link's route by a
// character (//imports/..., a trailing slash, a wrong method) still holds its token.
func redactPath(p string) string {
	segs := strings.Split(p, "/")
	afterConfirm := false
	for i, s := range segs {
		if afterConfirm || strings.Contains(strings.ToLower(s), confirmPrefix) || secretSegment.MatchString(s) {
			segs[i] = redacted
		}
		afterConfirm = afterConfirm || strings.EqualFold(s, "confirm")
	}
	return strings.Join(segs, "/")
}

// noStore marks every answer of the API Cache-Control: no-store, errors included: the
// answers are per key and change (a bookmark's fetch, an import's progress), and a 401, a
// 429 or a 503 with Retry-After must not be served again from a cache. The dashboard at
// /ops sets its own cache headers (venturi/dashboard).
func noStore(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !opsRoutes[c.Path()] {
			c.Response().Header().Set(echo.HeaderCacheControl, "no-store")
		}
		return next(c)
	}
}

// keyIDContextKey holds the authenticated key's ID (a ulid.ULID) in the Echo context.
const keyIDContextKey = "api_key_id"

// errUnauthorized is a request without a valid API key: 401. It never says why (missing,
// malformed, unknown, revoked or wrong), so a client learns nothing about the keys.
var errUnauthorized = echo.NewHTTPError(http.StatusUnauthorized,
	"a valid API key is required: send Authorization: Bearer <key>")

// wwwAuthenticate is the challenge of every 401 (RFC 6750).
const wwwAuthenticate = `Bearer realm="bookmarks-api"`

// keyLookupError is a key check the database could not answer: a 500, not a 401.
type keyLookupError struct{ err error }

func (e *keyLookupError) Error() string { return "API key lookup: " + e.err.Error() }
func (e *keyLookupError) Unwrap() error { return e.err }

// requireKey is Echo's KeyAuth on `Authorization: Bearer <key>`, checked by apikey.Store
// (SHA-256 digests compared in constant time). A request without a valid key gets a 401
// with a WWW-Authenticate challenge; the key's ID is kept in the context for the rate
// limits and the request log.
func (a *API) requireKey() echo.MiddlewareFunc {
	return middleware.KeyAuthWithConfig(middleware.KeyAuthConfig{
		// The dashboard's routes have their own authentication (requireOpsKey, ops.go).
		Skipper:    func(c echo.Context) bool { return publicRoutes[c.Path()] || opsRoutes[c.Path()] },
		KeyLookup:  "header:" + echo.HeaderAuthorization,
		AuthScheme: "Bearer",
		Validator: func(key string, c echo.Context) (bool, error) {
			id, ok, err := a.keys.Authenticate(c.Request().Context(), key)
			if err != nil {
				return false, &keyLookupError{err}
			}
			if ok {
				c.Set(keyIDContextKey, id)
			}
			return ok, nil
		},
		ErrorHandler: func(err error, c echo.Context) error {
			var le *keyLookupError
			if errors.As(err, &le) {
				return le
			}
			c.Response().Header().Set(echo.HeaderWWWAuthenticate, wwwAuthenticate)
			return errUnauthorized
		},
	})
}

// keyID is the authenticated request's key ID.
func keyID(c echo.Context) (ulid.ULID, bool) {
	id, ok := c.Get(keyIDContextKey).(ulid.ULID)
	return id, ok
}

// requestIDPattern is what a client's X-Request-ID may be: a short token that is safe in
// headers, JSON and logs.
var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// sanitizeRequestID drops a client's X-Request-ID unless it is a short safe token (at most
// 64 characters of A-Z, a-z, 0-9, '.', '_', '-'), so that the RequestID middleware after
// it generates a fresh one instead of echoing arbitrary bytes into headers, bodies and logs.
func sanitizeRequestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Request().Header
		if vs := h.Values(echo.HeaderXRequestID); len(vs) > 0 {
			h.Del(echo.HeaderXRequestID)
			if requestIDPattern.MatchString(vs[0]) {
				h.Set(echo.HeaderXRequestID, vs[0])
			}
		}
		return next(c)
	}
}

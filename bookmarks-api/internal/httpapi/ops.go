package httpapi

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/venturi-dev/bookmarks/bookmarks-api/internal/apikey"
	"github.com/venturi-dev/venturi/dashboard"
)

// The operations dashboard (venturi's dashboard package) at /ops.
//
// Browsers cannot send the API's Bearer keys, so the dashboard authenticates with HTTP
// Basic: any user name, and an API key as the password. The key must have a dashboard
// role (`bookmarks-api keys create --name NAME --ops read|write`); a key without one is
// refused like a wrong key (401, with the Basic challenge so that the browser asks again).
// The browser keeps the key for the session and sends it with every request, so every
// request is checked as the API's are (SHA-256 digest, constant-time comparison, the
// key's revocation honoured at once); nothing is stored server-side. Serve the API over
// TLS: Basic sends the key in every request, as Bearer does.
//
// Every method on every /ops path is authenticated first: a request without a dashboard
// key is a 401 whatever its method (an OPTIONS too: Echo would answer it 204 by itself),
// and the dashboard answers a method it does not serve with 405 only once the key is
// checked.
//
// A read key sees every page and changes nothing; a write key may take every action, each
// recorded in venturi's audit log as "name (key ID)": the dashboard's Access names the key's
// ID as its Subject, so the forms' tokens bind to the key, not to its name (a replaced key
// and its successor share the name). Because the browser sends the credentials by itself,
// cross-site requests are the dashboard's concern: it refuses a POST that comes from
// another origin and one without its form token, and a costly GET (a bulk dry run, a
// search) from another origin (see venturi/dashboard/README.md, "CSRF"). With
// Config.PublicURL set, its origin is the dashboard's for that check.

// OpsPrefix is where the dashboard is mounted.
const OpsPrefix = "/ops"

// opsRoutes are the dashboard's routes: requireKey skips them, requireOpsKey guards them.
var opsRoutes = map[string]bool{OpsPrefix: true, OpsPrefix + "/*": true}

// wwwAuthenticateOps is the challenge of the dashboard's 401s: browsers show a sign-in
// dialog for it.
const wwwAuthenticateOps = `Basic realm="bookmarks-api ops", charset="UTF-8"`

var errOpsUnauthorized = echo.NewHTTPError(http.StatusUnauthorized,
	"the operations dashboard needs an API key with a dashboard role: sign in with any user name and the key as the password")

// opsKeyContextKey holds the authenticated dashboard key (an apikey.Key) in the request's
// context, where the dashboard's Access function finds it.
type opsKeyContextKey struct{}

// mountOps serves the dashboard at /ops behind requireOpsKey, every method: its POSTs
// count against the key's write limit, and the methods it does not serve reach it (after
// the key check) to be answered 405.
func (a *API) mountOps(e *echo.Echo, write echo.MiddlewareFunc) {
	cfg := dashboard.Config{Prefix: OpsPrefix, Logger: a.log, Title: "bookmarks ops", Access: opsAccess}
	// The API's public address is the dashboard's origin too (behind a proxy that
	// terminates TLS, the request alone does not say it was https).
	if u, err := url.Parse(a.cfg.PublicURL); err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
		cfg.PublicOrigin = u.Scheme + "://" + u.Host
	}
	dash, err := dashboard.New(a.queue, cfg)
	if err != nil {
		panic("httpapi: the dashboard's configuration is invalid: " + err.Error()) // a constant configuration
	}
	h := echo.WrapHandler(dash)
	auth := a.requireOpsKey()
	for _, p := range []string{OpsPrefix, OpsPrefix + "/*"} {
		e.Any(p, h, auth) // every method Echo routes by name
		e.POST(p, h, auth, write)
		// Any other method (MKCOL, BREW, ...): Echo's router has no route for it and would
		// answer 405 before any route's middleware; its not-found route of the path takes
		// it instead, through the key check.
		e.RouteNotFound(p, h, auth)
	}
}

// opsAccess grants a write key every action and a read key none; the actor is the key's
// name and the subject its ID (the forms' tokens bind to it; the audit log records both).
func opsAccess(r *http.Request) dashboard.Access {
	k, ok := r.Context().Value(opsKeyContextKey{}).(apikey.Key)
	if !ok {
		return dashboard.Access{}
	}
	acc := dashboard.Access{Actor: k.Name, Subject: k.ID.String()}
	if k.Ops == apikey.OpsWrite {
		acc.Grants = dashboard.AllActions
	}
	return acc
}

// requireOpsKey authenticates a dashboard request: HTTP Basic with an API key as the
// password (or the API's Bearer header, for scripts), the key holding a dashboard role.
func (a *API) requireOpsKey() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			key, ok := opsCredential(r)
			if !ok {
				c.Response().Header().Set(echo.HeaderWWWAuthenticate, wwwAuthenticateOps)
				return errOpsUnauthorized
			}
			k, ok, err := a.keys.Lookup(r.Context(), key)
			if err != nil {
				return &keyLookupError{err}
			}
			if !ok || k.Ops == apikey.OpsNone {
				c.Response().Header().Set(echo.HeaderWWWAuthenticate, wwwAuthenticateOps)
				return errOpsUnauthorized
			}
			c.Set(keyIDContextKey, k.ID)
			c.SetRequest(r.WithContext(context.WithValue(r.Context(), opsKeyContextKey{}, k)))
			return next(c)
		}
	}
}

// opsCredential is the key a dashboard request presents: the password of its Basic
// credentials, or its Bearer token.
func opsCredential(r *http.Request) (string, bool) {
	if _, pass, ok := r.BasicAuth(); ok {
		return pass, pass != ""
	}
	h := r.Header.Get(echo.HeaderAuthorization)
	if len(h) > 7 && strings.EqualFold(h[:7], "Bearer ") {
		return h[7:], true
	}
	return "", false
}

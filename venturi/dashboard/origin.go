package dashboard

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// The origin check: the first layer of the CSRF protection of every POST, and the only
// protection a GET that costs needs (a bulk action's dry run, a listing's search window:
// another site could otherwise make a signed-in browser run them again and again in
// hidden requests, reading nothing but spending the database's time).
//
// It follows net/http.CrossOriginProtection, for any method, and compares the scheme too:
//
//   - Sec-Fetch-Site (every current browser sends it) "same-origin" passes, and so does
//     "none" (the user's own navigation: a typed URL, a bookmark); any other value
//     ("cross-site", "same-site") passes only when the Origin is trusted.
//   - Without Sec-Fetch-Site, a request without Origin passes (not a browser's
//     cross-origin request: browsers send Origin with every cross-origin POST and fetch),
//     and one with an Origin passes when the Origin is the dashboard's own, scheme, host
//     and port, or a trusted one. CrossOriginProtection compares the host only, which lets
//     a page of http://host post to https://host.
//
// The dashboard's own origin is Config.PublicOrigin when set; otherwise the request's
// scheme (https over TLS, or behind a proxy that sends X-Forwarded-Proto: https; a browser
// cannot add that header to a cross-origin request without a CORS preflight, which the
// dashboard never answers) and its Host.

// originCheck holds the origins the check compares with.
type originCheck struct {
	public  string          // Config.PublicOrigin, normalized; "" for the request's own
	trusted map[string]bool // Config.TrustedOrigins, normalized
}

// newOriginCheck validates the configured origins.
func newOriginCheck(public string, trusted []string) (*originCheck, error) {
	o := &originCheck{trusted: map[string]bool{}}
	if public != "" {
		p, err := parseOrigin(public)
		if err != nil {
			return nil, fmt.Errorf("dashboard: Config.PublicOrigin: %w", err)
		}
		o.public = p
	}
	for _, t := range trusted {
		p, err := parseOrigin(t)
		if err != nil {
			return nil, fmt.Errorf("dashboard: Config.TrustedOrigins: %w", err)
		}
		o.trusted[p] = true
	}
	return o, nil
}

// parseOrigin checks that s is an origin, scheme://host[:port], and returns it in lower
// case.
func parseOrigin(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return "", fmt.Errorf("%q is not an origin: want scheme://host[:port], such as https://ops.example.com", s)
	}
	return strings.ToLower(u.Scheme + "://" + u.Host), nil
}

// allows reports whether r may be served as coming from the dashboard's own pages (or a
// trusted origin, or no browser at all).
func (o *originCheck) allows(r *http.Request) bool {
	origin := strings.ToLower(r.Header.Get("Origin"))
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin", "none":
		return true
	case "":
		if origin == "" {
			return true
		}
		return origin == o.own(r) || o.trusted[origin]
	default:
		return o.trusted[origin]
	}
}

// own is the dashboard's origin for r.
func (o *originCheck) own(r *http.Request) string {
	if o.public != "" {
		return o.public
	}
	scheme := "http"
	if secureRequest(r) {
		scheme = "https"
	}
	return strings.ToLower(scheme + "://" + r.Host)
}

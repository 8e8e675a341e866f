package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/oklog/ulid/v2"
)

// TestConfirmTokensAreNotLogged: a path that holds a confirmation token is never logged in
// clear, whatever route it matched: requests that miss the link's route by a character
// (a doubled slash, a trailing slash, another method, another case, a token without its
// prefix on another path) are logged with the token's segment redacted, with or without a
// key.
func TestConfirmTokensAreNotLogged(t *testing.T) {
	t.Parallel()
	b := setupWith(t, Config{WriteLimit: Unlimited, ImportLimit: Unlimited, ImportConfirmAbove: 1})
	_, imp := b.do(t, http.MethodPost, "/imports", importBody(2, 0))
	link := linkPath(t, imp, "")
	token := link[strings.LastIndex(link, "/")+1:]
	secret := strings.TrimPrefix(token, confirmPrefix)
	id := imp["id"].(string)
	for _, tt := range []struct{ method, path string }{
		{"POST", "/" + link},
		{"POST", link + "/"},
		{"POST", "/imports/" + id + "/confirm//" + token},
		{"POST", "/imports/" + id + "/Confirm/" + token},
		{"POST", "/Imports/" + id + "/confirm/" + token},
		{"GET", link},
		{"DELETE", link},
		{"POST", "/imports/" + id + "/confirm/" + token[1:]},
		{"POST", "/imports/" + id + "/" + token},
		{"GET", "/bookmarks/" + secret},
		{"GET", "/" + secret[:40]},
		{"POST", "/imports/" + id + "/confirm/" + token + "/again"},
	} {
		for _, withKey := range []bool{false, true} {
			req := httptest.NewRequest(tt.method, tt.path, nil)
			if withKey {
				b.auth(req)
			}
			if rec := b.serve(req); rec.Code < 400 {
				t.Fatalf("%s %s = %d: only a refusal is expected here", tt.method, tt.path, rec.Code)
			}
		}
	}
	logs := b.logs.String()
	for _, s := range []string{token, secret, secret[:32], secret[len(secret)-32:]} {
		if strings.Contains(logs, s) {
			t.Fatalf("the log holds the confirmation token (%q):\n%s", s, logs)
		}
	}
	for _, want := range []string{`"path":"//imports/` + id + `/confirm/[redacted]"`, `"path":"/imports/` + id + `/Confirm/[redacted]"`,
		`"path":"/imports/` + id + `/[redacted]"`,
		`"path":"/bookmarks/[redacted]"`} {
		if !strings.Contains(logs, want) {
			t.Fatalf("no log line with %s:\n%s", want, logs)
		}
	}
}

// TestRedactPath: what redactPath replaces, and what it leaves.
func TestRedactPath(t *testing.T) {
	t.Parallel()
	token, _ := newConfirmToken()
	id := ulid.Make().String()
	for in, want := range map[string]string{
		"/bookmarks/" + id:                        "/bookmarks/" + id,
		"/imports/" + id + "/confirm":             "/imports/" + id + "/confirm",
		"/imports/" + id + "/confirm/x":           "/imports/" + id + "/confirm/[redacted]",
		"//imports/" + id + "/confirm/" + token:   "//imports/" + id + "/confirm/[redacted]",
		"/imports/" + id + "/CONFIRM/" + token:    "/imports/" + id + "/CONFIRM/[redacted]",
		"/x/" + token + "/y":                      "/x/[redacted]/y",
		"/x/bmc_short":                            "/x/[redacted]",
		"/x/" + token[len(confirmPrefix)+1:]:      "/x/[redacted]",
		"/events":                                 "/events",
		"/":                                       "/",
		"/tags/" + strings.Repeat("a", 31) + ".b": "/tags/" + strings.Repeat("a", 31) + ".b",
	} {
		if got := redactPath(in); got != want {
			t.Errorf("redactPath(%q) = %q, want %q", in, got, want)
		}
	}
}

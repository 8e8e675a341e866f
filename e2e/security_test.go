package e2e

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/oklog/ulid/v2"
)

// TestAPIKeys: the real binary refuses every endpoint but the probes without a valid key,
// with a 401 and a challenge; a key revoked with `bookmarks-api keys revoke` stops at once.
func TestAPIKeys(t *testing.T) {
	for _, path := range []string{"/healthz", "/readyz"} {
		if resp, err := callAs("", "GET", path, nil, nil); err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %s without a key: %v %v", path, resp, err)
		}
	}
	key, err := newKey(t.Context(), "revoked-in-e2e")
	if err != nil {
		t.Fatal(err)
	}
	mustCallAs(t, key, "GET", "/bookmarks", nil, 200)
	if _, err := sys.api.Command(t.Context(), "keys", "revoke", key); err != nil {
		t.Fatal(err)
	}
	id := ulid.Make().String()
	for _, k := range []string{"", "not-a-key", key, sys.key[:len(sys.key)-1] + "x"} {
		for _, r := range []struct{ method, path string }{
			{"GET", "/bookmarks"}, {"POST", "/bookmarks"}, {"GET", "/bookmarks/" + id}, {"POST", "/bookmarks/" + id + "/refetch"},
			{"DELETE", "/bookmarks/" + id}, {"POST", "/imports"}, {"GET", "/imports/" + id}, {"DELETE", "/imports/" + id},
			{"POST", "/imports/" + id + "/confirm"}, {"GET", "/tags"},
			{"POST", "/tags/rebuild"}, {"GET", "/nowhere"},
		} {
			var problem struct {
				Error struct {
					Code string `json:"code"`
				} `json:"error"`
			}
			resp, err := callAs(k, r.method, r.path, map[string]any{"url": sys.pageURL + "/page/never"}, &problem)
			if err != nil || resp.StatusCode != 401 || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") ||
				problem.Error.Code != "unauthorized" {
				t.Fatalf("%s %s with key %.8q: %v %v %+v, want 401 with a Bearer challenge", r.method, r.path, k, resp, err, problem)
			}
		}
	}
	if n := sys.pages.count("/page/never"); n != 0 {
		t.Fatalf("an unauthenticated create was fetched %d times", n)
	}
}

// TestWriteRateLimited: with the default limits (a burst of 20 writes, then 10 per
// second), a key that writes in a tight loop gets 429 with a Retry-After; reads and
// other keys go on.
func TestWriteRateLimited(t *testing.T) {
	key, err := newKey(t.Context(), "hammer")
	if err != nil {
		t.Fatal(err)
	}
	path := "/bookmarks/" + ulid.Make().String() + "/refetch" // a 404: the limiter counts it all the same
	var limited *http.Response
	for i := 0; i < 500 && limited == nil; i++ {
		resp, err := callAs(key, "POST", path, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		switch resp.StatusCode {
		case 404:
		case 429:
			limited = resp
		default:
			t.Fatalf("refetch %d: %d", i, resp.StatusCode)
		}
	}
	if limited == nil {
		t.Fatal("500 writes in a tight loop were never limited")
	}
	if s, err := strconv.Atoi(limited.Header.Get("Retry-After")); err != nil || s < 1 {
		t.Fatalf("Retry-After %q", limited.Header.Get("Retry-After"))
	}
	mustCallAs(t, key, "GET", "/bookmarks?limit=1", nil, 200)
	mustCall(t, "POST", path, nil, 404, nil) // the suite's key has its own bucket
}

// TestRequestIDIsSanitized: the real server echoes a short safe X-Request-ID and replaces
// anything else.
func TestRequestIDIsSanitized(t *testing.T) {
	safe := regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)
	for sent, echoed := range map[string]bool{"trace-42.a_b": true, strings.Repeat("x", 1000): false, "a b<c>": false} {
		req, _ := http.NewRequest("GET", sys.apiURL+"/bookmarks?limit=1", nil)
		req.Header.Set("Authorization", "Bearer "+sys.key)
		req.Header.Set("X-Request-ID", sent)
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		got := resp.Header.Get("X-Request-ID")
		if echoed && got != sent || !echoed && (got == sent || !safe.MatchString(got)) {
			t.Fatalf("sent %.20q…, got %q", sent, got)
		}
	}
}

func mustCallAs(t *testing.T, key, method, path string, body any, want int) {
	t.Helper()
	resp, err := callAs(key, method, path, body, nil)
	if err != nil || resp.StatusCode != want {
		t.Fatalf("%s %s = %v, %v; want %d", method, path, resp, err, want)
	}
}

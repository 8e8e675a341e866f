// Package telemetrytest helps the services' tests read their /metrics endpoints.
package telemetrytest

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Get returns the status and body of GET url, or fails the test.
func Get(tb testing.TB, url string) (int, string) {
	tb.Helper()
	resp, err := http.Get(url)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// AwaitScrape scrapes url until it answers 200 with every string of want in its body,
// and returns that body; it fails the test, showing the last body, after d.
func AwaitScrape(tb testing.TB, url string, d time.Duration, want ...string) string {
	tb.Helper()
	deadline := time.Now().Add(d)
	for {
		code, body := Get(tb, url)
		missing := ""
		for _, w := range want {
			if !strings.Contains(body, w) {
				missing = w
				break
			}
		}
		if code == http.StatusOK && missing == "" {
			return body
		}
		if time.Now().After(deadline) {
			tb.Fatalf("GET %s (%d) has no %q after %v:\n%s", url, code, missing, d, body)
		}
		time.Sleep(50 * time.Millisecond) // polling interval of a condition with a deadline
	}
}

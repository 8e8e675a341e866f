package fetch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/venturi-dev/bookmarks/bookmarks-worker/internal/fetch/fetchtest"
)

// testServer is a loopback page server and a Fetcher allowed to reach exactly it.
func testServer(t *testing.T, h http.Handler, cfg Config) (*httptest.Server, *Fetcher) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	port, _ := strconv.Atoi(u.Port())
	cfg.AllowLoopbackPort = uint16(port)
	return srv, New(cfg)
}

func requireReason(t *testing.T, err error, reason string, permanent bool) *Error {
	t.Helper()
	var fe *Error
	if !errors.As(err, &fe) {
		t.Fatalf("err = %v (%T), want *fetch.Error %s", err, err, reason)
	}
	if fe.Reason != reason || fe.Permanent != permanent {
		t.Fatalf("err = %v (reason %s, permanent %v), want reason %s, permanent %v", fe, fe.Reason, fe.Permanent, reason, permanent)
	}
	return fe
}

func TestFetchHTML(t *testing.T) {
	t.Parallel()
	srv, f := testServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(`<html><head><title> Hello  page </title><style>p{}</style></head>
			<body><h1>Heading</h1><script>alert(1)</script><p>Some   text.</p></body></html>`))
	}), Config{})
	res, err := f.Fetch(t.Context(), srv.URL+"/page")
	if err != nil {
		t.Fatal(err)
	}
	if res.Title != "Hello page" || res.Text != "Heading Some text." || res.Status != 200 ||
		res.ContentType != "text/html" || res.FinalURL != srv.URL+"/page" || res.Bytes == 0 {
		t.Fatalf("result = %+v", res)
	}
}

func TestFetchStatusClassification(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		status    int
		reason    string
		permanent bool
	}{
		{410, ReasonHTTPStatus, true},
		{404, ReasonHTTPStatus, true},
		{429, ReasonHTTPStatus, false},
		{408, ReasonHTTPStatus, false},
		{500, ReasonHTTPStatus, false},
		{503, ReasonHTTPStatus, false},
	} {
		t.Run(strconv.Itoa(tt.status), func(t *testing.T) {
			t.Parallel()
			srv, f := testServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.status)
			}), Config{})
			_, err := f.Fetch(t.Context(), srv.URL)
			if fe := requireReason(t, err, tt.reason, tt.permanent); fe.Status != tt.status {
				t.Fatalf("status = %d", fe.Status)
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		h    string
		want time.Duration
	}{
		{"", 0},
		{"120", 2 * time.Minute},
		{" 7 ", 7 * time.Second},
		{"0", 0},
		{"-5", 0},
		{"1.5", 0},
		{"soon", 0},
		{"99999999999", 30 * 24 * time.Hour},
		{"999999999999999999999999", 30 * 24 * time.Hour},
		{"Sun, 01 Mar 2026 12:30:00 GMT", 30 * time.Minute},
		{"Sunday, 01-Mar-26 12:00:10 GMT", 10 * time.Second}, // RFC 850
		{"Sun Mar  1 13:00:00 2026", time.Hour},              // asctime
		{"Sun, 01 Mar 2026 11:00:00 GMT", 0},                 // in the past
		{"Sun, 01 Mar 2099 12:00:00 GMT", 30 * 24 * time.Hour},
	} {
		if got := RetryAfter(tt.h, now); got != tt.want {
			t.Errorf("RetryAfter(%q) = %v, want %v", tt.h, got, tt.want)
		}
	}
}

// TestFetchRetryAfter: a 429 or 503 carries its Retry-After wait in the error; other
// statuses ignore the header.
func TestFetchRetryAfter(t *testing.T) {
	t.Parallel()
	date := time.Now().Add(10 * time.Minute).UTC().Format(http.TimeFormat)
	srv, f := testServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status, _ := strconv.Atoi(r.URL.Query().Get("status"))
		if h := r.URL.Query().Get("after"); h != "" {
			w.Header().Set("Retry-After", h)
		}
		w.WriteHeader(status)
	}), Config{})
	for _, tt := range []struct {
		status   int
		after    string
		min, max time.Duration
	}{
		{429, "120", 2 * time.Minute, 2 * time.Minute},
		{503, "30", 30 * time.Second, 30 * time.Second},
		{503, date, 9 * time.Minute, 10 * time.Minute},
		{429, "", 0, 0},
		{429, "later", 0, 0},
		{500, "120", 0, 0},
		{408, "120", 0, 0},
	} {
		q := url.Values{"status": {strconv.Itoa(tt.status)}, "after": {tt.after}}
		_, err := f.Fetch(t.Context(), srv.URL+"/?"+q.Encode())
		var fe *Error
		if !errors.As(err, &fe) || fe.Status != tt.status || fe.Permanent {
			t.Fatalf("%d %q: err = %v", tt.status, tt.after, err)
		}
		if fe.RetryAfter < tt.min || fe.RetryAfter > tt.max {
			t.Errorf("%d Retry-After %q: RetryAfter = %v, want %v..%v", tt.status, tt.after, fe.RetryAfter, tt.min, tt.max)
		}
	}
}

func TestFetchLimits(t *testing.T) {
	t.Parallel()
	srv, f := testServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write([]byte(strings.Repeat("x", 2048)))
		case "/image":
			w.Header().Set("Content-Type", "image/png")
			_, _ = w.Write([]byte("png"))
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		case "/hang":
			<-r.Context().Done()
		}
	}), Config{MaxBytes: 1024, Timeout: 300 * time.Millisecond})
	_, err := f.Fetch(t.Context(), srv.URL+"/big")
	requireReason(t, err, ReasonTooLarge, true)
	_, err = f.Fetch(t.Context(), srv.URL+"/image")
	requireReason(t, err, ReasonBadContent, true)
	_, err = f.Fetch(t.Context(), srv.URL+"/loop")
	requireReason(t, err, ReasonTooManyRedirects, true)
	_, err = f.Fetch(t.Context(), srv.URL+"/hang")
	requireReason(t, err, ReasonTimeout, false)
}

// TestFetchRefusesSpecialAddresses dials nothing but loopback: every refused address is
// refused by the dial-time guard before a packet is sent.
func TestFetchRefusesSpecialAddresses(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv, f := testServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
	}), Config{StaticHosts: map[string]netip.Addr{
		"metadata.test": netip.MustParseAddr("169.254.169.254"),
		"private.test":  netip.MustParseAddr("10.0.0.1"),
	}})
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	for _, target := range []string{
		"http://127.0.0.1/",
		"http://127.0.0.2:" + port + "/", // only 127.0.0.1 on the allowed port is the exception
		"http://[::1]:" + port + "/",
		"http://localhost/",
		"http://169.254.169.254/latest/meta-data/",
		"http://10.0.0.1/",
		"http://192.168.1.1/",
		"http://100.64.0.1/",
		"http://0.0.0.0/",
		"http://2130706433/", // 127.0.0.1 in decimal
		"http://[::ffff:169.254.169.254]/",
		"http://[fd00::1]/",
		"http://metadata.test/",
		"http://private.test/",
	} {
		t.Run(target, func(t *testing.T) {
			t.Parallel()
			_, err := f.Fetch(t.Context(), target)
			var fe *Error
			if !errors.As(err, &fe) || !fe.Permanent || (fe.Reason != ReasonBlocked && fe.Reason != ReasonDNS) {
				t.Fatalf("fetch %s: %v, want a permanent refusal", target, err)
			}
			// Through a redirect from an allowed page, too.
			_, err = f.Fetch(t.Context(), srv.URL+"/?to="+url.QueryEscape(target))
			if !errors.As(err, &fe) || !fe.Permanent {
				t.Fatalf("redirect to %s: %v, want a permanent refusal", target, err)
			}
		})
	}
	t.Cleanup(func() { // after the parallel subtests
		if hits.Load() == 0 {
			t.Error("the redirecting page was never reached")
		}
	})
}

func TestFetchRejectsBadURLs(t *testing.T) {
	t.Parallel()
	f := New(Config{})
	for _, raw := range []string{"ftp://example.com/", "file:///etc/passwd", "http://user:pw@example.com/", "/relative", "http://"} {
		_, err := f.Fetch(context.Background(), raw)
		requireReason(t, err, ReasonBadURL, true)
	}
}

func TestDefaultAllowsNoLoopback(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	port, _ := strconv.Atoi(u.Port())
	f := New(Config{Ports: []uint16{80, 443, uint16(port)}})
	_, err := f.Fetch(t.Context(), srv.URL)
	requireReason(t, err, ReasonBlocked, true)
	if hits.Load() != 0 {
		t.Fatal("the loopback server was reached")
	}
}

// TestFetchClassifiesTransportFailures: a name that does not resolve, a refused
// connection and an untrusted certificate each get their reason code, and the Summary
// users see carries none of the addresses the underlying error names.
func TestFetchClassifiesTransportFailures(t *testing.T) {
	t.Parallel()
	refusing := fetchtest.RefusingPort(t)
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(tlsSrv.Close)
	tu, _ := url.Parse(tlsSrv.URL)
	tlsPort, _ := strconv.Atoi(tu.Port())
	for _, tt := range []struct {
		name, url string
		cfg       Config
		reason    string
		permanent bool
	}{
		{"unknown name", "http://nohost.fetch.test/", Config{Resolver: fetchtest.NXDomainResolver(t)}, ReasonDNS, true},
		{"refused connection", fmt.Sprintf("http://127.0.0.1:%d/", refusing), Config{AllowLoopbackPort: refusing}, ReasonConnect, false},
		{"untrusted certificate", tlsSrv.URL, Config{AllowLoopbackPort: uint16(tlsPort)}, ReasonTLS, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(tt.cfg).Fetch(t.Context(), tt.url)
			fe := requireReason(t, err, tt.reason, tt.permanent)
			if fe.Summary() != tt.reason {
				t.Fatalf("Summary() = %q, want %q", fe.Summary(), tt.reason)
			}
			if fe.Err == nil || !strings.HasPrefix(fe.Error(), tt.reason+": ") {
				t.Fatalf("Error() = %q, want the code and the underlying error (for logs)", fe.Error())
			}
		})
	}
}

func TestErrorSummaryHasTheStatus(t *testing.T) {
	t.Parallel()
	fe := &Error{Reason: ReasonHTTPStatus, Status: 503, Err: errors.New("detail")}
	if fe.Summary() != "http_status 503" || fe.Error() != "http_status 503: detail" {
		t.Fatalf("Summary %q, Error %q", fe.Summary(), fe.Error())
	}
	// The status of a page refused for its body is on the bookmark, not in the summary.
	fe = &Error{Reason: ReasonTooLarge, Status: 200, Err: errors.New("body larger than 1024 bytes")}
	if fe.Summary() != "too_large" {
		t.Fatalf("Summary %q", fe.Summary())
	}
}

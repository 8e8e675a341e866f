// Package fetch is the worker's HTTP client for user-supplied URLs, hardened against
// server-side request forgery.
//
// Every connection's resolved address is checked at dial time (net.Dialer.Control) by an
// ssrf.Guardian: loopback, private, link-local, cloud-metadata, multicast and every other
// range of the IANA special-purpose registries are refused, as is any port but 80 and 443
// unless configured. Because the check runs on the address actually dialled, on every
// redirect hop too, DNS rebinding and IP-literal tricks (decimal, IPv4-mapped IPv6, ...)
// gain nothing. The transport never uses a proxy from the environment (a proxy would be
// dialled instead of the target and defeat the check).
package fetch

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"code.dny.dev/ssrf"
)

// Config configures a Fetcher. Zero fields take the documented defaults.
type Config struct {
	// Timeout bounds a whole fetch: connect, redirects, headers and body. Default 15s.
	Timeout time.Duration
	// MaxBytes caps the (decompressed) body; a larger body fails permanently. Default 5 MiB.
	MaxBytes int64
	// MaxRedirects is the most redirects followed. Default 5.
	MaxRedirects int
	// Ports are the destination ports allowed. Default 80 and 443.
	Ports []uint16
	// MaxTextBytes caps the text content kept from a page. Default 64 KiB.
	MaxTextBytes int
	// UserAgent is sent with every request. Default "bookmarks-fetcher/1".
	UserAgent string

	// AllowLoopbackPort, when non-zero, allows connections to 127.0.0.1 on exactly this port.
	// It exists for end-to-end tests, whose pages come from a local server; never set it in
	// production. Default 0: no loopback address is reachable.
	AllowLoopbackPort uint16
	// StaticHosts resolves the given host names to fixed addresses instead of asking DNS, the
	// way /etc/hosts would. Tests use it to point a name at a refused address; the guard
	// still checks the address at dial time. Default none.
	StaticHosts map[string]netip.Addr
	// Resolver looks host names up. Tests point it at a local DNS server (see
	// fetchtest.NXDomainResolver). Default nil: net.DefaultResolver.
	Resolver *net.Resolver
}

func (c Config) withDefaults() Config {
	if c.Timeout <= 0 {
		c.Timeout = 15 * time.Second
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = 5 << 20
	}
	if c.MaxRedirects <= 0 {
		c.MaxRedirects = 5
	}
	if len(c.Ports) == 0 {
		c.Ports = []uint16{80, 443}
	}
	if c.MaxTextBytes <= 0 {
		c.MaxTextBytes = 64 << 10
	}
	if c.UserAgent == "" {
		c.UserAgent = "bookmarks-fetcher/1"
	}
	return c
}

// Result is a successful fetch.
type Result struct {
	Status      int    `json:"status"`
	FinalURL    string `json:"final_url"`
	ContentType string `json:"content_type"`
	Bytes       int64  `json:"bytes"`
	Title       string `json:"-"`
	Text        string `json:"-"`
}

// Reason codes: why a fetch failed, as users see it. The worker stores the code (and the
// HTTP status, when a response arrived) on the bookmark and in the job's journal, never
// the underlying error: a dial or DNS error names internal addresses (the resolver's, a
// refused IP), so its text goes to the worker's log only.
const (
	ReasonBadURL           = "bad_url"            // not an absolute http(s) URL without credentials
	ReasonBlocked          = "blocked_address"    // the address, port or network is not allowed
	ReasonDNS              = "dns"                // the host name did not resolve
	ReasonConnect          = "connect"            // the connection was refused or the host unreachable
	ReasonTimeout          = "timeout"            // no answer in time (connect, TLS, headers or body)
	ReasonTLS              = "tls"                // TLS handshake or certificate failure
	ReasonTooManyRedirects = "too_many_redirects" // redirect limit reached
	ReasonHTTPStatus       = "http_status"        // a non-2xx status (Error.Status says which)
	ReasonTooLarge         = "too_large"          // body over MaxBytes
	ReasonBadContent       = "bad_content"        // not HTML or plain text
	ReasonNetwork          = "network"            // any other transport failure (reset, protocol error)
)

// Error is a failed fetch, classified for the retry policy.
type Error struct {
	// Reason is one of the Reason* codes.
	Reason string
	// Status is the HTTP status, when a response arrived.
	Status int
	// Permanent reports that retrying cannot help (a refused address, a 4xx but 408 and
	// 429, an unknown host, ...).
	Permanent bool
	// Err is the underlying error. Its text can name internal addresses: log it, never
	// show it to users (see [Error.Summary]).
	Err error
	// RetryAfter is the wait a 429 or 503 response asked for in its Retry-After header
	// (delay-seconds or an HTTP-date); zero when the header is absent, unparsable, or
	// asks for no wait.
	RetryAfter time.Duration
}

// Summary is the failure as users may see it: the reason code, followed by the status for
// ReasonHTTPStatus ("dns", "too_large", "http_status 503"). It never includes the
// underlying error.
func (e *Error) Summary() string {
	if e.Reason == ReasonHTTPStatus && e.Status != 0 {
		return fmt.Sprintf("%s %d", e.Reason, e.Status)
	}
	return e.Reason
}

// Error is the Summary followed by the underlying error, for logs.
func (e *Error) Error() string {
	if e.Err != nil {
		return e.Summary() + ": " + e.Err.Error()
	}
	return e.Summary()
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Fetcher fetches pages. It is safe for concurrent use.
type Fetcher struct {
	cfg    Config
	client *http.Client
}

// New returns a Fetcher with its own transport, guarded as the package describes.
func New(cfg Config) *Fetcher {
	cfg = cfg.withDefaults()
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second, Control: dialControl(cfg),
		Resolver: cfg.Resolver}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if host, port, err := net.SplitHostPort(addr); err == nil {
			if ip, ok := cfg.StaticHosts[strings.ToLower(host)]; ok {
				addr = net.JoinHostPort(ip.String(), port)
			}
		}
		return dialer.DialContext(ctx, network, addr)
	}
	transport := &http.Transport{
		Proxy:                  nil, // never from the environment: the guard must see the target
		DialContext:            dial,
		TLSHandshakeTimeout:    5 * time.Second,
		ResponseHeaderTimeout:  10 * time.Second,
		MaxResponseHeaderBytes: 64 << 10,
		IdleConnTimeout:        30 * time.Second,
		MaxIdleConnsPerHost:    2,
		ForceAttemptHTTP2:      true,
	}
	client := &http.Client{
		Transport: transport,
		Timeout:   cfg.Timeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > cfg.MaxRedirects {
				return &Error{Reason: ReasonTooManyRedirects, Permanent: true,
					Err: fmt.Errorf("more than %d redirects", cfg.MaxRedirects)}
			}
			if err := checkURL(req.URL); err != nil {
				return err
			}
			return nil
		},
	}
	return &Fetcher{cfg: cfg, client: client}
}

// dialControl returns the dial-time guard of a Fetcher configured by cfg (with defaults
// applied), for net.Dialer.Control: it is called with the network ("tcp4", "tcp6") and the
// resolved "ip:port" of every connection before it connects, and refuses with an error
// wrapping one of the ssrf.Err* values. It performs no I/O, so tests call it directly.
func dialControl(cfg Config) func(network, address string, c syscall.RawConn) error {
	guard := ssrf.New(ssrf.WithPorts(cfg.Ports...))
	return func(network, address string, c syscall.RawConn) error {
		if cfg.AllowLoopbackPort != 0 {
			if ap, err := netip.ParseAddrPort(address); err == nil &&
				ap.Addr() == netip.AddrFrom4([4]byte{127, 0, 0, 1}) && ap.Port() == cfg.AllowLoopbackPort {
				return nil
			}
		}
		return guard.Safe(network, address, c)
	}
}

// CheckURL reports whether raw is a URL the fetcher would try: absolute http or https,
// with a host and without credentials. The dial-time guard is the real control; this is
// early, friendly validation.
func CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return &Error{Reason: ReasonBadURL, Permanent: true, Err: err}
	}
	return checkURL(u)
}

func checkURL(u *url.URL) error {
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return &Error{Reason: ReasonBadURL, Permanent: true, Err: fmt.Errorf("scheme %q is not http or https", u.Scheme)}
	case u.Host == "" || u.Hostname() == "":
		return &Error{Reason: ReasonBadURL, Permanent: true, Err: errors.New("no host")}
	case u.User != nil:
		return &Error{Reason: ReasonBadURL, Permanent: true, Err: errors.New("credentials in URLs are not sent")}
	case nonCanonicalIPv4(u.Hostname()):
		return &Error{Reason: ReasonBlocked, Permanent: true,
			Err: fmt.Errorf("host %q is an IPv4 address in a non-canonical form; only dotted quads are dialled", u.Hostname())}
	}
	return nil
}

// nonCanonicalIPv4 reports whether host "ends in a number" as the WHATWG URL standard puts
// it (its last label is all decimal digits, or 0x and hex digits) without being a canonical
// IP literal. Browsers and inet_aton-style resolvers read such hosts as IPv4 addresses in
// decimal, octal, hex or shorthand (2130706433, 0x7f.1, 017700000001 and 127.1 are all
// 127.0.0.1), while Go's resolver sends them to DNS. Refusing them outright means what is
// dialled never depends on the resolver, and no such name leaks to DNS. A canonical dotted
// quad passes here and is judged by the dial-time guard like any resolved address.
func nonCanonicalIPv4(host string) bool {
	if _, err := netip.ParseAddr(host); err == nil {
		return false
	}
	last := host[strings.LastIndexByte(strings.TrimSuffix(host, "."), '.')+1:]
	last = strings.TrimSuffix(last, ".")
	if last == "" {
		return false
	}
	digits := "0123456789"
	if len(last) > 2 && (last[:2] == "0x" || last[:2] == "0X") {
		last, digits = last[2:], "0123456789abcdefABCDEF"
	} else if last == "0x" || last == "0X" {
		return true
	}
	return strings.Trim(last, digits) == ""
}

// Fetch GETs raw and returns the page, or an *Error saying why not and whether retrying
// can help.
func (f *Fetcher) Fetch(ctx context.Context, raw string) (*Result, error) {
	if err := CheckURL(raw); err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	if err != nil {
		return nil, &Error{Reason: ReasonBadURL, Permanent: true, Err: err}
	}
	req.Header.Set("User-Agent", f.cfg.UserAgent)
	req.Header.Set("Accept", "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.1")
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, classify(err)
	}
	defer resp.Body.Close()
	final := resp.Request.URL.String()
	if fe := statusError(resp.StatusCode); fe != nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // let the connection be reused
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
			fe.RetryAfter = RetryAfter(resp.Header.Get("Retry-After"), time.Now())
		}
		return nil, fe
	}
	mediaType, params, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch mediaType {
	case "text/html", "application/xhtml+xml", "text/plain":
	default:
		return nil, &Error{Reason: ReasonBadContent, Status: resp.StatusCode, Permanent: true,
			Err: fmt.Errorf("content type %q", mediaType)}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, f.cfg.MaxBytes+1))
	if err != nil {
		return nil, classify(err)
	}
	if int64(len(body)) > f.cfg.MaxBytes {
		return nil, &Error{Reason: ReasonTooLarge, Status: resp.StatusCode, Permanent: true,
			Err: fmt.Errorf("body larger than %d bytes", f.cfg.MaxBytes)}
	}
	_ = params // charset: pages are read as UTF-8; invalid sequences are replaced
	res := &Result{Status: resp.StatusCode, FinalURL: final, ContentType: mediaType, Bytes: int64(len(body))}
	if mediaType == "text/plain" {
		res.Text = clean(string(body), f.cfg.MaxTextBytes)
	} else {
		title, text := extractHTML(bytes.NewReader(body))
		res.Title, res.Text = clean(title, 1024), clean(text, f.cfg.MaxTextBytes)
	}
	return res, nil
}

func statusError(code int) *Error {
	switch {
	case code >= 200 && code < 300:
		return nil
	case code == http.StatusTooManyRequests || code == http.StatusRequestTimeout || code >= 500:
		return &Error{Reason: ReasonHTTPStatus, Status: code}
	default: // 410, other 4xx, and 1xx/3xx that were not followed
		return &Error{Reason: ReasonHTTPStatus, Status: code, Permanent: true}
	}
}

// classify turns a transport error into an *Error. The order matters: a guard refusal and
// a failed lookup arrive as dial errors too, and a TLS handshake timeout is a timeout.
func classify(err error) *Error {
	var fe *Error
	if errors.As(err, &fe) {
		return fe
	}
	if errors.Is(err, ssrf.ErrProhibitedIP) || errors.Is(err, ssrf.ErrProhibitedPort) ||
		errors.Is(err, ssrf.ErrProhibitedNetwork) || errors.Is(err, ssrf.ErrInvalidHostPort) {
		return &Error{Reason: ReasonBlocked, Permanent: true, Err: unwrapDial(err)}
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		// An unknown name is final; a resolver that failed or timed out may answer later.
		return &Error{Reason: ReasonDNS, Permanent: dnsErr.IsNotFound, Err: dnsErr}
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return &Error{Reason: ReasonTimeout, Err: err}
	}
	if isTLS(err) {
		return &Error{Reason: ReasonTLS, Err: err}
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return &Error{Reason: ReasonConnect, Err: err}
	}
	return &Error{Reason: ReasonNetwork, Err: err}
}

// isTLS reports whether err is a TLS handshake or certificate failure.
func isTLS(err error) bool {
	var (
		verify   *tls.CertificateVerificationError
		alert    tls.AlertError
		record   tls.RecordHeaderError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
	)
	return errors.As(err, &verify) || errors.As(err, &alert) || errors.As(err, &record) ||
		errors.As(err, &unknown) || errors.As(err, &hostname) || errors.As(err, &invalid) ||
		strings.Contains(err.Error(), "tls: ")
}

// unwrapDial drops the url.Error and net.OpError layers around a guard refusal, keeping
// the guard's own message ("prohibited IP address: 10.0.0.1 is not a permitted ...").
func unwrapDial(err error) error {
	for e := err; e != nil; e = errors.Unwrap(e) {
		switch errors.Unwrap(e) {
		case ssrf.ErrProhibitedIP, ssrf.ErrProhibitedPort, ssrf.ErrProhibitedNetwork, ssrf.ErrInvalidHostPort:
			return e
		}
	}
	return err
}

// maxRetryAfter bounds what RetryAfter returns, so that absurd values cannot overflow.
// Callers apply their own, smaller cap.
const maxRetryAfter = 30 * 24 * time.Hour

// RetryAfter parses a Retry-After header value (RFC 9110 section 10.2.3): delay-seconds or
// an HTTP-date, read relative to now. It returns zero when h is empty or unparsable, or
// asks for no wait (0 seconds, a date not after now), and at most 30 days.
func RetryAfter(h string, now time.Time) time.Duration {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0
	}
	if s, err := strconv.ParseUint(h, 10, 64); err == nil {
		if s > uint64(maxRetryAfter/time.Second) {
			return maxRetryAfter
		}
		return time.Duration(s) * time.Second
	}
	if strings.Trim(h, "0123456789") == "" {
		return maxRetryAfter // all digits but too large for uint64
	}
	if t, err := http.ParseTime(h); err == nil && t.After(now) {
		return min(t.Sub(now), maxRetryAfter)
	}
	return 0
}

// clean makes s storable: valid UTF-8, no NUL, whitespace collapsed, at most max bytes.
func clean(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "")
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > max {
		s = s[:max]
		for len(s) > 0 && !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
	}
	return s
}

package fetch

// Bad inputs that reach the fetcher, and the answer to each. The API accepts some URLs that
// only the fetcher can judge (it does not resolve names or judge addresses); the rows below
// are what the worker does with them. The API's own table is
// bookmarks-api/internal/httpapi/bad_input_test.go; the job-level rows (unknown kind,
// undecodable carry) are in ../handlers/bad_input_test.go.
//
//	row                                        answer
//	http://[::1]/                              refused at dial time: the guard's check says
//	                                           ssrf.ErrProhibitedIP for tcp6 [::1]:80; Fetch
//	                                           returns reason "blocked_address", permanent (the socket
//	                                           is refused before connect; loopback only)
//	http://[::1]:8080/, http://[::ffff:127.0.0.1]/  blocked_address, permanent (guard)
//	http://2130706433/ (127.0.0.1 in decimal)  blocked_address, permanent, before any DNS lookup: a host
//	                                           ending in a number that is not a dotted quad is
//	                                           refused; and the address inet_aton-style
//	                                           resolvers make of it, 127.0.0.1, is refused by
//	                                           the guard's check
//	http://0x7f000001/, http://0x7f.1/,        blocked_address, permanent (same rule: hex, shorthand,
//	http://017700000001/, http://127.1/,       octal, trailing dot, non-canonical octets)
//	http://127.0.0.1./, http://127.000.000.001/
//	http://3232235777/ (192.168.1.1)           blocked_address, permanent
//	http://user:pw@example.com/                bad_url, permanent (credentials are not sent)
//	file:///etc/passwd                         bad_url, permanent
//	gopher://127.0.0.1:70/_GET                 bad_url, permanent
//	a host whose last label is not a number    left to the resolver and the guard's check
//	(example.com, 123.example)                 (TestNonCanonicalIPv4 tests the rule only)
//
// Nothing here sends a packet anywhere but loopback: refused URLs fail before a lookup or at
// the dial-time check, which runs before connect.

import (
	"errors"
	"net/netip"
	"strconv"
	"testing"

	"code.dny.dev/ssrf"
)

func TestBadInputFetchRefusals(t *testing.T) {
	t.Parallel()
	f := New(Config{}) // production defaults: no loopback exception, ports 80 and 443
	for _, tt := range []struct {
		url    string
		reason string
	}{
		{"http://[::1]/", ReasonBlocked},
		{"http://[::1]:8080/", ReasonBlocked},
		{"http://[::ffff:127.0.0.1]/", ReasonBlocked},
		{"http://2130706433/", ReasonBlocked},
		{"http://0x7f000001/", ReasonBlocked},
		{"http://0x7f.1/", ReasonBlocked},
		{"http://017700000001/", ReasonBlocked},
		{"http://127.1/", ReasonBlocked},
		{"http://127.0.0.1./", ReasonBlocked},
		{"http://127.000.000.001/", ReasonBlocked},
		{"http://3232235777/", ReasonBlocked},
		{"http://user:pw@example.com/", ReasonBadURL},
		{"file:///etc/passwd", ReasonBadURL},
		{"gopher://127.0.0.1:70/_GET", ReasonBadURL},
	} {
		t.Run(tt.url, func(t *testing.T) {
			t.Parallel()
			_, err := f.Fetch(t.Context(), tt.url)
			requireReason(t, err, tt.reason, true)
		})
	}
}

// TestBadInputGuardCheck tests the guard's check itself for the rows' addresses, the way
// the dialer calls it after resolving: no socket, no packet.
func TestBadInputGuardCheck(t *testing.T) {
	t.Parallel()
	control := defaultControl()
	for _, tt := range []struct{ network, address string }{
		{"tcp6", "[::1]:80"},
		{"tcp6", "[::1]:443"},
		{"tcp6", "[::ffff:127.0.0.1]:80"},
		{"tcp4", "127.0.0.1:80"}, // what a resolver makes of 2130706433, 0x7f.1, 127.1, ...
		{"tcp4", "192.168.1.1:80"},
		{"tcp4", "169.254.169.254:80"},
		{"tcp6", "[fd00:ec2::254]:80"},
	} {
		if err := control(tt.network, tt.address); !errors.Is(err, ssrf.ErrProhibitedIP) {
			t.Errorf("guard(%s, %s) = %v, want ssrf.ErrProhibitedIP", tt.network, tt.address, err)
		}
	}
	// 2130706433 is 127.0.0.1: the number the resolver would read is what the guard sees.
	n, _ := strconv.ParseUint("2130706433", 10, 32)
	a := netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
	if a != netip.MustParseAddr("127.0.0.1") {
		t.Fatalf("2130706433 = %s", a)
	}
	if err := control("tcp4", netip.AddrPortFrom(a, 80).String()); !errors.Is(err, ssrf.ErrProhibitedIP) {
		t.Errorf("guard(127.0.0.1:80) = %v", err)
	}
}

func TestNonCanonicalIPv4(t *testing.T) {
	t.Parallel()
	for host, want := range map[string]bool{
		"2130706433": true, "0x7f000001": true, "0X7F.1": true, "017700000001": true, "127.1": true,
		"127.0.0.1.": true, "127.000.000.001": true, "1.2.3.4.": true, "a.0x": true, "example.123": true,
		"127.0.0.1": false, "::1": false, "::ffff:127.0.0.1": false, "example.com": false, "123.example": false,
		"0xg": false, "": false, "localhost": false, "1e3": false, "example.com.": false,
	} {
		if got := nonCanonicalIPv4(host); got != want {
			t.Errorf("nonCanonicalIPv4(%q) = %v, want %v", host, got, want)
		}
	}
}

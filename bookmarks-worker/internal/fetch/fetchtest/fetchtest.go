// Package fetchtest helps tests make the fetcher fail the way the internet does, without
// the internet: a name that does not resolve and a port that refuses connections, both on
// loopback.
package fetchtest

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"testing"
)

// NXDomainResolver returns a resolver whose every query goes to a DNS server on loopback
// that answers "no such domain" (NXDOMAIN) to everything. The server stops when the test
// ends. The lookup error names the resolver of the machine's resolv.conf, as a real
// failure would: that is the internal address the worker must not show to users.
func NXDomainResolver(t testing.TB) *net.Resolver {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("fetchtest: listen: %v", err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	go serveNXDomain(pc)
	addr := pc.LocalAddr().String()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp4", addr)
	}}
}

// serveNXDomain answers every DNS query read from pc with NXDOMAIN, echoing the question,
// until pc is closed.
func serveNXDomain(pc net.PacketConn) {
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil || n < 12 {
			continue
		}
		q := buf[:n]
		end := 12 // the question: one name (labels up to a zero byte), then type and class
		for end < len(q) && q[end] != 0 {
			end += int(q[end]) + 1
		}
		end += 5
		if end > len(q) {
			continue
		}
		resp := make([]byte, end)
		copy(resp, q[:end])
		flags := binary.BigEndian.Uint16(q[2:4])
		// QR (response), the query's opcode and RD, RA (recursion available), RCODE 3.
		binary.BigEndian.PutUint16(resp[2:4], 0x8000|flags&0x7900|0x0080|3)
		binary.BigEndian.PutUint16(resp[4:6], 1)  // one question
		binary.BigEndian.PutUint16(resp[6:8], 0)  // no answers
		binary.BigEndian.PutUint16(resp[8:10], 0) // no authority records
		binary.BigEndian.PutUint16(resp[10:12], 0)
		_, _ = pc.WriteTo(resp, from)
	}
}

// RefusingPort returns a loopback port on which nothing listens: a connection to
// 127.0.0.1 on it is refused. (Another process could take the port meanwhile; on a test
// machine that is rare, and the test then fails loudly rather than passing.)
func RefusingPort(t testing.TB) uint16 {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("fetchtest: listen: %v", err)
	}
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	if err := l.Close(); err != nil {
		t.Fatalf("fetchtest: close: %v", err)
	}
	return port
}

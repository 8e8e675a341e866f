// Package tcpproxy is a TCP proxy for tests that need a network fault between a client
// and PostgreSQL: Cut makes it a blackhole (connections stay open, nothing is forwarded,
// nothing is closed), as a partition or a silent packet drop looks to both ends; Heal
// forwards again, including what was held. Down closes every connection and refuses new
// ones, as a server that restarts looks to its clients; Up accepts again.
package tcpproxy

import (
	"net"
	"sync"
	"testing"
)

// Proxy forwards connections from a loopback port to a target address.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	cut    bool
	down   bool          // Down: connections are closed as they arrive
	healed chan struct{} // closed by Heal; replaced by Cut
	conns  []net.Conn
	closed bool
}

// Start listens on a free loopback port and forwards every connection to target. The
// proxy and its connections close when the test ends.
func Start(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("tcpproxy: listen: %v", err)
	}
	p := &Proxy{ln: ln, target: target, healed: make(chan struct{})}
	close(p.healed)
	go p.serve()
	tb.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() *net.TCPAddr { return p.ln.Addr().(*net.TCPAddr) }

// Cut stops forwarding in both directions without closing anything: reads and writes of
// both ends block as on a partitioned network, and a close by either end reaches the other
// only after Heal. New connections are accepted and held.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.cut {
		p.cut, p.healed = true, make(chan struct{})
	}
}

// Heal resumes forwarding, starting with the data held while cut.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		p.cut = false
		close(p.healed)
	}
}

// Down closes every connection and refuses new ones (they are closed as soon as they are
// accepted) until Up.
func (p *Proxy) Down() {
	p.mu.Lock()
	p.down = true
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// Up ends Down: new connections are forwarded again.
func (p *Proxy) Up() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	_ = p.ln.Close()
	for _, c := range conns {
		_ = c.Close()
	}
	p.Heal() // unblock the forwarders so they see the closed connections
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.down {
		_ = c.Close()
		return false
	}
	p.conns = append(p.conns, c)
	return true
}

func (p *Proxy) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// wait blocks while the proxy is cut.
func (p *Proxy) wait() {
	p.mu.Lock()
	ch := p.healed
	p.mu.Unlock()
	<-ch
}

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			if p.isClosed() {
				return
			}
			continue // down: refused
		}
		go func() {
			p.wait() // a connection made while cut is held, like a SYN into a blackhole
			s, err := net.Dial("tcp", p.target)
			if err != nil {
				_ = c.Close()
				return
			}
			if !p.track(s) {
				_ = c.Close()
				return
			}
			go p.pipe(s, c)
			go p.pipe(c, s)
		}()
	}
}

func (p *Proxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.wait()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			p.wait() // a close is held while cut too: the other end learns nothing
			return
		}
	}
}

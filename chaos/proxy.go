package main

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// blackhole is the TCP proxy between one worker slot and PostgreSQL (or PgBouncer) that
// the half-open fault cuts. A cut stops forwarding in both directions and closes
// nothing: what either end sends is read and held, a connection that either end closes
// stays open at the other end, and new connections are accepted and held before they
// reach the server, as on a partitioned network where every packet is lost and nobody
// learns it (no RST, no FIN). Heal forwards again, the held data first, then the held
// closes, as TCP retransmission would deliver them once the network is back: a COMMIT
// that a worker gave up on may still arrive, which is exactly what fencing must survive.
//
// venturi/internal/tcpproxy is the same idea for venturi's own tests; the chaos module
// cannot import an internal package, and this one also holds closes.
type blackhole struct {
	ln     net.Listener
	target string
	delay  time.Duration // each chunk is forwarded this long after it was read (a distant link)

	mu     sync.Mutex
	cut    bool
	healed chan struct{} // closed by heal; replaced by cutOff
	conns  map[net.Conn]struct{}
	closed bool
	gone   chan struct{} // closed by close

	held atomic.Int64 // transfers (data, new connections, closes) that waited for a heal
}

// newBlackhole listens on a free loopback port and forwards every connection to target.
func newBlackhole(target string) (*blackhole, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &blackhole{ln: ln, target: target, healed: make(chan struct{}), conns: map[net.Conn]struct{}{}, gone: make(chan struct{})}
	close(b.healed)
	go b.serve()
	return b, nil
}

// newDelayLink is a proxy that forwards every chunk, both ways, delay after it was read, in
// order: a link with a one-way latency of delay (a replica in another zone). A close is
// forwarded after the data before it, as the network would deliver what was in flight.
func newDelayLink(target string, delay time.Duration) (*blackhole, error) {
	b, err := newBlackhole(target)
	if err == nil {
		b.mu.Lock()
		b.delay = delay
		b.mu.Unlock()
	}
	return b, err
}

func (b *blackhole) addr() string { return b.ln.Addr().String() }

// cutOff stops forwarding without closing anything.
func (b *blackhole) cutOff() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.cut {
		b.cut, b.healed = true, make(chan struct{})
	}
}

// heal resumes forwarding, starting with what was held.
func (b *blackhole) heal() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cut {
		b.cut = false
		close(b.healed)
	}
}

// close stops the proxy and closes every connection.
func (b *blackhole) close() {
	b.mu.Lock()
	if !b.closed {
		close(b.gone)
	}
	b.closed = true
	conns := b.conns
	b.conns = map[net.Conn]struct{}{}
	b.mu.Unlock()
	_ = b.ln.Close()
	for c := range conns {
		_ = c.Close()
	}
	b.heal()
}

func (b *blackhole) track(c net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		_ = c.Close()
		return false
	}
	b.conns[c] = struct{}{}
	return true
}

func (b *blackhole) untrack(c net.Conn) {
	b.mu.Lock()
	delete(b.conns, c)
	b.mu.Unlock()
	_ = c.Close()
}

// wait blocks while the proxy is cut.
func (b *blackhole) wait() {
	b.mu.Lock()
	ch, cut := b.healed, b.cut
	b.mu.Unlock()
	if cut {
		b.held.Add(1)
	}
	<-ch
}

func (b *blackhole) serve() {
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		if !b.track(c) {
			return
		}
		go func() {
			b.wait() // a connection made while cut is held, like a SYN into a blackhole
			s, err := net.Dial("tcp", b.target)
			if err != nil {
				b.untrack(c)
				return
			}
			if !b.track(s) {
				b.untrack(c)
				return
			}
			var once sync.Once
			done := func() { once.Do(func() { b.untrack(s); b.untrack(c) }) }
			b.mu.Lock()
			delay := b.delay
			b.mu.Unlock()
			if delay > 0 {
				// Each direction ends on its own (a half close): what one end sent before
				// it closed still reaches the other.
				var ended atomic.Int32
				both := func() {
					if ended.Add(1) == 2 {
						done()
					}
				}
				go delayPipe(s, c, delay, b.gone, both)
				go delayPipe(c, s, delay, b.gone, both)
				return
			}
			go b.pipe(s, c, done)
			go b.pipe(c, s, done)
		}()
	}
}

// pipe copies src to dst. Data read while cut is held until the heal; so is the end of
// src (EOF or an error): dst is closed only once the proxy forwards again.
func (b *blackhole) pipe(dst, src net.Conn, done func()) {
	defer done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			b.wait()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			b.wait()
			return
		}
	}
}

// delayPipe copies src to dst, each chunk delay after it was read; the end of src reaches
// dst (a half close) after the chunks before it. When dst stops taking data, the rest is
// dropped until src ends. Once gone is closed, nothing more is delivered.
func delayPipe(dst, src net.Conn, delay time.Duration, gone <-chan struct{}, done func()) {
	type chunk struct {
		at   time.Time
		data []byte
	}
	q := make(chan chunk, 4096)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{time.Now().Add(delay), buf[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	defer done()
	failed := false
	for c := range q {
		if d := time.Until(c.at); d > 0 && !failed {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-gone:
				t.Stop()
				failed = true
			}
		}
		if !failed {
			_, err := dst.Write(c.data)
			failed = err != nil
		}
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

package main

import (
	"io"
	"net"
	"testing"
	"time"
)

// waitFor polls cond until it holds or a deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// testServer listens on a free loopback port until the test ends and hands over each
// connection it accepts.
func testServer(t *testing.T) (addr string, accepted <-chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	conns := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c
		}
	}()
	return ln.Addr().String(), conns
}

// A cut holds data and the client's close; the heal delivers both, in order.
func TestBlackholeHoldsDataAndCloses(t *testing.T) {
	target, server := testServer(t)
	b, err := newBlackhole(target)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	c, err := net.Dial("tcp", b.addr())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	s := <-server
	defer s.Close()
	buf := make([]byte, 1)
	if _, err := io.ReadFull(s, buf); err != nil || buf[0] != 'a' {
		t.Fatalf("before the cut: read %q, %v", buf, err)
	}

	// A second connection, idle when the cut comes: its close is held.
	idle, err := net.Dial("tcp", b.addr())
	if err != nil {
		t.Fatal(err)
	}
	idleS := <-server
	defer idleS.Close()

	b.cutOff()
	_ = idle.Close()
	waitFor(t, "the idle connection's close to be held", func() bool { return b.held.Load() == 1 })
	if _, err := c.Write([]byte("b")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the data to be held", func() bool { return b.held.Load() == 2 })
	_ = c.Close() // held behind the data: the pipe reads the close only after forwarding "b"
	// A connection made while cut is held too.
	c2, err := net.Dial("tcp", b.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	waitFor(t, "the new connection to be held", func() bool { return b.held.Load() == 3 })

	b.heal()
	rest, err := io.ReadAll(s) // "b", then EOF: the close comes after the data
	if err != nil || string(rest) != "b" {
		t.Fatalf("after the heal: read %q, %v; want \"b\" then EOF", rest, err)
	}
	if n, err := idleS.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("idle connection after the heal: %d bytes, %v; want EOF", n, err)
	}
}

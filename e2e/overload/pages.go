package main

import (
	"fmt"
	"html"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// pageServer answers every GET, under any host name, with a small HTML page after a fixed
// delay: the worker's handlers spend that long on each fetch, so that they, not the CPU,
// bound its drain rate. It counts the pages served and the most requests in flight at
// once (the worker's busy handlers).
type pageServer struct {
	delay    time.Duration
	port     int
	served   atomic.Int64
	inflight atomic.Int64
	peak     atomic.Int64
}

func newPageServer(delay time.Duration) *pageServer { return &pageServer{delay: delay} }

// url is the page of bookmark seq, on one of the hosts.
func (p *pageServer) url(host, seq int) string {
	return "http://" + hostName(host) + ":" + strconv.Itoa(p.port) + "/page/" + strconv.Itoa(seq)
}

func (p *pageServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := p.inflight.Add(1)
	defer p.inflight.Add(-1)
	for {
		m := p.peak.Load()
		if n <= m || p.peak.CompareAndSwap(m, n) {
			break
		}
	}
	t := time.NewTimer(p.delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
		return
	}
	name := html.EscapeString(strings.TrimPrefix(r.URL.Path, "/page/"))
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprintf(w, "<html><head><title>Page %s</title></head><body><h1>%s</h1><p>Content of page %s.</p></body></html>",
		name, name, name)
	p.served.Add(1)
}

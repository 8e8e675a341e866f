// Command overload drives the real bookmarks-api and bookmarks-worker binaries at three
// times the worker's drain rate through the HTTP API (chaos/README.md, "Overload";
// `make chaos/overload-api`), and checks that nothing acknowledged is lost, that the API
// sheds load with 429 and 503 and a Retry-After instead of timing out, that both
// processes' memory stays bounded, and that the backlog drains at full speed afterwards.
//
//	overload [-d 5m] [-factor 3] [-calibration 1500] [-hosts 500] [-page-delay 500ms]
//	         [-concurrency 20] [-burst 1024] [-timeout 10s] [-root DIR] [-keep]
//
// It needs DATABASE_URL (a scripts/pg.sh cluster: the make target runs it under
// `scripts/pg.sh with`), migrates a private schema there and drops it at the end. It builds
// both binaries from the repository (-root), serves the pages the worker fetches from a
// local server that answers as -hosts host names after -page-delay each, and runs in
// four phases:
//
//  1. calibration: -calibration bookmarks are created through the API before the worker
//     starts; the worker's drain rate is measured between 10% and 90% of them fetched;
//  2. overload: producers POST /bookmarks at -factor times that rate for -d, spread over
//     enough API keys that each key is offered 80% of its write limit, plus one key
//     offered twice its limit; a client that gets 429 or 503 waits Retry-After and
//     retries;
//  3. drain: once every producer is done, the backlog's drain is timed to its last job;
//  4. burst: -burst creates at once (more than the API's 256 places), each on a key with
//     write burst to spare, so that the API's in-flight limit, not the keys' limits,
//     answers: 503 with Retry-After, retried. It comes after the drain so that the memory
//     of its connections is not counted as the overload's.
//
// It samples both processes' VmRSS and the backlog (read-only SQL on venturi_job) every
// second, prints a report and exits 1 when an invariant is violated (2 on a setup error).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/venturi-dev/bookmarks/e2e/internal/stack"
)

// The API's write limit per key, passed to it explicitly (BOOKMARKS_WRITE_RATE and
// BOOKMARKS_WRITE_BURST, its defaults) so that the key counts below follow from it.
const (
	writeRate  = 10 // per second
	writeBurst = 20
)

// Producer shape.
const (
	steadyKeyLoad = 0.8 // offered share of each steady key's write limit
	greedyKeyLoad = 2.0 // offered multiple of the greedy key's write limit
	maxAttempts   = 30  // a create refused (429/503) this often in a row is given up
	shedLimit     = 256 // the API's in-flight limit (httpapi.DefaultMaxInFlight)
)

type options struct {
	dur         time.Duration
	factor      float64
	calibration int
	hosts       int
	pageDelay   time.Duration
	concurrency int
	burst       int
	timeout     time.Duration
	root        string
	keep        bool
}

func main() {
	var o options
	flag.DurationVar(&o.dur, "d", 5*time.Minute, "how long producers overload the system")
	flag.Float64Var(&o.factor, "factor", 3, "producers' rate / the calibrated drain rate")
	flag.IntVar(&o.calibration, "calibration", 1500, "bookmarks of the calibration backlog")
	flag.IntVar(&o.hosts, "hosts", 500, "host names the page server answers as (fetches are polite per host: 1 start/s)")
	flag.DurationVar(&o.pageDelay, "page-delay", 500*time.Millisecond, "how long each page takes to answer (the handlers, not the CPU, bound the drain)")
	flag.IntVar(&o.concurrency, "concurrency", 20, "the worker's BOOKMARKS_WORKER_CONCURRENCY")
	flag.IntVar(&o.burst, "burst", 1024, "creates sent at once after the drain (0: no burst)")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Second, "client timeout of every request (a timeout is a violation)")
	flag.StringVar(&o.root, "root", "", "the repository's root (default: the directory holding go.work above the working directory)")
	flag.BoolVar(&o.keep, "keep", false, "keep the processes' logs even when the run passes")
	flag.Parse()
	if o.factor <= 0 || o.calibration < 100 || o.hosts < 1 || o.concurrency < 1 || o.burst < 0 || o.dur < 10*time.Second {
		fmt.Fprintln(os.Stderr, "overload: bad flags (want -factor > 0, -calibration >= 100, -hosts >= 1, -concurrency >= 1, -burst >= 0, -d >= 10s)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ok, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "overload:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

// system is the running system under test.
type system struct {
	o       options
	db      *stack.Database
	api     *stack.Process
	worker  *stack.Process
	apiURL  string
	pages   *pageServer
	logDir  string
	client  *http.Client
	started time.Time
}

func (s *system) logf(format string, a ...any) {
	fmt.Printf("overload %6.1fs: %s\n", time.Since(s.started).Seconds(), fmt.Sprintf(format, a...))
}

func run(ctx context.Context, o options) (bool, error) {
	base := os.Getenv("DATABASE_URL")
	if base == "" {
		return false, errors.New("DATABASE_URL is not set: run `make chaos/overload-api`, or this under `scripts/pg.sh with --`")
	}
	if o.root == "" {
		var err error
		if o.root, err = findRoot(); err != nil {
			return false, err
		}
	}
	s := &system{o: o, started: time.Now()}
	dir, err := os.MkdirTemp("", "bookmarks-overload-")
	if err != nil {
		return false, err
	}
	s.logDir = dir
	if s.db, err = stack.OpenDatabaseAt(ctx, base); err != nil {
		return false, err
	}
	defer s.db.Close()
	s.logf("building bookmarks-api and bookmarks-worker; logs in %s", dir)
	apiBin, workerBin := filepath.Join(dir, "bookmarks-api"), filepath.Join(dir, "bookmarks-worker")
	if err := stack.Build(ctx, filepath.Join(o.root, "bookmarks-api"), apiBin); err != nil {
		return false, err
	}
	if err := stack.Build(ctx, filepath.Join(o.root, "bookmarks-worker"), workerBin); err != nil {
		return false, err
	}

	s.pages = newPageServer(o.pageDelay)
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return false, err
	}
	psrv := &http.Server{Handler: s.pages, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = psrv.Serve(pl) }()
	defer psrv.Close()
	pagePort := pl.Addr().(*net.TCPAddr).Port

	port, err := stack.FreePort()
	if err != nil {
		return false, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	s.apiURL = "http://" + addr
	s.api = &stack.Process{Name: "api", Bin: apiBin, Log: filepath.Join(dir, "api.log"), Env: []string{
		"DATABASE_URL=" + s.db.URL, "BOOKMARKS_API_ADDR=" + addr, "BOOKMARKS_METRICS_ADDR=",
		"BOOKMARKS_WRITE_RATE=" + strconv.Itoa(writeRate) + "/s", "BOOKMARKS_WRITE_BURST=" + strconv.Itoa(writeBurst),
	}}
	var hosts []string
	for i := range o.hosts {
		hosts = append(hosts, hostName(i)+"=127.0.0.1")
	}
	s.worker = &stack.Process{Name: "worker", Bin: workerBin, Log: filepath.Join(dir, "worker.log"), Env: []string{
		"DATABASE_URL=" + s.db.URL, "BOOKMARKS_WORKER_METRICS_ADDR=",
		"BOOKMARKS_WORKER_CONCURRENCY=" + strconv.Itoa(o.concurrency),
		// Test-only: the page server is the one loopback address the fetcher may reach,
		// and every host name of the run resolves to it without DNS.
		"BOOKMARKS_FETCH_ALLOW_LOOPBACK_PORT=" + strconv.Itoa(pagePort),
		"BOOKMARKS_FETCH_STATIC_HOSTS=" + strings.Join(hosts, ","),
	}}
	s.pages.port = pagePort

	// Keys: enough steady keys for the highest drain rate the handlers allow, one greedy
	// key, and the burst's keys (a write burst each to spare), all from the CLI.
	maxDrain := float64(o.concurrency) / o.pageDelay.Seconds()
	steadyMax := keysFor(o.factor * maxDrain)
	burstKeys := (o.burst + writeBurst - 1) / writeBurst
	s.logf("creating %d API keys with `bookmarks-api keys create`", steadyMax+1+burstKeys)
	keys, err := s.createKeys(ctx, steadyMax+1+burstKeys)
	if err != nil {
		return false, err
	}
	s.client = &http.Client{Timeout: o.timeout, Transport: &http.Transport{
		MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, IdleConnTimeout: 90 * time.Second,
	}}
	if err := s.api.Start(); err != nil {
		return false, err
	}
	defer s.api.Stop()
	if err := s.waitReady(ctx); err != nil {
		return false, err
	}

	ov := newRun(s, keys[:steadyMax], keys[steadyMax], keys[steadyMax+1:])
	defer s.worker.Stop()
	runErr := ov.run(ctx)
	var stopErrs []string
	for _, p := range []*stack.Process{s.worker, s.api} {
		if err := p.Stop(); err != nil {
			stopErrs = append(stopErrs, err.Error())
		}
	}
	if runErr != nil {
		s.dumpLogs()
		return false, runErr
	}
	passed := ov.report(os.Stdout, stopErrs)
	if !passed || o.keep {
		if !passed {
			s.dumpLogs()
		}
		fmt.Printf("logs kept in %s\n", dir)
	} else {
		os.RemoveAll(dir)
	}
	return passed, nil
}

// keysFor is how many steady keys carry rate creates per second at steadyKeyLoad of
// each key's write limit.
func keysFor(rate float64) int {
	return max(1, int(rate/(steadyKeyLoad*writeRate)+0.999))
}

// hostName is the i-th host name the page server answers as.
func hostName(i int) string { return "h" + strconv.Itoa(i) + ".overload.test" }

// createKeys creates n API keys with the CLI, four at a time.
func (s *system) createKeys(ctx context.Context, n int) ([]string, error) {
	keys := make([]string, n)
	errs := make([]error, n)
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			out, err := s.api.Command(ctx, "keys", "create", "--name", "overload-"+strconv.Itoa(i))
			key := strings.TrimSpace(out)
			if err == nil && (!strings.HasPrefix(key, "bmk_") || strings.ContainsAny(key, " \n")) {
				err = fmt.Errorf("keys create printed %q, want the key alone", out)
			}
			keys[i], errs[i] = key, err
		}()
	}
	wg.Wait()
	return keys, errors.Join(errs...)
}

// waitReady polls /readyz until the API answers 200, for at most a minute.
func (s *system) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(time.Minute)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.apiURL+"/readyz", nil)
		resp, err := s.client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the API is not ready after a minute (last: %v); see %s", err, s.api.Log)
		}
		if err := wait(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// dumpLogs prints the end of both processes' logs.
func (s *system) dumpLogs() {
	for _, p := range []*stack.Process{s.api, s.worker} {
		if p == nil {
			continue
		}
		b, _ := os.ReadFile(p.Log)
		if len(b) > 4<<10 {
			b = b[len(b)-4<<10:]
		}
		fmt.Fprintf(os.Stderr, "==== %s (last 4 KiB of %s)\n%s\n", p.Name, p.Log, b)
	}
}

// findRoot is the nearest directory holding go.work, from the working directory up.
func findRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.work above the working directory: pass -root")
		}
		dir = parent
	}
}

// wait waits d, or less if ctx ends first (then it returns ctx's error). It waits out a
// duration the protocol asks for (a Retry-After, a poll interval), never a condition.
func wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

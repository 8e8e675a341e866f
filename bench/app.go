package main

// Scenario 18 ("app", issue 15): the reference app under load. The real bookmarks-api
// binary, built from ../bookmarks-api, serves POST /bookmarks (a bookmark insert plus the
// dedup enqueue of its FetchBookmark job, in one transaction) to C concurrent HTTP clients
// in this process, against venturi's raw dedup enqueue (scenario 2's call) from C
// producers, alternated run by run, at every C of appSizes.clients. The bench imports
// nothing of the app: it builds the binary, migrates with `bookmarks-api migrate`, makes
// keys with `bookmarks-api keys create`, and talks HTTP. See README.md, scenario 18.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi"
)

// appSizes sizes scenario 18.
type appSizes struct {
	dur     time.Duration // one measured run (app or raw, one concurrency)
	clients []int         // concurrent HTTP clients (app) and producers (raw)
}

var (
	appFull  = appSizes{dur: 10 * time.Second, clients: []int{8, 32, 64}}
	appQuick = appSizes{dur: 3 * time.Second, clients: []int{8, 32, 64}}
)

const (
	appSchema     = "bookmarks_bench"   // the app's private schema in the bench database
	appDBName     = "venturi-bench-app" // application_name of the API's connections
	appRawDBName  = "venturi-bench-raw" // application_name of the raw producers' connections
	appKeys       = 8                   // API keys; client i sends key i % appKeys
	appHosts      = 100                 // the bookmarked URLs' hosts, round-robin (fetches are partitioned and slotted per host)
	appRawCol     = "raw"               // the raw enqueue's column in the rows (the ratio's denominator)
	appTarget     = 0.6                 // app creates/s ≥ 0.6× raw enqueues/s
	appScaleFloor = 0.9                 // app creates/s ≥ 0.9× the best rate at fewer clients ("not falling")
	// The API's per-key write limit for the bench: far above anything one key can reach
	// here, so that no create is refused with 429, while the limiter stays in the path.
	appWriteRate  = "1000000/s"
	appWriteBurst = "1000000"
	// appTimeout is each request's client timeout (the API's own handler limit is 10 s).
	appTimeout = 15 * time.Second
)

// scenarioApp runs scenario 18.
func (b *bencher) scenarioApp(ctx context.Context) error {
	sz := appFull
	if b.o.quick {
		sz = appQuick
	}
	api, err := startAppAPI(ctx, b.o.url, b.admin)
	if err != nil {
		return err
	}
	defer api.close()
	raw, err := openRawProducers(ctx, b.o.url)
	if err != nil {
		return err
	}
	defer raw.close()
	b.rep.notes = append(b.rep.notes, appMethod(sz))
	other := map[int]int{} // non-201 answers over every run, by status (0: no answer)
	var errSample string
	for rep := range b.o.reps {
		for _, n := range sz.clients {
			name := fmt.Sprintf("18. app: POST /bookmarks, %d clients", n)
			sides := []string{"app", appRawCol}
			if rep%2 == 1 {
				sides[0], sides[1] = sides[1], sides[0]
			}
			for _, side := range sides {
				if side == appRawCol {
					if err := resetJobs(ctx, b.admin); err != nil {
						return err
					}
					r, err := raw.run(ctx, b.admin, fmt.Sprintf("r%dn%d", rep, n), n, sz.dur)
					if err != nil {
						return fmt.Errorf("raw enqueue, %d producers: %w", n, err)
					}
					logf("  %s raw rep %d: %.0f enqueues/s p50 %.2fms p99 %.2fms, %d of %d collided; PostgreSQL %.0f ms, bench %.0f ms CPU per 1,000",
						name, rep, r.perSec, r.p50, r.p99, r.collided, r.count, r.dbCPU, r.selfCPU)
					b.addAppRaw(name, r)
					continue
				}
				if err := api.reset(ctx, b.admin); err != nil {
					return err
				}
				r, err := api.run(ctx, b.admin, n, sz.dur)
				if err != nil {
					return fmt.Errorf("app, %d clients: %w", n, err)
				}
				for s, c := range r.other {
					other[s] += c
				}
				if errSample == "" {
					errSample = r.errSample
				}
				logf("  %s app rep %d: %.0f creates/s p50 %.2fms p99 %.2fms, %d non-201%s; API %.0f ms, PostgreSQL %.0f ms, bench %.0f ms CPU per 1,000",
					name, rep, r.perSec, r.p50, r.p99, r.others(), appStatusList(r.other), r.apiCPU, r.dbCPU, r.selfCPU)
				if r.created == 0 {
					return fmt.Errorf("app, %d clients: no bookmark created (%s%s); API log %s", n, appStatusList(r.other), errSample, api.log)
				}
				b.addAppRun(name, r)
			}
		}
		b.addAppScaling(sz.clients)
	}
	if len(other) > 0 {
		note := "Scenario 18: answers other than 201 (not counted as creates): " + appStatusList(other)
		if errSample != "" {
			note += "; first transport error: " + errSample
		}
		b.rep.notes = append(b.rep.notes, note+".")
	}
	return nil
}

// appMethod is scenario 18's note in the report.
func appMethod(sz appSizes) string {
	return fmt.Sprintf("Scenario 18 (app): the bookmarks-api binary (built from ../bookmarks-api, migrated into schema %s with `bookmarks-api migrate`, "+
		"%d keys from `bookmarks-api keys create`, BOOKMARKS_WRITE_RATE=%s and BOOKMARKS_WRITE_BURST=%s so that the per-key limits never refuse, "+
		"otherwise its defaults, pgxpool's default pool included; no bookmarks-worker runs, so the fetch jobs accumulate) on a loopback port; "+
		"C HTTP/1.1 keep-alive clients in the bench process POST /bookmarks {url} (unique URLs over %d hosts, no tags) back to back for %v; "+
		"creates/s counts 201 answers only (latency p50/p99 of those), a 429 or 503 is counted and its Retry-After waited. "+
		"The raw column is scenario 2's call (Queue.Enqueue of a DedupTask, half the keys colliding) from C producers on a pool of %d connections in the same repetition, "+
		"the two alternating; every run starts from empty tables. The ratio column of the app's rows is app over raw (target ≥ %.1f×); "+
		"\"vs fewer clients\" is the app's creates/s over its best at a lower concurrency in the same repetition (target ≥ %.1f: not falling). "+
		"CPU per 1,000: the API process, the PostgreSQL backends of the API's (or the producers') connections, and the bench process (the HTTP clients, or the raw producers).",
		appSchema, appKeys, appWriteRate, appWriteBurst, appHosts, sz.dur, producerPoolConns, appTarget, appScaleFloor)
}

// addAppRun records one app run; addAppRaw one raw run. The app's values go in the
// venturi column (the app is a venturi application), the raw's in appRawCol of the same
// rows, so that the ratio column is app over raw.
func (b *bencher) addAppRun(name string, r *appRun) {
	x := b.rep.add(name, "creates/s (201 answers)", true, libVenturi, r.perSec)
	x.ratioOf, x.ratioTo, x.target, x.check = libVenturi, []string{appRawCol}, fmt.Sprintf("≥ %.1f× raw", appTarget), ratioAtLeast(appTarget)
	for _, m := range []struct {
		metric string
		v      float64
	}{{"p50 latency (ms)", r.p50}, {"p99 latency (ms)", r.p99},
		{"PostgreSQL CPU per 1,000 (ms)", r.dbCPU}, {"bench process CPU per 1,000 (ms)", r.selfCPU}} {
		y := b.rep.add(name, m.metric, false, libVenturi, m.v)
		y.ratioOf, y.ratioTo = libVenturi, []string{appRawCol}
	}
	b.rep.add(name, "API process CPU per 1,000 creates (ms)", false, libVenturi, r.apiCPU)
	b.rep.add(name, "answers other than 201", false, libVenturi, float64(r.others()))
}

func (b *bencher) addAppRaw(name string, r *rawRun) {
	b.rep.add(name, "creates/s (201 answers)", true, appRawCol, r.perSec)
	b.rep.add(name, "raw dedup enqueues/s (scenario 2's call)", true, libVenturi, r.perSec)
	b.rep.add(name, "p50 latency (ms)", false, appRawCol, r.p50)
	b.rep.add(name, "p99 latency (ms)", false, appRawCol, r.p99)
	b.rep.add(name, "PostgreSQL CPU per 1,000 (ms)", false, appRawCol, r.dbCPU)
	b.rep.add(name, "bench process CPU per 1,000 (ms)", false, appRawCol, r.selfCPU)
}

// addAppScaling adds, for every concurrency above the lowest, the app's creates/s of
// this repetition over its best at a lower concurrency in the same repetition.
func (b *bencher) addAppScaling(clients []int) {
	last := func(n int) (float64, bool) {
		x := b.rep.get(&b.rep.rows, fmt.Sprintf("18. app: POST /bookmarks, %d clients", n), "creates/s (201 answers)", true)
		v := x.vals[libVenturi]
		if len(v) == 0 {
			return 0, false
		}
		return v[len(v)-1], true
	}
	for i, n := range clients {
		if i == 0 {
			continue
		}
		cur, ok := last(n)
		best := 0.0
		for _, m := range clients[:i] {
			if v, ok := last(m); ok {
				best = max(best, v)
			}
		}
		if !ok || best == 0 {
			continue
		}
		x := b.rep.add(fmt.Sprintf("18. app: POST /bookmarks, %d clients", n), "creates/s vs fewer clients (best lower concurrency)", true, libVenturi, cur/best)
		x.target, x.check = fmt.Sprintf("≥ %.1f", appScaleFloor), appValueAtLeast(libVenturi, appScaleFloor)
	}
}

// valueAtLeast: the column's median must be at least k.
func appValueAtLeast(col string, k float64) func(*row) (bool, bool) {
	return func(x *row) (bool, bool) {
		v := x.vals[col]
		return median(v) >= k, len(v) > 0
	}
}

// ---- the API process --------------------------------------------------------------------

// appAPI is a running bookmarks-api and what its clients need.
type appAPI struct {
	dir    string // temporary: the binary and the log
	bin    string
	log    string
	env    []string
	base   string // http://127.0.0.1:port
	keys   []string
	cmd    *exec.Cmd
	done   chan error
	client *http.Client
}

// startAppAPI builds bookmarks-api, migrates a fresh schema, creates the keys, starts the
// server on a free loopback port and waits for /readyz.
func startAppAPI(ctx context.Context, dbURL string, admin *pgxpool.Pool) (a *appAPI, err error) {
	src, err := appSourceDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "bench-app-")
	if err != nil {
		return nil, err
	}
	a = &appAPI{dir: dir, bin: filepath.Join(dir, "bookmarks-api"), log: filepath.Join(dir, "api.log")}
	defer func() {
		if err != nil {
			a.close()
		}
	}()
	logf("  building bookmarks-api from %s", src)
	build := exec.CommandContext(ctx, "go", "build", "-o", a.bin, ".")
	build.Dir = src
	build.Env = append(os.Environ(), "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build %s: %w\n%s", src, err, out)
	}
	if _, err := admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+appSchema+" CASCADE; CREATE SCHEMA "+appSchema); err != nil {
		return nil, err
	}
	appURL, err := appDatabaseURL(dbURL, appSchema, appDBName)
	if err != nil {
		return nil, err
	}
	port, err := appFreePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	a.base = "http://" + addr
	a.env = append(appBaseEnv(os.Environ()),
		"DATABASE_URL="+appURL, "BOOKMARKS_API_ADDR="+addr,
		"BOOKMARKS_METRICS_ADDR=", // no metrics listener: nothing scrapes it, and no port to collide
		"BOOKMARKS_WRITE_RATE="+appWriteRate, "BOOKMARKS_WRITE_BURST="+appWriteBurst)
	if _, err := a.command(ctx, "migrate"); err != nil {
		return nil, err
	}
	for i := range appKeys {
		out, err := a.command(ctx, "keys", "create", "--name", "bench-"+strconv.Itoa(i))
		if err != nil {
			return nil, err
		}
		key := strings.TrimSpace(out)
		if !strings.HasPrefix(key, "bmk_") || strings.ContainsAny(key, " \n") {
			return nil, fmt.Errorf("keys create printed %q, want the key alone", out)
		}
		a.keys = append(a.keys, key)
	}
	f, err := os.Create(a.log)
	if err != nil {
		return nil, err
	}
	a.cmd = exec.Command(a.bin)
	a.cmd.Env = a.env
	a.cmd.Stdout, a.cmd.Stderr = f, f
	if err := a.cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	a.done = make(chan error, 1)
	go func() { a.done <- a.cmd.Wait(); f.Close() }()
	a.client = &http.Client{Timeout: appTimeout, Transport: &http.Transport{
		Proxy:       nil, // loopback: never through a proxy from the environment
		DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		// One keep-alive connection per client, as a load tool keeps them.
		MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, IdleConnTimeout: 90 * time.Second,
		DisableCompression: true,
	}}
	if err := a.waitReady(ctx); err != nil {
		return nil, err
	}
	logf("  bookmarks-api (pid %d) ready on %s; log %s", a.cmd.Process.Pid, a.base, a.log)
	return a, nil
}

// appSourceDir is the bookmarks-api module to build: $BENCH_APP_DIR when set (another
// checkout's, to compare two versions of the app), else ../bookmarks-api found from the
// bench directory (or from the repository root, or any directory below it).
func appSourceDir() (string, error) {
	if d := os.Getenv("BENCH_APP_DIR"); d != "" {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err != nil {
			return "", fmt.Errorf("BENCH_APP_DIR: %w", err)
		}
		return filepath.Abs(d)
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		for _, c := range []string{filepath.Join(dir, "bookmarks-api"), filepath.Join(dir, "..", "bookmarks-api")} {
			if _, err := os.Stat(filepath.Join(c, "go.mod")); err == nil {
				return filepath.Clean(c), nil
			}
		}
		if filepath.Dir(dir) == dir {
			return "", errors.New("no bookmarks-api module beside the bench directory: run the bench from bench/")
		}
	}
}

// appDatabaseURL is base with the app's schema as search_path and its connections named.
func appDatabaseURL(base, schema, appName string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("bench database URL: %w", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	q.Set("application_name", appName)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// appBaseEnv is the bench's environment without what would configure the API behind the
// bench's back: its own variables, DATABASE_URL and OpenTelemetry's.
func appBaseEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if k == "DATABASE_URL" || strings.HasPrefix(k, "BOOKMARKS_") || strings.HasPrefix(k, "OTEL_") || strings.HasPrefix(k, "PG") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// freePort returns a loopback port that was free a moment ago.
func appFreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// command runs the binary once (migrate, keys ...) and returns its stdout.
func (a *appAPI) command(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, a.bin, args...)
	cmd.Env = a.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("bookmarks-api %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// waitReady polls /readyz until it answers 200, for at most a minute.
func (a *appAPI) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case err := <-a.done:
			a.done <- err
			return fmt.Errorf("bookmarks-api exited before it was ready (%v):\n%s", err, a.logTail())
		default:
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.base+"/readyz", nil)
		resp, err := a.client.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bookmarks-api not ready after a minute (last: %v):\n%s", err, a.logTail())
		}
		if err := pause(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

func (a *appAPI) logTail() string {
	b, _ := os.ReadFile(a.log)
	if len(b) > 4<<10 {
		b = b[len(b)-4<<10:]
	}
	return string(b)
}

// close stops the API (SIGTERM, then SIGKILL after 30 s) and removes its directory,
// unless the API failed, whose log is then kept.
func (a *appAPI) close() {
	keep := false
	if a.cmd != nil && a.cmd.Process != nil {
		select {
		case err := <-a.done: // it had exited by itself
			keep = true
			logf("  bookmarks-api had exited: %v; log kept in %s", err, a.log)
		default:
			_ = a.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-a.done:
				if err != nil {
					keep = true
					logf("  bookmarks-api stopped with %v; log kept in %s", err, a.log)
				}
			case <-time.After(30 * time.Second):
				_ = a.cmd.Process.Kill()
				<-a.done
				keep = true
				logf("  bookmarks-api did not stop within 30s of SIGTERM; killed; log kept in %s", a.log)
			}
		}
	}
	if a.client != nil {
		a.client.CloseIdleConnections()
	}
	if !keep {
		os.RemoveAll(a.dir)
	}
}

// reset empties the app's tables (bookmarks, jobs, their events and journal) between runs.
func (a *appAPI) reset(ctx context.Context, admin *pgxpool.Pool) error {
	_, err := admin.Exec(ctx, "TRUNCATE "+appSchema+".bookmark, "+appSchema+".venturi_job, "+appSchema+".venturi_job_history, "+appSchema+".venturi_event, "+appSchema+".venturi_journal")
	return err
}

// appRun is one measured app run.
type appRun struct {
	created   int
	other     map[int]int // non-201 answers by status; 0 counts requests without an answer
	errSample string      // the first transport error, if any
	perSec    float64
	p50, p99  float64 // ms, of the 201s
	apiCPU    float64 // ms per 1,000 creates: the API process
	dbCPU     float64 // ms per 1,000 creates: the PostgreSQL backends of the API's connections
	selfCPU   float64 // ms per 1,000 creates: the bench process (the HTTP clients)
}

func (r *appRun) others() int {
	n := 0
	for _, c := range r.other {
		n += c
	}
	return n
}

// run drives n clients for d: each POSTs a new bookmark, reads the answer and posts the
// next. The clock runs from the start until the last client's last request has ended.
func (a *appAPI) run(ctx context.Context, admin *pgxpool.Pool, n int, d time.Duration) (*appRun, error) {
	// Warm-up, untimed: every client's connection opened and the API's pool grown. Its
	// bookmarks are removed before the clock starts.
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, _, _ = a.create(ctx, i, fmt.Sprintf("https://warm.bench.test/%d", i))
		}()
	}
	wg.Wait()
	if err := a.reset(ctx, admin); err != nil {
		return nil, err
	}
	api0, apiOK := procCPU(a.cmd.Process.Pid)
	db0 := appBackendCPU(ctx, admin, appDBName)
	self0, selfOK := procCPU(os.Getpid())

	var (
		seq     atomic.Int64
		mu      sync.Mutex
		lats    []time.Duration
		other   = map[int]int{}
		errText string
	)
	run := time.Now().UnixNano() % 1_000_000 // URLs differ from run to run
	start := time.Now()
	deadline := start.Add(d)
	for c := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]time.Duration, 0, 4096)
			bad := map[int]int{}
			var firstErr string
			for time.Now().Before(deadline) && ctx.Err() == nil {
				i := seq.Add(1) - 1
				u := fmt.Sprintf("https://h%d.bench.test/%d/%d", i%appHosts, run, i)
				t := time.Now()
				status, retry, _, err := a.create(ctx, c, u)
				lat := time.Since(t)
				switch {
				case err != nil:
					bad[0]++
					if firstErr == "" {
						firstErr = err.Error()
					}
				case status == http.StatusCreated:
					mine = append(mine, lat)
				default:
					bad[status]++
					if retry > 0 { // 429, 503: wait what the API asks, within the run
						_ = pause(ctx, min(retry, time.Until(deadline)))
					}
				}
			}
			mu.Lock()
			lats = append(lats, mine...)
			for s, k := range bad {
				other[s] += k
			}
			if errText == "" {
				errText = firstErr
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	el := time.Since(start)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r := &appRun{created: len(lats), other: other, errSample: errText, perSec: float64(len(lats)) / el.Seconds(),
		p50: pct(lats, .5), p99: pct(lats, .99)}
	per := func(d time.Duration) float64 {
		if r.created == 0 {
			return 0
		}
		return float64(d) / 1e6 / float64(r.created) * 1000
	}
	if api1, ok := procCPU(a.cmd.Process.Pid); ok && apiOK {
		r.apiCPU = per(api1 - api0)
	}
	r.dbCPU = per(appBackendCPUSince(ctx, admin, appDBName, db0))
	if self1, ok := procCPU(os.Getpid()); ok && selfOK {
		r.selfCPU = per(self1 - self0)
	}
	return r, nil
}

// create POSTs one bookmark with client c's key. It returns the status, the Retry-After of
// a 429 or 503 (0 otherwise), and the body (for errors).
func (a *appAPI) create(ctx context.Context, c int, u string) (int, time.Duration, []byte, error) {
	body := `{"url":"` + u + `"}` // u is ASCII without quotes or backslashes
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.base+"/bookmarks", strings.NewReader(body))
	if err != nil {
		return 0, 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+a.keys[c%len(a.keys)])
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, 0, nil, err
	}
	var retry time.Duration
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		retry = appRetryAfter(resp.Header.Get("Retry-After"))
	}
	return resp.StatusCode, retry, b, nil
}

// parseRetryAfter reads a Retry-After in seconds (the API sends seconds); anything else
// is one second.
func appRetryAfter(s string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 0 {
		return time.Second
	}
	return time.Duration(n) * time.Second
}

// statusList writes counts by status: "503 ×12, no answer ×1" (sorted by status).
func appStatusList(m map[int]int) string {
	var ks []int
	for k := range m {
		ks = append(ks, k)
	}
	sort.Ints(ks)
	var parts []string
	for _, k := range ks {
		s := strconv.Itoa(k)
		if k == 0 {
			s = "no answer"
		}
		parts = append(parts, fmt.Sprintf("%s ×%d", s, m[k]))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// ---- the raw enqueue ----------------------------------------------------------------------

// rawProducers is scenario 2's venturi producer on a pool whose connections are named, so
// that their backends' CPU can be read.
type rawProducers struct{ p *producers }

// rawRun is one measured raw run.
type rawRun struct {
	count, collided int
	perSec          float64
	p50, p99        float64 // ms
	dbCPU, selfCPU  float64 // ms per 1,000 enqueues
}

func openRawProducers(ctx context.Context, dbURL string) (*rawProducers, error) {
	u, err := appDatabaseURL(dbURL, venturiSchema, appRawDBName)
	if err != nil {
		return nil, err
	}
	pool, err := poolFor(ctx, u, venturiSchema, producerPoolConns)
	if err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	for range producerPoolConns {
		wg.Add(1)
		go func() { defer wg.Done(); _ = pool.Ping(ctx) }()
	}
	wg.Wait()
	return &rawProducers{p: &producers{lib: libVenturi, pool: pool, q: venturi.NewQueue(pool, venturi.QueueConfig{})}}, nil
}

func (r *rawProducers) close() { r.p.close() }

// run is scenario 2's measurement with n producers for d (keys named by run).
func (r *rawProducers) run(ctx context.Context, admin *pgxpool.Pool, run string, n int, d time.Duration) (*rawRun, error) {
	db0 := appBackendCPU(ctx, admin, appRawDBName)
	self0, selfOK := procCPU(os.Getpid())
	var collided atomic.Int64
	count, lats, el, err := drive(ctx, n, d, func(ctx context.Context, i int) error {
		c, err := r.p.dedupEnqueue(ctx, dedupKey(run, i))
		if c {
			collided.Add(1)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	out := &rawRun{count: count, collided: int(collided.Load()), perSec: float64(count) / el.Seconds(), p50: pct(lats, .5), p99: pct(lats, .99)}
	if count > 0 {
		out.dbCPU = float64(appBackendCPUSince(ctx, admin, appRawDBName, db0)) / 1e6 / float64(count) * 1000
		if self1, ok := procCPU(os.Getpid()); ok && selfOK {
			out.selfCPU = float64(self1-self0) / 1e6 / float64(count) * 1000
		}
	}
	return out, nil
}

// ---- PostgreSQL backends' CPU ----------------------------------------------------------------

// backendCPU reads the CPU time of every backend whose application_name is name, by PID
// (empty when the server is not on this machine).
func appBackendCPU(ctx context.Context, admin *pgxpool.Pool, name string) map[int]time.Duration {
	out := map[int]time.Duration{}
	rows, err := admin.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = $1", name)
	if err != nil {
		return out
	}
	defer rows.Close()
	for rows.Next() {
		var pid int
		if rows.Scan(&pid) != nil {
			return out
		}
		if c, ok := procCPU(pid); ok {
			out[pid] = c
		}
	}
	return out
}

// backendCPUSince is the CPU time those backends used since before (a backend that
// started meanwhile counts whole).
func appBackendCPUSince(ctx context.Context, admin *pgxpool.Pool, name string, before map[int]time.Duration) time.Duration {
	var total time.Duration
	for pid, c := range appBackendCPU(ctx, admin, name) {
		total += c - before[pid]
	}
	return total
}

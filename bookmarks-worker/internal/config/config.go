// Package config reads the worker's configuration from the environment.
package config

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/venturi-dev/bookmarks/bookmarks-worker/internal/fetch"
	"github.com/venturi-dev/bookmarks/shared/tasks"
	"github.com/venturi-dev/bookmarks/shared/telemetry"
	"github.com/venturi-dev/venturi"
)

// Config is the worker's configuration.
type Config struct {
	// DatabaseURL is the PostgreSQL URL (DATABASE_URL). Required.
	DatabaseURL string
	// Concurrency is the number of jobs of the default queue run at once: the fetches users
	// ask for and the tag index rebuilds (BOOKMARKS_WORKER_CONCURRENCY, default 20).
	Concurrency int
	// ImportConcurrency is the number of jobs of the imports queue (tasks.QueueImports) run
	// at once: the import pages and the fetches of imported bookmarks
	// (BOOKMARKS_WORKER_IMPORT_CONCURRENCY, default 5). These handlers are the imports'
	// own, so a large import never takes those of the default queue.
	ImportConcurrency int
	// Lease is venturi's job lease (BOOKMARKS_WORKER_LEASE, default 30s). A job whose worker
	// died is retried about one lease later.
	Lease time.Duration
	// ShutdownGrace is how long running jobs may finish on SIGTERM (BOOKMARKS_WORKER_GRACE,
	// default 10s).
	ShutdownGrace time.Duration
	// PollInterval is the idle poll interval (BOOKMARKS_WORKER_POLL, default 1s).
	PollInterval time.Duration
	// BackoffBase is the retry backoff base (BOOKMARKS_WORKER_BACKOFF_BASE, default 1s).
	BackoffBase time.Duration
	// MaxFetchAttempts is how many failed fetches a bookmark gets before it is marked
	// failed (BOOKMARKS_FETCH_MAX_ATTEMPTS, default 5).
	MaxFetchAttempts int
	// LinkCheckPageSize, LinkCheckInterval and LinkCheckStaleAfter configure the link
	// checker, a singleton that walks every bookmark and refetches stale pages: bookmarks
	// per step (BOOKMARKS_LINKCHECK_PAGE_SIZE, default 100), the pause between steps
	// (BOOKMARKS_LINKCHECK_INTERVAL, default 5s) and the age of a fetch that makes it
	// stale (BOOKMARKS_LINKCHECK_STALE_AFTER, default 168h).
	LinkCheckPageSize   int
	LinkCheckInterval   time.Duration
	LinkCheckStaleAfter time.Duration
	// RefetchCron, RefetchTimeZone, RefetchStaleAfter, RefetchBatch and RefetchMaxBatches
	// configure the daily refetch, a durable cron schedule every worker registers at start:
	// its cron expression (BOOKMARKS_STALE_REFETCH_CRON, default "0 3 * * *") read in
	// BOOKMARKS_STALE_REFETCH_TIME_ZONE (default UTC), the age of a fetch that makes a bookmark
	// stale (BOOKMARKS_STALE_REFETCH_AFTER, default 168h), the bookmarks one batch
	// examines (BOOKMARKS_STALE_REFETCH_BATCH, default 500, at most 5000) and the batches one
	// sweep runs at most (BOOKMARKS_STALE_REFETCH_MAX_BATCHES, default 200, at most 1000).
	RefetchCron       string
	RefetchTimeZone   string
	RefetchStaleAfter time.Duration
	RefetchBatch      int
	RefetchMaxBatches int
	// MetricsAddr is the listen address of the Prometheus endpoint GET /metrics, a server
	// of its own (BOOKMARKS_WORKER_METRICS_ADDR, default DefaultMetricsAddr; set and empty
	// disables it). It is unauthenticated: keep it on loopback or on a network that only
	// the scraper reaches, never on a public address.
	MetricsAddr string
	// Fetch configures the fetcher:
	//   BOOKMARKS_FETCH_TIMEOUT (15s), BOOKMARKS_FETCH_MAX_BYTES (5 MiB),
	//   BOOKMARKS_FETCH_PORTS (comma-separated, default 80,443),
	//   BOOKMARKS_FETCH_ALLOW_LOOPBACK_PORT (tests only: allow 127.0.0.1 on this one port),
	//   BOOKMARKS_FETCH_STATIC_HOSTS (tests only: name=ip,name=ip resolved without DNS).
	Fetch fetch.Config
}

// TestOnlySettings describes the test-only settings that c has active, one entry each
// ("BOOKMARKS_FETCH_ALLOW_LOOPBACK_PORT=8000: the fetcher may connect to 127.0.0.1:8000"),
// or returns nil. They weaken the fetcher's SSRF protection for tests and local demos; the
// worker logs a warning naming them when it starts.
func (c Config) TestOnlySettings() []string {
	var s []string
	if p := c.Fetch.AllowLoopbackPort; p != 0 {
		s = append(s, fmt.Sprintf("BOOKMARKS_FETCH_ALLOW_LOOPBACK_PORT=%d: the fetcher may connect to 127.0.0.1:%d", p, p))
	}
	if len(c.Fetch.StaticHosts) > 0 {
		names := make([]string, 0, len(c.Fetch.StaticHosts))
		for name, ip := range c.Fetch.StaticHosts {
			names = append(names, name+"="+ip.String())
		}
		slices.Sort(names)
		s = append(s, "BOOKMARKS_FETCH_STATIC_HOSTS="+strings.Join(names, ",")+": these names resolve without DNS")
	}
	return s
}

// DefaultMetricsAddr is the default of Config.MetricsAddr: loopback only, next to the
// API's 9464.
const DefaultMetricsAddr = "127.0.0.1:9465"

// FromEnv reads the configuration from the process environment.
func FromEnv() (Config, error) { return Parse(os.LookupEnv) }

// Parse reads the configuration through lookup (os.LookupEnv): a variable set to the
// empty string counts as unset, except BOOKMARKS_WORKER_METRICS_ADDR, which it disables.
func Parse(lookup func(string) (string, bool)) (Config, error) {
	getenv := func(key string) string { v, _ := lookup(key); return v }
	c := Config{DatabaseURL: getenv("DATABASE_URL")}
	var errs []error
	var err error
	if c.MetricsAddr, err = telemetry.MetricsAddr(lookup, "BOOKMARKS_WORKER_METRICS_ADDR", DefaultMetricsAddr); err != nil {
		errs = append(errs, err)
	}
	num := func(key string, def int) int {
		v := getenv(key)
		if v == "" {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			errs = append(errs, fmt.Errorf("%s: want a positive integer, got %q", key, v))
		}
		return n
	}
	dur := func(key string, def time.Duration) time.Duration {
		v := getenv(key)
		if v == "" {
			return def
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("%s: want a positive duration such as 5s, got %q", key, v))
		}
		return d
	}
	if c.DatabaseURL == "" {
		errs = append(errs, errors.New("DATABASE_URL is not set"))
	}
	c.Concurrency = num("BOOKMARKS_WORKER_CONCURRENCY", 20)
	c.ImportConcurrency = num("BOOKMARKS_WORKER_IMPORT_CONCURRENCY", 5)
	c.Lease = dur("BOOKMARKS_WORKER_LEASE", 30*time.Second)
	c.ShutdownGrace = dur("BOOKMARKS_WORKER_GRACE", 10*time.Second)
	c.PollInterval = dur("BOOKMARKS_WORKER_POLL", time.Second)
	c.BackoffBase = dur("BOOKMARKS_WORKER_BACKOFF_BASE", time.Second)
	c.MaxFetchAttempts = num("BOOKMARKS_FETCH_MAX_ATTEMPTS", 5)
	c.LinkCheckPageSize = num("BOOKMARKS_LINKCHECK_PAGE_SIZE", 100)
	c.LinkCheckInterval = dur("BOOKMARKS_LINKCHECK_INTERVAL", 5*time.Second)
	c.LinkCheckStaleAfter = dur("BOOKMARKS_LINKCHECK_STALE_AFTER", 7*24*time.Hour)
	c.RefetchCron = getenv("BOOKMARKS_STALE_REFETCH_CRON")
	if c.RefetchCron == "" {
		c.RefetchCron = "0 3 * * *"
	}
	c.RefetchTimeZone = getenv("BOOKMARKS_STALE_REFETCH_TIME_ZONE")
	if c.RefetchTimeZone == "" {
		c.RefetchTimeZone = "UTC"
	}
	if _, err := (venturi.Schedule{Cron: c.RefetchCron, TimeZone: c.RefetchTimeZone}).NextFires(time.Now(), 1); err != nil {
		errs = append(errs, fmt.Errorf("BOOKMARKS_STALE_REFETCH_CRON / BOOKMARKS_STALE_REFETCH_TIME_ZONE: %w", err))
	}
	c.RefetchStaleAfter = dur("BOOKMARKS_STALE_REFETCH_AFTER", 7*24*time.Hour)
	if c.RefetchStaleAfter > 0 && c.RefetchStaleAfter < time.Second {
		errs = append(errs, fmt.Errorf("BOOKMARKS_STALE_REFETCH_AFTER: want at least 1s, got %v", c.RefetchStaleAfter))
	}
	c.RefetchBatch = num("BOOKMARKS_STALE_REFETCH_BATCH", 500)
	if c.RefetchBatch > tasks.MaxRefetchBatch {
		errs = append(errs, fmt.Errorf("BOOKMARKS_STALE_REFETCH_BATCH: at most %d, got %d", tasks.MaxRefetchBatch, c.RefetchBatch))
	}
	c.RefetchMaxBatches = num("BOOKMARKS_STALE_REFETCH_MAX_BATCHES", 200)
	if c.RefetchMaxBatches > tasks.MaxRefetchBatches {
		errs = append(errs, fmt.Errorf("BOOKMARKS_STALE_REFETCH_MAX_BATCHES: at most %d, got %d", tasks.MaxRefetchBatches, c.RefetchMaxBatches))
	}
	c.Fetch.Timeout = dur("BOOKMARKS_FETCH_TIMEOUT", 15*time.Second)
	c.Fetch.MaxBytes = int64(num("BOOKMARKS_FETCH_MAX_BYTES", 5<<20))
	if v := getenv("BOOKMARKS_FETCH_PORTS"); v != "" {
		for _, p := range strings.Split(v, ",") {
			n, err := strconv.ParseUint(strings.TrimSpace(p), 10, 16)
			if err != nil || n == 0 {
				errs = append(errs, fmt.Errorf("BOOKMARKS_FETCH_PORTS: bad port %q", p))
				continue
			}
			c.Fetch.Ports = append(c.Fetch.Ports, uint16(n))
		}
	}
	if v := getenv("BOOKMARKS_FETCH_ALLOW_LOOPBACK_PORT"); v != "" {
		n, err := strconv.ParseUint(v, 10, 16)
		if err != nil || n == 0 {
			errs = append(errs, fmt.Errorf("BOOKMARKS_FETCH_ALLOW_LOOPBACK_PORT: bad port %q", v))
		}
		c.Fetch.AllowLoopbackPort = uint16(n)
	}
	if v := getenv("BOOKMARKS_FETCH_STATIC_HOSTS"); v != "" {
		c.Fetch.StaticHosts = map[string]netip.Addr{}
		for _, pair := range strings.Split(v, ",") {
			name, ip, ok := strings.Cut(strings.TrimSpace(pair), "=")
			addr, err := netip.ParseAddr(ip)
			if !ok || name == "" || err != nil {
				errs = append(errs, fmt.Errorf("BOOKMARKS_FETCH_STATIC_HOSTS: want name=ip, got %q", pair))
				continue
			}
			c.Fetch.StaticHosts[strings.ToLower(name)] = addr
		}
	}
	return c, errors.Join(errs...)
}

package config

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestParseDefaults(t *testing.T) {
	t.Parallel()
	c, err := Parse(env(map[string]string{"DATABASE_URL": "postgres://x"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Concurrency != 20 || c.ImportConcurrency != 5 || c.Lease != 30*time.Second || c.Fetch.AllowLoopbackPort != 0 || c.Fetch.StaticHosts != nil || c.Fetch.Ports != nil {
		t.Fatalf("defaults = %+v", c)
	}
}

func TestParseTestSettingsAndErrors(t *testing.T) {
	t.Parallel()
	c, err := Parse(env(map[string]string{
		"DATABASE_URL":                        "postgres://x",
		"BOOKMARKS_FETCH_ALLOW_LOOPBACK_PORT": "8080",
		"BOOKMARKS_FETCH_STATIC_HOSTS":        "Meta.test=169.254.169.254, ten.test=10.0.0.1",
		"BOOKMARKS_FETCH_PORTS":               "80,443,8443",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Fetch.AllowLoopbackPort != 8080 || c.Fetch.StaticHosts["meta.test"] != netip.MustParseAddr("169.254.169.254") || len(c.Fetch.Ports) != 3 {
		t.Fatalf("config = %+v", c)
	}
	if _, err := Parse(env(map[string]string{"BOOKMARKS_WORKER_LEASE": "soon"})); err == nil {
		t.Fatal("want errors for a missing DATABASE_URL and a bad duration")
	}
}

func TestTestOnlySettings(t *testing.T) {
	t.Parallel()
	c, err := Parse(env(map[string]string{"DATABASE_URL": "postgres://x"}))
	if err != nil || c.TestOnlySettings() != nil {
		t.Fatalf("defaults: %v, test-only settings %q", err, c.TestOnlySettings())
	}
	c, err = Parse(env(map[string]string{
		"DATABASE_URL":                        "postgres://x",
		"BOOKMARKS_FETCH_ALLOW_LOOPBACK_PORT": "8000",
		"BOOKMARKS_FETCH_STATIC_HOSTS":        "b.test=10.0.0.1,a.test=169.254.169.254",
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"BOOKMARKS_FETCH_ALLOW_LOOPBACK_PORT=8000: the fetcher may connect to 127.0.0.1:8000",
		"BOOKMARKS_FETCH_STATIC_HOSTS=a.test=169.254.169.254,b.test=10.0.0.1: these names resolve without DNS",
	}
	if got := c.TestOnlySettings(); !slices.Equal(got, want) {
		t.Fatalf("TestOnlySettings() = %q, want %q", got, want)
	}
}

func TestParseImportConcurrency(t *testing.T) {
	t.Parallel()
	c, err := Parse(env(map[string]string{"DATABASE_URL": "postgres://x", "BOOKMARKS_WORKER_IMPORT_CONCURRENCY": "2"}))
	if err != nil || c.ImportConcurrency != 2 || c.Concurrency != 20 {
		t.Fatalf("config %+v (%v), want 2 import handlers beside the default 20", c, err)
	}
	for _, v := range []string{"0", "-1", "many"} {
		if _, err := Parse(env(map[string]string{"DATABASE_URL": "postgres://x", "BOOKMARKS_WORKER_IMPORT_CONCURRENCY": v})); err == nil {
			t.Errorf("BOOKMARKS_WORKER_IMPORT_CONCURRENCY=%q accepted", v)
		}
	}
}

func TestParseRefetch(t *testing.T) {
	t.Parallel()
	c, err := Parse(env(map[string]string{"DATABASE_URL": "postgres://x"}))
	if err != nil || c.RefetchCron != "0 3 * * *" || c.RefetchTimeZone != "UTC" || c.RefetchStaleAfter != 7*24*time.Hour ||
		c.RefetchBatch != 500 || c.RefetchMaxBatches != 200 {
		t.Fatalf("defaults %+v, %v", c, err)
	}
	c, err = Parse(env(map[string]string{"DATABASE_URL": "postgres://x", "BOOKMARKS_STALE_REFETCH_CRON": "30 4 * * mon",
		"BOOKMARKS_STALE_REFETCH_TIME_ZONE": "Europe/Berlin", "BOOKMARKS_STALE_REFETCH_AFTER": "72h", "BOOKMARKS_STALE_REFETCH_BATCH": "100",
		"BOOKMARKS_STALE_REFETCH_MAX_BATCHES": "10"}))
	if err != nil || c.RefetchCron != "30 4 * * mon" || c.RefetchTimeZone != "Europe/Berlin" || c.RefetchStaleAfter != 72*time.Hour ||
		c.RefetchBatch != 100 || c.RefetchMaxBatches != 10 {
		t.Fatalf("settings %+v, %v", c, err)
	}
	for k, v := range map[string]string{
		"BOOKMARKS_STALE_REFETCH_CRON":        "0 3 * *",
		"BOOKMARKS_STALE_REFETCH_TIME_ZONE":   "Mars/Olympus",
		"BOOKMARKS_STALE_REFETCH_AFTER":       "-1h",
		"BOOKMARKS_STALE_REFETCH_BATCH":       "5001",
		"BOOKMARKS_STALE_REFETCH_MAX_BATCHES": "0",
	} {
		if _, err := Parse(env(map[string]string{"DATABASE_URL": "postgres://x", k: v})); err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("%s=%q: %v", k, v, err)
		}
	}
}

// BOOKMARKS_WORKER_METRICS_ADDR: unset is loopback, empty disables, a bad address is refused.
func TestParseMetricsAddr(t *testing.T) {
	t.Parallel()
	c, err := Parse(env(map[string]string{"DATABASE_URL": "postgres://x"}))
	if err != nil || c.MetricsAddr != DefaultMetricsAddr {
		t.Fatalf("default: %q, %v", c.MetricsAddr, err)
	}
	c, err = Parse(env(map[string]string{"DATABASE_URL": "postgres://x", "BOOKMARKS_WORKER_METRICS_ADDR": ""}))
	if err != nil || c.MetricsAddr != "" {
		t.Fatalf("empty: %q, %v", c.MetricsAddr, err)
	}
	_, err = Parse(env(map[string]string{"DATABASE_URL": "postgres://x", "BOOKMARKS_WORKER_METRICS_ADDR": "metrics"}))
	if err == nil || !strings.Contains(err.Error(), "BOOKMARKS_WORKER_METRICS_ADDR") {
		t.Fatalf("bad address: %v", err)
	}
}

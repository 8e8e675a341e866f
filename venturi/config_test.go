package venturi_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/venturi-dev/venturi"
)

// TestConfigInvalidFields: every invalid field makes NewWorker return a ConfigError that
// names it, never a worker that panics later (a negative Lease used to crash the lease
// ticker after Start had returned nil).
func TestConfigInvalidFields(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	for _, tc := range []struct {
		field string
		cfg   venturi.Config
	}{
		{"Concurrency", venturi.Config{Concurrency: -1}},
		{"ClaimBatch", venturi.Config{ClaimBatch: -1}},
		{"ClaimBatch", venturi.Config{ClaimBatch: venturi.MaxClaimBatch + 1}},
		{"Lease", venturi.Config{Lease: -time.Second}},
		{"Lease", venturi.Config{Lease: 2 * time.Nanosecond}},
		{"Lease", venturi.Config{Lease: venturi.MinLease - 1}},
		{"ShutdownGrace", venturi.Config{ShutdownGrace: -time.Second}},
		{"PollInterval", venturi.Config{PollInterval: -time.Second}},
		{"PollInterval", venturi.Config{PollInterval: time.Microsecond}},
		{"FetchCooldown", venturi.Config{FetchCooldown: -time.Millisecond}},
		{"RetainCompleted", venturi.Config{RetainCompleted: -time.Hour}},
		{"RetainDead", venturi.Config{RetainDead: -time.Hour}},
		{"MaintenanceInterval", venturi.Config{MaintenanceInterval: -time.Second}},
		{"MaintenanceInterval", venturi.Config{MaintenanceInterval: time.Millisecond}},
		{"StatsInterval", venturi.Config{StatsInterval: -time.Second}},
		{"StatsInterval", venturi.Config{StatsInterval: venturi.MinStatsInterval - 1}},
		{"Backoff.Base", venturi.Config{Backoff: venturi.Backoff{Base: -time.Second}}},
		{"Backoff.Cap", venturi.Config{Backoff: venturi.Backoff{Cap: -time.Second}}},
		{"Backoff.Cap", venturi.Config{Backoff: venturi.Backoff{Base: time.Minute, Cap: time.Second}}},
		{"JitterFraction", venturi.Config{JitterFraction: 1.5}},
		{"JitterFraction", venturi.Config{JitterFraction: math.NaN()}},
		{"JitterFraction", venturi.Config{JitterFraction: math.Inf(1)}},
		{"ID", venturi.Config{ID: strings.Repeat("w", venturi.MaxWorkerIDBytes+1)}},
		{"ID", venturi.Config{ID: "bad\xffutf8"}},
		{"ID", venturi.Config{ID: "nul\x00"}},
	} {
		w, err := venturi.NewWorker(pool, struct{}{}, tc.cfg)
		var ce *venturi.ConfigError
		if w != nil || !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("%+v: NewWorker = %v, %v; want a ConfigError for %s", tc.cfg, w, err, tc.field)
			continue
		}
		if !strings.Contains(err.Error(), "Config."+tc.field) {
			t.Errorf("error %q does not name Config.%s", err, tc.field)
		}
	}
}

// TestConfigReportsEveryInvalidField: one error lists all the fields that are wrong.
func TestConfigReportsEveryInvalidField(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	_, err := venturi.NewWorker(pool, struct{}{}, venturi.Config{Lease: -1, MaintenanceInterval: -1, Concurrency: -5})
	for _, f := range []string{"Config.Lease", "Config.MaintenanceInterval", "Config.Concurrency"} {
		if err == nil || !strings.Contains(err.Error(), f) {
			t.Errorf("error %v does not name %s", err, f)
		}
	}
}

// TestConfigValidEdges: zero, the documented "negative disables" values and the minimums
// are accepted, and a worker built from them starts and stops.
func TestConfigValidEdges(t *testing.T) {
	slow(t)
	t.Parallel()
	pool := newDB(t)
	for _, cfg := range []venturi.Config{
		{},
		{Prefetch: -1, JitterFraction: -1, MaxFailures: -1, JobTimeout: -1},
		{Lease: venturi.MinLease, PollInterval: venturi.MinPollInterval, MaintenanceInterval: venturi.MinMaintenanceInterval,
			StatsInterval: venturi.MinStatsInterval},
		{ClaimBatch: venturi.MaxClaimBatch, JitterFraction: 1, Backoff: venturi.Backoff{Base: time.Second, Cap: time.Second}},
	} {
		cfg.Logger = testLogger()
		w := newWorker(t, pool, struct{}{}, cfg)
		venturi.MustRegister[noteTask](w)
		startWorker(t, w)
		stopWorker(t, w)
	}
}

// TestNewWorkerNilPool: a nil pool is an error, not a panic at Start.
func TestNewWorkerNilPool(t *testing.T) {
	t.Parallel()
	if w, err := venturi.NewWorker(nil, struct{}{}, venturi.Config{}); w != nil || err == nil {
		t.Fatalf("NewWorker(nil) = %v, %v", w, err)
	}
}

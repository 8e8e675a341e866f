package venturiotel_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/venturiotel"
)

// counting wraps a real Queue.Stats and counts its calls.
func counting(q *venturi.Queue, n *atomic.Int64) func(context.Context) (venturi.Stats, error) {
	return func(ctx context.Context) (venturi.Stats, error) {
		n.Add(1)
		return q.Stats(ctx)
	}
}

// gauge returns the value of the gauge's point whose attributes match want, and whether
// there is one.
func gauge[N int64 | float64](rm metricdata.ResourceMetrics, name string, want map[string]string) (N, bool) {
	m := find(rm, name)
	if m == nil {
		return 0, false
	}
	for _, p := range m.Data.(metricdata.Gauge[N]).DataPoints {
		if matches(p.Attributes, want) {
			return p.Value, true
		}
	}
	return 0, false
}

// The gauges come from a stats sample taken by a real worker: depth per state (zeros
// included), the lag of the oldest available job, the pause and the sample's time, all
// from one read that the cache serves to the next collection.
func TestGaugesFromAStatsSample(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	x := newTelemetry(t, venturiotel.Config{StatsCacheTTL: time.Hour})
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	ctx := context.Background()

	var reads atomic.Int64
	if _, err := x.tel.ObserveStatsFrom(counting(q, &reads)); err != nil {
		t.Fatal(err)
	}
	// No worker has sampled: nothing is observed.
	if rm := x.collect(t); find(rm, "venturi.queue.depth") != nil || find(rm, "venturi.stats.sampled_timestamp") != nil {
		t.Fatalf("gauges observed before any sample: %+v", rm.ScopeMetrics)
	}

	if err := q.PauseQueue(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := q.Enqueue(ctx, otelTask{}, venturi.OnQueue("held")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := q.Enqueue(ctx, otelTask{}, venturi.OnQueue("held"), venturi.After(time.Hour)); err != nil {
		t.Fatal(err)
	}
	startWorker(t, pool, x.tel, &seenBaggage{}, 0) // it samples the stats table
	sample := awaitSample(t, q, func(s venturi.Stats) bool {
		held := queueStats(s, "held")
		return held != nil && held.Counts[venturi.StateAvailable] == 3 && held.Counts[venturi.StateScheduled] == 1
	})

	// A fresh observer: its first collection reads the sample above (or a later one with
	// the same counts: nothing else runs in "held").
	x = newTelemetry(t, venturiotel.Config{StatsCacheTTL: time.Hour})
	reads.Store(0)
	if _, err := x.tel.ObserveStatsFrom(counting(q, &reads)); err != nil {
		t.Fatal(err)
	}
	rm := x.collect(t)
	held := map[string]string{"queue": "held"}
	for state, want := range map[venturi.State]int64{venturi.StateAvailable: 3, venturi.StateScheduled: 1,
		venturi.StateRunning: 0, venturi.StateWaiting: 0, venturi.StateCompleted: 0, venturi.StateDead: 0, venturi.StateCancelled: 0} {
		got, ok := gauge[int64](rm, "venturi.queue.depth", map[string]string{"queue": "held", "state": string(state)})
		if !ok || got != want {
			t.Errorf("depth{queue=held,state=%s} = %d (observed %v), want %d", state, got, ok, want)
		}
	}
	if p, ok := gauge[int64](rm, "venturi.queue.paused", held); !ok || p != 1 {
		t.Errorf("paused{queue=held} = %d (observed %v), want 1", p, ok)
	}
	if age, ok := gauge[float64](rm, "venturi.queue.oldest_available_age", held); !ok || age <= 0 {
		t.Errorf("oldest available age{queue=held} = %v (observed %v), want > 0: three jobs are due", age, ok)
	}
	ts, ok := gauge[float64](rm, "venturi.stats.sampled_timestamp", nil)
	if !ok || ts < float64(sample.SampledAt.Unix()) {
		t.Errorf("sampled timestamp %v (observed %v), want at least the awaited sample's %v", ts, ok, sample.SampledAt)
	}
	if m := find(rm, "venturi.queue.oldest_available_age"); m.Unit != "s" {
		t.Errorf("age unit %q", m.Unit)
	}
	// Within the TTL, another collection reads nothing.
	x.collect(t)
	if n := reads.Load(); n != 1 {
		t.Errorf("two collections within the cache's TTL read the stats %d times, want 1", n)
	}
}

// With a short TTL, a collection after it reads again.
func TestStatsCacheExpires(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	x := newTelemetry(t, venturiotel.Config{StatsCacheTTL: time.Nanosecond})
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	var reads atomic.Int64
	if _, err := x.tel.ObserveStatsFrom(counting(q, &reads)); err != nil {
		t.Fatal(err)
	}
	x.collect(t)
	x.collect(t)
	if n := reads.Load(); n != 2 {
		t.Errorf("two collections after the TTL read the stats %d times, want 2", n)
	}
}

// A negative cache TTL or timeout is refused.
func TestNewRefusesNegativeDurations(t *testing.T) {
	t.Parallel()
	for _, cfg := range []venturiotel.Config{{StatsCacheTTL: -time.Second}, {StatsTimeout: -time.Second}} {
		if _, err := venturiotel.New(cfg); err == nil {
			t.Errorf("New(%+v) accepted a negative duration", cfg)
		}
	}
}

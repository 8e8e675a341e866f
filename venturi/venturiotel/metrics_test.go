package venturiotel_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/venturiotel"
)

// find returns the metric named name, or nil.
func find(rm metricdata.ResourceMetrics, name string) *metricdata.Metrics {
	for _, sm := range rm.ScopeMetrics {
		for i := range sm.Metrics {
			if sm.Metrics[i].Name == name {
				return &sm.Metrics[i]
			}
		}
	}
	return nil
}

// matches reports whether set has every attribute of want.
func matches(set attribute.Set, want map[string]string) bool {
	for k, v := range want {
		if got, ok := set.Value(attribute.Key(k)); !ok || got.String() != v {
			return false
		}
	}
	return true
}

// counterValue sums the points of an int64 counter whose attributes match want.
func counterValue(rm metricdata.ResourceMetrics, name string, want map[string]string) int64 {
	m := find(rm, name)
	if m == nil {
		return 0
	}
	var n int64
	for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
		if matches(p.Attributes, want) {
			n += p.Value
		}
	}
	return n
}

// histogramCount sums the counts of a float64 histogram's points whose attributes match
// want.
func histogramCount(rm metricdata.ResourceMetrics, name string, want map[string]string) uint64 {
	m := find(rm, name)
	if m == nil {
		return 0
	}
	var n uint64
	for _, p := range m.Data.(metricdata.Histogram[float64]).DataPoints {
		if matches(p.Attributes, want) {
			n += p.Count
		}
	}
	return n
}

// Enqueues count by action; runs, through a real worker, by how their journal says they
// ended: completed, failed (retried) and dead (the backstop and a permanent error), each
// with a duration, and each run's wait.
func TestCountersAndHistogramsOfCompletedFailedAndDeadRuns(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	x := newTelemetry(t, venturiotel.Config{})
	q := venturi.NewQueue(pool, venturi.QueueConfig{Middleware: []venturi.EnqueueMiddleware{x.tel.Enqueue}})
	ctx := context.Background()

	// Enqueued before the worker starts: the second of the pair merges into the first.
	var ids []venturi.Result
	for _, task := range []otelTask{{Do: "complete"}, {Do: "fail_once"}, {Do: "fail"}, {Do: "permanent"},
		{Do: "complete", Key: "pair"}, {Do: "complete", Key: "pair"}} {
		r, err := q.Enqueue(ctx, task)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r)
	}
	startWorker(t, pool, x.tel, &seenBaggage{}, 2) // the backstop: dead after 2 failures
	for i, state := range []venturi.State{venturi.StateCompleted, venturi.StateCompleted, venturi.StateDead,
		venturi.StateDead, venturi.StateCompleted} {
		waitState(t, q, ids[i].ID, state)
	}

	rm := x.collect(t)
	kind := map[string]string{"queue": venturi.DefaultQueue, "kind": "otel_task"}
	with := func(k, v string) map[string]string {
		m := map[string]string{k: v}
		for a, b := range kind {
			m[a] = b
		}
		return m
	}
	for action, want := range map[string]int64{"inserted": 5, "replaced": 1} {
		if got := counterValue(rm, "venturi.jobs.enqueued", with("action", action)); got != want {
			t.Errorf("enqueued action=%s: %d, want %d", action, got, want)
		}
	}
	// complete 1, fail_once 2 (failed, completed), fail 2 (failed, dead: the backstop),
	// permanent 1 (dead), the pair 1.
	for outcome, want := range map[string]int64{"completed": 3, "failed": 2, "dead": 2} {
		if got := counterValue(rm, "venturi.jobs.finished", with("outcome", outcome)); got != want {
			t.Errorf("finished outcome=%s: %d, want %d", outcome, got, want)
		}
		if got := histogramCount(rm, "venturi.job.run.duration", with("outcome", outcome)); got != uint64(want) {
			t.Errorf("run duration outcome=%s: %d observations, want %d", outcome, got, want)
		}
	}
	if got := counterValue(rm, "venturi.jobs.finished", kind); got != 7 {
		t.Errorf("finished: %d runs in all, want 7", got)
	}
	if got := histogramCount(rm, "venturi.job.wait", kind); got != 7 {
		t.Errorf("wait: %d observations, want one per run (7)", got)
	}
	wait := find(rm, "venturi.job.wait").Data.(metricdata.Histogram[float64]).DataPoints[0]
	if wait.Sum <= 0 {
		t.Errorf("wait sum %v: jobs enqueued before the worker started waited", wait.Sum)
	}
	if m := find(rm, "venturi.job.run.duration"); m.Unit != "s" || find(rm, "venturi.job.wait").Unit != "s" {
		t.Errorf("histogram units %q, %q, want s", m.Unit, find(rm, "venturi.job.wait").Unit)
	}
}

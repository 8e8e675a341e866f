package venturiotel_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/venturiotel"
)

// scrape returns the text exposition format of h.
func scrape(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %d %v", resp.StatusCode, err)
	}
	return string(b)
}

// Through the OpenTelemetry Prometheus exporter (default translation), a scrape shows the
// metric names, types and labels that the package documents: the counters and
// histograms of real runs, and the gauges of a stats sample.
func TestPrometheusNamesOfAScrape(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	x := newTelemetry(t, venturiotel.Config{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))})
	q := venturi.NewQueue(pool, venturi.QueueConfig{Middleware: []venturi.EnqueueMiddleware{x.tel.Enqueue}})
	ctx := context.Background()
	if err := q.PauseQueue(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Enqueue(ctx, otelTask{}, venturi.OnQueue("held")); err != nil {
		t.Fatal(err)
	}
	r, err := q.Enqueue(ctx, otelTask{})
	if err != nil {
		t.Fatal(err)
	}
	startWorker(t, pool, x.tel, &seenBaggage{}, 0)
	waitState(t, q, r.ID, venturi.StateCompleted)
	awaitSample(t, q, func(s venturi.Stats) bool {
		held := queueStats(s, "held")
		return held != nil && held.Paused && held.Counts[venturi.StateAvailable] == 1
	})
	if _, err := x.tel.ObserveStats(q); err != nil {
		t.Fatal(err)
	}

	text := scrape(t, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	for _, want := range []string{
		`# TYPE venturi_jobs_enqueued_total counter`,
		`venturi_jobs_enqueued_total{action="inserted",kind="otel_task",` + scope + `,queue="default"} 1`,
		`# TYPE venturi_jobs_finished_total counter`,
		`venturi_jobs_finished_total{kind="otel_task",` + scope + `,outcome="completed",queue="default"} 1`,
		`# TYPE venturi_job_run_duration_seconds histogram`,
		`venturi_job_run_duration_seconds_count{kind="otel_task",` + scope + `,outcome="completed",queue="default"} 1`,
		`venturi_job_run_duration_seconds_bucket{kind="otel_task",` + scope + `,outcome="completed",queue="default",le="0.005"}`,
		`# TYPE venturi_job_wait_seconds histogram`,
		`venturi_job_wait_seconds_count{kind="otel_task",` + scope + `,queue="default"} 1`,
		`# TYPE venturi_queue_depth gauge`,
		`venturi_queue_depth{` + scope + `,queue="held",state="available"} 1`,
		`venturi_queue_depth{` + scope + `,queue="held",state="dead"} 0`,
		`# TYPE venturi_queue_oldest_available_age_seconds gauge`,
		`venturi_queue_oldest_available_age_seconds{` + scope + `,queue="held"}`,
		`# TYPE venturi_queue_paused gauge`,
		`venturi_queue_paused{` + scope + `,queue="held"} 1`,
		`# TYPE venturi_stats_sampled_timestamp_seconds gauge`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the scrape has no %q", want)
		}
	}
	// No job ID is a label: venturi's series carry only the documented labels.
	labels := regexp.MustCompile(`(?m)^venturi_[a-z_]+\{([^}]*)\}`)
	for _, m := range labels.FindAllStringSubmatch(text, -1) {
		for _, kv := range strings.Split(m[1], ",") {
			switch k, _, _ := strings.Cut(kv, "="); k {
			case "queue", "kind", "action", "outcome", "state", "le", "otel_scope_name", "otel_scope_version", "otel_scope_schema_url":
			default:
				t.Errorf("unexpected label %q in %s", k, m[0])
			}
		}
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", text)
	}
}

// scope is the exporter's instrumentation scope labels on every series.
const scope = `otel_scope_name="` + venturiotel.ScopeName + `",otel_scope_schema_url="",otel_scope_version=""`

func queueStats(s venturi.Stats, queue string) *venturi.QueueStats {
	for i := range s.Queues {
		if s.Queues[i].Queue == queue {
			return &s.Queues[i]
		}
	}
	return nil
}

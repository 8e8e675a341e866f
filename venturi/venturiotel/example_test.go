package venturiotel_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/venturiotel"
)

// Thumbnail fails its first run.
type Thumbnail struct {
	Photo string `json:"photo"`
}

func (Thumbnail) Kind() string { return "thumbnail" }

func (Thumbnail) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	if run.RunCount() == 1 {
		return venturi.Outcome{}, venturi.RetryIn(time.Millisecond, errors.New("storage busy"))
	}
	return venturi.Completed(), nil
}

// A request enqueues a job; each of its runs gets a span in a trace of its own, linked to
// the enqueue's span, and the counters say how the runs ended. A service passes its own
// providers (or none: the otel globals) and exports them (see the bookmarks app).
func Example() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()

	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	reader := sdkmetric.NewManualReader()
	tel, err := venturiotel.New(venturiotel.Config{TracerProvider: tp,
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	if err != nil {
		log.Fatal(err)
	}
	q := venturi.NewQueue(pool, venturi.QueueConfig{Middleware: []venturi.EnqueueMiddleware{tel.Enqueue}})
	w, err := venturi.NewWorker(pool, struct{}{}, venturi.Config{PollInterval: 10 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler), Middleware: []venturi.WorkMiddleware{tel.Work}})
	if err != nil {
		log.Fatal(err)
	}
	venturi.MustRegister[Thumbnail](w)
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(context.Background())

	reqCtx, req := tp.Tracer("app").Start(ctx, "POST /photos")
	res, err := q.Enqueue(reqCtx, Thumbnail{Photo: "cat.jpg"})
	req.End()
	if err != nil {
		log.Fatal(err)
	}
	if _, err := awaitState(q, res.ID, venturi.StateCompleted); err != nil {
		log.Fatal(err)
	}

	byID := map[string]string{}
	for _, s := range spans.GetSpans() {
		byID[s.SpanContext.SpanID().String()] = s.Name
	}
	// The enqueue's span first, then the runs' (spans are recorded as they end, and a fast
	// first run can end before the enqueue's span does).
	for _, s := range spans.GetSpans() {
		if s.Parent.IsValid() {
			fmt.Printf("%s (%v), child of %s\n", s.Name, s.SpanKind, byID[s.Parent.SpanID().String()])
		}
	}
	for _, s := range spans.GetSpans() {
		if !s.Parent.IsValid() && len(s.Links) > 0 {
			fmt.Printf("%s (%v), root, linked to %s\n", s.Name, s.SpanKind, byID[s.Links[0].SpanContext.SpanID().String()])
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	for _, outcome := range []string{"failed", "completed"} {
		fmt.Printf("venturi.jobs.finished{outcome=%s} %d\n", outcome,
			counterValue(rm, "venturi.jobs.finished", map[string]string{"kind": "thumbnail", "outcome": outcome}))
	}
	// Output:
	// venturi.enqueue thumbnail (producer), child of POST /photos
	// venturi.work thumbnail (consumer), root, linked to venturi.enqueue thumbnail
	// venturi.work thumbnail (consumer), root, linked to venturi.enqueue thumbnail
	// venturi.jobs.finished{outcome=failed} 1
	// venturi.jobs.finished{outcome=completed} 1
}

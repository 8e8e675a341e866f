package venturiotel

import (
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the tracer and the meter.
const ScopeName = "github.com/venturi-dev/venturi/venturiotel"

// DefaultStatsCacheTTL is the default of [Config].StatsCacheTTL.
const DefaultStatsCacheTTL = time.Second

// DefaultStatsTimeout is the default of [Config].StatsTimeout.
const DefaultStatsTimeout = 5 * time.Second

// DurationBuckets are the histograms' bucket boundaries, in seconds: from 5 ms (a no-op
// job) to an hour (a long import).
var DurationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// Config configures [New]. The zero Config uses the otel globals.
type Config struct {
	// MeterProvider makes the instruments. Default: otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// TracerProvider makes the spans. Default: otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// Propagator writes the enqueue's trace context into the job's metadata and reads it
	// back in each run. Default: otel.GetTextMapPropagator(); while that propagates
	// nothing (no global propagator was set), W3C Trace Context
	// (propagation.TraceContext), so that runs link to their enqueues out of the box.
	Propagator propagation.TextMapPropagator
	// ParentFromEnqueue makes each run's span a child of the enqueue's span (one trace per
	// job, however long it lives) instead of the root of a trace of its own that links to
	// the enqueue's span (the default; see the package documentation).
	ParentFromEnqueue bool
	// StatsCacheTTL is how long one read of the stats table serves the gauges of
	// [Instrumentation.ObserveStats]. Default DefaultStatsCacheTTL (1s).
	StatsCacheTTL time.Duration
	// StatsTimeout bounds one read of the stats table. Default DefaultStatsTimeout (5s).
	StatsTimeout time.Duration
}

// Instrumentation holds the tracer and the instruments. Its methods Enqueue and Work are
// venturi middleware; it is safe for concurrent use.
type Instrumentation struct {
	tracer     trace.Tracer
	meter      metric.Meter
	propagator propagation.TextMapPropagator
	parent     bool
	statsTTL   time.Duration
	statsWait  time.Duration

	enqueued metric.Int64Counter
	finished metric.Int64Counter
	duration metric.Float64Histogram
	wait     metric.Float64Histogram
}

// New makes the tracer and the instruments of cfg's providers.
func New(cfg Config) (*Instrumentation, error) {
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = otel.GetMeterProvider()
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	if cfg.Propagator == nil {
		cfg.Propagator = otel.GetTextMapPropagator()
	}
	if cfg.StatsCacheTTL < 0 || cfg.StatsTimeout < 0 {
		return nil, errors.New("venturiotel: StatsCacheTTL and StatsTimeout must not be negative")
	}
	if cfg.StatsCacheTTL == 0 {
		cfg.StatsCacheTTL = DefaultStatsCacheTTL
	}
	if cfg.StatsTimeout == 0 {
		cfg.StatsTimeout = DefaultStatsTimeout
	}
	in := &Instrumentation{
		tracer:     cfg.TracerProvider.Tracer(ScopeName),
		meter:      cfg.MeterProvider.Meter(ScopeName),
		propagator: cfg.Propagator,
		parent:     cfg.ParentFromEnqueue,
		statsTTL:   cfg.StatsCacheTTL,
		statsWait:  cfg.StatsTimeout,
	}
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	in.enqueued, err = in.meter.Int64Counter("venturi.jobs.enqueued", metric.WithUnit("{job}"),
		metric.WithDescription("Enqueues that returned a job, by queue, kind and action (inserted, kept, replaced, merged, independent)."))
	add(err)
	in.finished, err = in.meter.Int64Counter("venturi.jobs.finished", metric.WithUnit("{run}"),
		metric.WithDescription("Runs that ended, by queue, kind and outcome (the journal event of the run's end, or lost)."))
	add(err)
	in.duration, err = in.meter.Float64Histogram("venturi.job.run.duration", metric.WithUnit("s"),
		metric.WithDescription("How long runs took, from the handler chain's start to its return."),
		metric.WithExplicitBucketBoundaries(DurationBuckets...))
	add(err)
	in.wait, err = in.meter.Float64Histogram("venturi.job.wait", metric.WithUnit("s"),
		metric.WithDescription("How long jobs waited for a worker: from their due time to their run's claim (database clock)."),
		metric.WithExplicitBucketBoundaries(DurationBuckets...))
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("venturiotel: instruments: %w", err)
	}
	return in, nil
}

// textMap returns the propagator to use now: the configured one, or W3C Trace Context
// while it propagates nothing (the global default before otel.SetTextMapPropagator).
func (in *Instrumentation) textMap() propagation.TextMapPropagator {
	if len(in.propagator.Fields()) == 0 {
		return propagation.TraceContext{}
	}
	return in.propagator
}

// Attribute keys of spans (messaging semantic conventions, and venturi's own) and of
// metrics (short: they become Prometheus labels).
const (
	keyMessagingSystem  = attribute.Key("messaging.system")
	keyOperationType    = attribute.Key("messaging.operation.type")
	keyOperationName    = attribute.Key("messaging.operation.name")
	keyDestination      = attribute.Key("messaging.destination.name")
	keyMessageID        = attribute.Key("messaging.message.id")
	keySpanKind         = attribute.Key("venturi.kind")
	keySpanRun          = attribute.Key("venturi.run")
	keySpanWorker       = attribute.Key("venturi.worker")
	keySpanOutcome      = attribute.Key("venturi.outcome")
	keySpanAction       = attribute.Key("venturi.action")
	keySpanTx           = attribute.Key("venturi.tx")
	keySpanWorkflow     = attribute.Key("venturi.workflow.id")
	keySpanNode         = attribute.Key("venturi.workflow.node")
	keyExceptionType    = attribute.Key("exception.type")
	keyExceptionMessage = attribute.Key("exception.message")
	keyExceptionStack   = attribute.Key("exception.stacktrace")

	keyQueue   = attribute.Key("queue")
	keyKind    = attribute.Key("kind")
	keyAction  = attribute.Key("action")
	keyOutcome = attribute.Key("outcome")
	keyState   = attribute.Key("state")
)

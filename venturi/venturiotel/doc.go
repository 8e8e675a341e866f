// Package venturiotel instruments venturi with OpenTelemetry: a span per enqueue and per
// run, the enqueue's trace context carried with the job, counters and histograms of
// enqueues and runs, and gauges of queue depth and lag read from venturi's stats table.
//
// It is a module of its own (github.com/venturi-dev/venturi/venturiotel), so venturi's
// go.mod stays pgx and ulid: only services that import this package depend on
// OpenTelemetry.
//
//	tel, err := venturiotel.New(venturiotel.Config{}) // the otel globals by default
//	q := venturi.NewQueue(pool, venturi.QueueConfig{Middleware: []venturi.EnqueueMiddleware{tel.Enqueue}})
//	w, err := venturi.NewWorker(pool, app, venturi.Config{Middleware: []venturi.WorkMiddleware{tel.Work}})
//	reg, err := tel.ObserveStats(q) // depth, lag and paused gauges: in the processes that export them (the API's)
//
// # Traces
//
// [Instrumentation.Enqueue] starts a producer span "venturi.enqueue <kind>" (a child of the
// caller's span, such as an HTTP request's) and writes its context into the job's
// metadata with the propagator (W3C traceparent and tracestate keys). [Instrumentation.Work]
// starts a consumer span "venturi.work <kind>" per run. By default that span is the root
// of a trace of its own, linked to the enqueue's span: a job runs long after its request
// ended, may run many times (retries, pauses, waits over hours or days) and is often
// enqueued by cron or a merge of many requests, so one request's trace would grow without
// end and its duration would mean nothing. [Config].ParentFromEnqueue makes each run a
// child of the enqueue's span instead (one trace per job). Baggage carried in the
// metadata reaches the handler's context either way.
//
// Span attributes: messaging.system ("venturi"), messaging.operation.type ("send" or
// "process"), messaging.operation.name ("enqueue" or "work"), messaging.destination.name
// (the queue), messaging.message.id (the job ID), venturi.kind, and on runs venturi.run
// (the run's number), venturi.worker and venturi.outcome (the journal event of the run's
// end, see below); on enqueues venturi.action (inserted, kept, replaced, merged,
// independent); on a workflow's jobs venturi.workflow.id and venturi.workflow.node (from
// venturi.MetaWorkflow and venturi.MetaNode). A workflow enqueued in a request's span is
// one trace: each node's enqueue span is a child of the request's, and a job spawned at
// run time inherits its spawner's trace context with its metadata. A run that fails or dies has status Error with the error recorded; a
// handler's panic is recorded as an exception event of type "panic" with its stack.
//
// # Metrics
//
// With the OpenTelemetry Prometheus exporter's default translation the instruments are
// exported as:
//
//	venturi_jobs_enqueued_total{queue,kind,action}            counter: enqueues that returned a job
//	venturi_jobs_finished_total{queue,kind,outcome}           counter: runs, by how they ended
//	venturi_job_run_duration_seconds{queue,kind,outcome}      histogram: the handler chain's duration
//	venturi_job_wait_seconds{queue,kind}                      histogram: due time to the run's start
//	venturi_queue_depth{queue,state}                          gauge: jobs by state (stats table)
//	venturi_queue_oldest_available_age_seconds{queue}         gauge: lag of the oldest available job
//	venturi_queue_paused{queue}                               gauge: 1 while the queue is paused
//	venturi_stats_sampled_timestamp_seconds                   gauge: when the stats sample was taken
//
// outcome is the journal event the worker records for the run ([venturi.JobInfo.EndEvent]):
// completed, failed (retried), dead (a permanent error or the backstop), paused, waiting,
// cancelled, replaced, interrupted (shutdown), or lost (the run lost its lease and nothing
// was recorded). The wait is JobInfo.StartedAt minus JobInfo.Due, both database-clock
// times, so a worker's clock skew does not enter it; the run's duration is measured on the
// worker's monotonic clock. Histograms use the bucket boundaries [DurationBuckets] (in
// seconds); an SDK view overrides them. Job IDs are never metric attributes.
//
// An enqueue is counted when the middleware's next returns: an enqueue in a transaction
// that rolls back is still counted, and in EnqueueMany each task counts as inserted when
// it is prepared, before the batch's merges are known.
//
// # Gauges from the stats table
//
// [Instrumentation.ObserveStats] observes the gauges from [venturi.Queue.Stats], the
// sample that the maintaining worker writes every stats interval: reading it never counts
// jobs, so a scrape costs one small query whatever the table's size. All gauges of a
// registration share one callback, and a read serves every collection within
// [Config].StatsCacheTTL (1s), so several readers or a fast scrape interval do not add
// queries. Every state of every sampled queue is observed (0 when it has no jobs), so a
// series does not vanish when a queue drains. The sample is as old as the stats interval:
// venturi_stats_sampled_timestamp_seconds says how old (time() minus it, in PromQL), for
// an alert on a stale sample (no maintaining worker).
package venturiotel

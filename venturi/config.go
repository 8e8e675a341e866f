package venturi

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"time"
	"unicode/utf8"
)

// Defaults of the zero [Config] fields, and the bounds [NewWorker] enforces.
const (
	DefaultConcurrency     = 100
	DefaultLease           = 30 * time.Second
	DefaultShutdownGrace   = 10 * time.Second
	DefaultPollInterval    = time.Second
	DefaultFetchCooldown   = time.Millisecond
	DefaultJitterFraction  = 0.25
	DefaultMaxFailures     = 25
	DefaultJobTimeout      = 30 * time.Minute
	DefaultRetainCompleted = 24 * time.Hour
	DefaultRetainDead      = 7 * 24 * time.Hour
	// Discard, as RetainCompleted or RetainDead, keeps nothing: a job that ends in that
	// state is deleted at once instead of moving to the history of finished jobs.
	Discard time.Duration = -1
	// MinHistoryPartition is the narrowest HistoryPartition.
	MinHistoryPartition        = time.Second
	DefaultRetainIdleGates     = time.Hour
	DefaultMaintenanceInterval = time.Second
	DefaultStatsInterval       = 5 * time.Second
	// DefaultPrefetch is the smallest default prefetch buffer; the default is
	// max(Concurrency, DefaultPrefetch).
	DefaultPrefetch = 1000

	// MaxClaimBatch is the largest ClaimBatch: one claim statement locks at most this many rows.
	MaxClaimBatch = 1000
	// MinLease is the shortest Lease: leases are extended every Lease/3, and a shorter
	// period would spend the worker on lease statements.
	MinLease = 100 * time.Millisecond
	// MinPollInterval is the shortest PollInterval.
	MinPollInterval = time.Millisecond
	// MinMaintenanceInterval is the shortest MaintenanceInterval.
	MinMaintenanceInterval = 10 * time.Millisecond
	// MinStatsInterval is the shortest StatsInterval.
	MinStatsInterval = 100 * time.Millisecond
	// MaxWorkerIDBytes is the longest worker ID.
	MaxWorkerIDBytes = 128
)

// Config configures a Worker; pass it by value to [NewWorker]. A zero field takes the
// default named after it (DefaultLease for Lease, and so on). A field that cannot work
// (a negative duration, a lease too short to extend, a claim larger than MaxClaimBatch)
// makes NewWorker return an error that names it. The README explains each default.
type Config struct {
	// Concurrency is the number of handlers that run at once. Default DefaultConcurrency.
	Concurrency int
	// Lease is how long a claim holds a job without being extended. Running jobs' leases
	// are extended every Lease/3 in one statement per worker; a job whose lease expires
	// is rescued by any worker. At least MinLease. Default DefaultLease.
	Lease time.Duration
	// ShutdownGrace is how long Stop lets running handlers finish after signalling them
	// before it cancels their contexts. Default DefaultShutdownGrace.
	ShutdownGrace time.Duration
	// PollInterval is the longest an idle worker waits before looking for due jobs
	// without having been notified. At least MinPollInterval. Default DefaultPollInterval.
	PollInterval time.Duration
	// PollOnly turns off LISTEN/NOTIFY wakeups, for connection poolers in transaction
	// mode. Default false.
	PollOnly bool
	// FetchCooldown is the pause between two fetches while jobs keep arriving; it lets
	// several finished handlers free their slots before the next claim. Default
	// DefaultFetchCooldown.
	FetchCooldown time.Duration
	// Prefetch is the most claimed jobs that may wait for a free handler slot. A buffer
	// keeps slots busy while the next claim is in flight; its jobs are leased like running
	// ones, released to other workers when they wait more than a second (or Lease/3) and
	// at once by Stop. A job that arrives with a higher priority than the buffered ones
	// waits behind them.
	//
	// The buffer adapts between min(Concurrency, Prefetch) and Prefetch: it doubles when
	// a full claim arrives to find every buffered job started and slots free (handlers are
	// faster than claims), and halves when a buffered job waited more than four claim
	// round trips (handlers are the bottleneck; other workers may take the jobs).
	// Default: max(Concurrency, DefaultPrefetch); negative disables.
	Prefetch int
	// ClaimBatch is the most jobs one claim takes, at most MaxClaimBatch. Default:
	// min(Concurrency + Prefetch, MaxClaimBatch).
	ClaimBatch int
	// Backoff is the default retry backoff; a task's BackoffPolicy overrides it. A zero
	// field takes DefaultBackoff's (1s base, 1h cap).
	Backoff Backoff
	// JitterFraction f places each retry delay d in [d*(1-f), d]; at most 1. Default
	// DefaultJitterFraction; a negative value disables jitter.
	JitterFraction float64
	// MaxFailures is the backstop: a job whose failed runs reach it goes to dead. Pauses
	// never count. Default DefaultMaxFailures; a negative value disables the backstop.
	MaxFailures int
	// JobTimeout bounds one run; a run that exceeds it fails and retries. It is checked
	// at every lease tick (Lease/3), so a run is cancelled within Lease/3 after its
	// timeout. Default DefaultJobTimeout; a negative value disables it.
	JobTimeout time.Duration
	// RetainCompleted is how long completed and cancelled jobs are kept, in the history of
	// finished jobs, after they end. The time is fixed when a job ends (a change applies to
	// jobs that end afterwards), and rounded up to the end of its history partition (see
	// HistoryPartition). [Discard] keeps none: a completed job is deleted as it completes,
	// the least work per job (no history row; the stats then count no completions).
	// Default DefaultRetainCompleted.
	RetainCompleted time.Duration
	// RetainDead is how long dead jobs are kept, as RetainCompleted. Default
	// DefaultRetainDead.
	RetainDead time.Duration
	// HistoryPartition is the time span of one partition of the history of finished jobs
	// (venturi_job_history, partitioned on the time each job may be pruned, in one lane per
	// retention: completed and cancelled jobs, dead jobs): retention drops a partition once
	// its span is past, so a job is kept up to one span longer than its retention.
	// Partitions are made ahead by the worker that holds the retention duty. Default (0):
	// each lane's own, a quarter of its retention within 1 minute to 24 hours (6 hours for
	// the default RetainCompleted, 24 hours for the default RetainDead); a value applies to
	// both lanes. At least MinHistoryPartition.
	HistoryPartition time.Duration
	// RetainIdleGates is how long a rate window or a circuit breaker that nothing uses is
	// kept: a rate gate with no start in its period and a breaker that is closed (or has
	// cooled down) with no run going, both untouched for this long, are deleted by
	// retention (a partition per tenant or host would otherwise leave rows forever). A
	// breaker forgotten this way forgets its failures short of the threshold. Default
	// DefaultRetainIdleGates.
	RetainIdleGates time.Duration
	// MaintenanceInterval is how often the worker tries to take each maintenance duty:
	// rescue of expired leases and promotion of scheduled jobs, and, apart from them so
	// that they never wait for it, retention (pruning). One worker per schema does each
	// duty at a time. At least MinMaintenanceInterval. Default
	// DefaultMaintenanceInterval.
	MaintenanceInterval time.Duration
	// StatsInterval is how often a worker samples the job table into the stats tables
	// that [Queue.Stats] and [Queue.StatsHistory] read (one worker per schema samples, on
	// the retention loop and under a lock of its own, so the interval is at least
	// MaintenanceInterval; rescue never waits for a sample). A sample that takes long stretches the interval to twenty
	// times its cost, so sampling stays under about 5% of one database backend. At least
	// MinStatsInterval. Default DefaultStatsInterval.
	StatsInterval time.Duration
	// Logger receives the worker's logs. Default slog.Default().
	Logger *slog.Logger
	// ID names the worker in leases and journals, at most MaxWorkerIDBytes of UTF-8.
	// Default: host-pid-random.
	ID string
	// Queue is the queue the worker claims from (see [Queuer]): jobs of its registered
	// kinds in other queues are left to other workers. Default DefaultQueue. Set Queues
	// instead to serve several.
	Queue string
	// Queues are the queues the worker serves, each with its own handlers, prefetch
	// buffer and claims, so a backlog in one never delays another's jobs. A queue's zero
	// Concurrency takes Config.Concurrency. Default: the one queue named by Queue, with
	// Concurrency handlers. Queue must be empty when Queues is set.
	Queues []WorkerQueue
	// Middleware wraps every handler call (see [WorkMiddleware]); the first is the
	// outermost.
	Middleware []WorkMiddleware
}

// WorkerQueue is one queue a worker serves.
type WorkerQueue struct {
	Name        string
	Concurrency int // handlers for this queue's jobs; 0 for Config.Concurrency
}

// ConfigError is the error NewWorker returns for an invalid Config field.
type ConfigError struct {
	Field  string // the Config field, such as "Lease" or "Backoff.Cap"
	Reason string
}

// Error names the field and says what is wrong with it.
func (e *ConfigError) Error() string { return "venturi: Config." + e.Field + ": " + e.Reason }

// validate applies the defaults to zero fields and checks every field. It reports all
// invalid fields at once.
func (c Config) validate() (Config, error) {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	nonNegative := func(field string, d time.Duration) {
		if d < 0 {
			bad(field, "negative duration %v", d)
		}
	}
	atLeast := func(field string, d, least time.Duration) {
		if d > 0 && d < least {
			bad(field, "%v is shorter than the minimum %v", d, least)
		}
	}
	if c.Concurrency < 0 {
		bad("Concurrency", "%d; want at least 1 (0 for the default %d)", c.Concurrency, DefaultConcurrency)
	}
	if c.ClaimBatch < 0 || c.ClaimBatch > MaxClaimBatch {
		bad("ClaimBatch", "%d; want 1 to %d (0 for the default)", c.ClaimBatch, MaxClaimBatch)
	}
	nonNegative("Lease", c.Lease)
	atLeast("Lease", c.Lease, MinLease)
	nonNegative("ShutdownGrace", c.ShutdownGrace)
	nonNegative("PollInterval", c.PollInterval)
	atLeast("PollInterval", c.PollInterval, MinPollInterval)
	nonNegative("FetchCooldown", c.FetchCooldown)
	for field, d := range map[string]time.Duration{"RetainCompleted": c.RetainCompleted, "RetainDead": c.RetainDead} {
		if d < 0 && d != Discard {
			bad(field, "negative duration %v (Discard, -1ns, keeps nothing)", d)
		}
	}
	nonNegative("HistoryPartition", c.HistoryPartition)
	atLeast("HistoryPartition", c.HistoryPartition, MinHistoryPartition)
	nonNegative("RetainIdleGates", c.RetainIdleGates)
	nonNegative("MaintenanceInterval", c.MaintenanceInterval)
	atLeast("MaintenanceInterval", c.MaintenanceInterval, MinMaintenanceInterval)
	nonNegative("StatsInterval", c.StatsInterval)
	atLeast("StatsInterval", c.StatsInterval, MinStatsInterval)
	nonNegative("Backoff.Base", c.Backoff.Base)
	nonNegative("Backoff.Cap", c.Backoff.Cap)
	if c.Backoff.Base > 0 && c.Backoff.Cap > 0 && c.Backoff.Cap < c.Backoff.Base {
		bad("Backoff.Cap", "%v is shorter than Backoff.Base %v", c.Backoff.Cap, c.Backoff.Base)
	}
	if math.IsNaN(c.JitterFraction) || math.IsInf(c.JitterFraction, 0) || c.JitterFraction > 1 {
		bad("JitterFraction", "%v; want at most 1 (negative disables jitter)", c.JitterFraction)
	}
	if len(c.ID) > MaxWorkerIDBytes || !utf8.ValidString(c.ID) || containsNUL(c.ID) {
		bad("ID", "want at most %d bytes of UTF-8 text without NUL", MaxWorkerIDBytes)
	}
	if c.Queue != "" && !validQueue(c.Queue) {
		bad("Queue", "want 1 to 128 bytes of UTF-8 text without NUL (empty for %q)", DefaultQueue)
	}
	if c.Queue != "" && len(c.Queues) > 0 {
		bad("Queues", "set Queue or Queues, not both")
	}
	seen := map[string]bool{}
	for i, q := range c.Queues {
		switch {
		case !validQueue(q.Name):
			bad(fmt.Sprintf("Queues[%d].Name", i), "want 1 to 128 bytes of UTF-8 text without NUL")
		case seen[q.Name]:
			bad(fmt.Sprintf("Queues[%d].Name", i), "queue %q is listed twice", q.Name)
		case q.Concurrency < 0:
			bad(fmt.Sprintf("Queues[%d].Concurrency", i), "%d; want at least 1 (0 for Config.Concurrency)", q.Concurrency)
		}
		seen[q.Name] = true
	}
	if err := errors.Join(errs...); err != nil {
		return c, err
	}
	return c.withDefaults(), nil
}

// withDefaults fills the zero fields of a valid Config.
func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if len(c.Queues) == 0 {
		if c.Queue == "" {
			c.Queue = DefaultQueue
		}
		c.Queues = []WorkerQueue{{Name: c.Queue, Concurrency: c.Concurrency}}
	} else {
		c.Queues = append([]WorkerQueue(nil), c.Queues...) // the caller's slice stays theirs
		for i := range c.Queues {
			if c.Queues[i].Concurrency == 0 {
				c.Queues[i].Concurrency = c.Concurrency
			}
		}
	}
	switch {
	case c.Prefetch == 0:
		c.Prefetch = max(c.Concurrency, DefaultPrefetch)
	case c.Prefetch < 0:
		c.Prefetch = 0
	}
	if c.ClaimBatch == 0 {
		c.ClaimBatch = MaxClaimBatch
	}
	c.ClaimBatch = min(c.ClaimBatch, c.Concurrency+c.Prefetch)
	def(&c.Lease, DefaultLease)
	def(&c.ShutdownGrace, DefaultShutdownGrace)
	def(&c.PollInterval, DefaultPollInterval)
	def(&c.FetchCooldown, DefaultFetchCooldown)
	def(&c.JobTimeout, DefaultJobTimeout)
	def(&c.RetainCompleted, DefaultRetainCompleted)
	def(&c.RetainDead, DefaultRetainDead)
	def(&c.RetainIdleGates, DefaultRetainIdleGates)
	def(&c.MaintenanceInterval, DefaultMaintenanceInterval)
	def(&c.StatsInterval, DefaultStatsInterval)
	c.Backoff = c.Backoff.merged(DefaultBackoff)
	if c.JitterFraction == 0 {
		c.JitterFraction = DefaultJitterFraction
	}
	if c.MaxFailures == 0 {
		c.MaxFailures = DefaultMaxFailures
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.ID == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		c.ID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
		if len(c.ID) > MaxWorkerIDBytes {
			c.ID = c.ID[len(c.ID)-MaxWorkerIDBytes:]
		}
	}
	return c
}

// prefetchWait is the longest a prefetched job waits for a slot before it is released
// for other workers: busy handlers must not hold claimed jobs hostage.
func (c Config) prefetchWait() time.Duration { return min(time.Second, c.Lease/3) }

// forQueue returns the configuration of the fetcher and handlers of one queue.
func (c Config) forQueue(q WorkerQueue) Config {
	c.Queue, c.Concurrency = q.Name, q.Concurrency
	c.ClaimBatch = min(c.ClaimBatch, c.Concurrency+c.Prefetch)
	return c
}

// totalConcurrency is the handlers of all queues.
func (c Config) totalConcurrency() int {
	n := 0
	for _, q := range c.Queues {
		n += q.Concurrency
	}
	return n
}

// historyPartition is the span of the partitions of the history's lane whose jobs are kept
// for retain: the configured one, or a quarter of retain within a minute to a day.
func (c Config) historyPartition(retain time.Duration) time.Duration {
	if c.HistoryPartition > 0 {
		return c.HistoryPartition
	}
	return min(max(retain/4, time.Minute), 24*time.Hour)
}

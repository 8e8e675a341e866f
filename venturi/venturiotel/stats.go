package venturiotel

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/venturi-dev/venturi"
)

// states are the job states a depth gauge observes for every queue.
var states = []venturi.State{venturi.StateAvailable, venturi.StateScheduled, venturi.StateRunning,
	venturi.StateWaiting, venturi.StateCompleted, venturi.StateDead, venturi.StateCancelled}

// ObserveStats registers the gauges of q's stats table (venturi_queue_depth,
// venturi_queue_oldest_available_age_seconds, venturi_queue_paused and
// venturi_stats_sampled_timestamp_seconds): one callback observes them all from one
// [venturi.Queue.Stats] read, cached for [Config].StatsCacheTTL. The gauges describe
// the database (and schema), not the process: register them in the processes that should
// export them (the API's replicas, say; not every worker), and aggregate the replicas'
// series with max, not sum, which would count every job once per replica. Nothing is
// observed until a worker has sampled; a failed read is returned to the SDK (which hands
// it to the otel error handler) and observes nothing. Unregister the returned
// registration to stop.
func (in *Instrumentation) ObserveStats(q *venturi.Queue) (metric.Registration, error) {
	return in.observeStats(q.Stats)
}

// observeStats is ObserveStats with the stats read by read.
func (in *Instrumentation) observeStats(read func(context.Context) (venturi.Stats, error)) (metric.Registration, error) {
	depth, err := in.meter.Int64ObservableGauge("venturi.queue.depth", metric.WithUnit("{job}"),
		metric.WithDescription("Jobs by queue and state, from the latest stats sample."))
	if err != nil {
		return nil, fmt.Errorf("venturiotel: %w", err)
	}
	age, err := in.meter.Float64ObservableGauge("venturi.queue.oldest_available_age", metric.WithUnit("s"),
		metric.WithDescription("How long the oldest available job of the queue has been due (the queue's lag), from the latest stats sample; 0 when none is available."))
	if err != nil {
		return nil, fmt.Errorf("venturiotel: %w", err)
	}
	paused, err := in.meter.Int64ObservableGauge("venturi.queue.paused",
		metric.WithDescription("1 while the queue is paused, else 0, from the latest stats sample."))
	if err != nil {
		return nil, fmt.Errorf("venturiotel: %w", err)
	}
	sampled, err := in.meter.Float64ObservableGauge("venturi.stats.sampled_timestamp", metric.WithUnit("s"),
		metric.WithDescription("When the latest stats sample was taken (database clock, Unix seconds)."))
	if err != nil {
		return nil, fmt.Errorf("venturiotel: %w", err)
	}
	src := &statsSource{read: read, ttl: in.statsTTL, timeout: in.statsWait}
	reg, err := in.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		st, err := src.get(ctx)
		if err != nil {
			return fmt.Errorf("venturiotel: read stats: %w", err)
		}
		if st.SampledAt.IsZero() { // no worker has sampled yet
			return nil
		}
		o.ObserveFloat64(sampled, float64(st.SampledAt.UnixMicro())/1e6)
		for _, qs := range st.Queues {
			queue := keyQueue.String(qs.Queue)
			for _, s := range states {
				o.ObserveInt64(depth, qs.Counts[s], metric.WithAttributes(queue, keyState.String(string(s))))
			}
			o.ObserveFloat64(age, max(qs.Lag, 0).Seconds(), metric.WithAttributes(queue))
			o.ObserveInt64(paused, boolInt(qs.Paused), metric.WithAttributes(queue))
		}
		return nil
	}, depth, age, paused, sampled)
	if err != nil {
		return nil, fmt.Errorf("venturiotel: %w", err)
	}
	return reg, nil
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// statsSource reads the stats at most once per ttl, for any number of collections.
type statsSource struct {
	read    func(context.Context) (venturi.Stats, error)
	ttl     time.Duration
	timeout time.Duration

	mu    sync.Mutex // held during a read: concurrent collections wait for it
	at    time.Time  // when the last read ended (monotonic; zero before the first)
	stats venturi.Stats
	err   error
}

// get returns the cached read while it is younger than ttl, else reads again. A failed
// read is cached too, so that an unreachable database is not asked on every collection.
func (s *statsSource) get(ctx context.Context) (venturi.Stats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.at.IsZero() && time.Since(s.at) < s.ttl {
		return s.stats, s.err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	s.stats, s.err = s.read(ctx)
	s.at = time.Now()
	return s.stats, s.err
}

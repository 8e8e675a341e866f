package venturiotel

import (
	"context"

	"go.opentelemetry.io/otel/metric"

	"github.com/venturi-dev/venturi"
)

// ObserveStatsFrom is ObserveStats with the stats read by read, for tests that count the
// reads of a real Queue.Stats.
func (in *Instrumentation) ObserveStatsFrom(read func(context.Context) (venturi.Stats, error)) (metric.Registration, error) {
	return in.observeStats(read)
}

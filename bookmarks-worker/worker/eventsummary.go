package worker

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/venturi-dev/venturi"
)

// summarizeEvents logs, every period, one line per event kind with how many of the
// worker's runs produced it (started, completed, failed, ...), read from an in-process
// subscription; it returns when ctx ends or the subscription closes. Events the
// subscription dropped (a full buffer) are counted under "overflow", never lost silently.
func summarizeEvents(ctx context.Context, sub *venturi.Subscription, period time.Duration, log *slog.Logger) {
	t := time.NewTicker(period)
	defer t.Stop()
	counts := map[string]map[venturi.Event]int{} // task kind -> event -> count
	flush := func() {
		for _, kind := range slices.Sorted(maps.Keys(counts)) {
			attrs := []any{"kind", kind, "period", period}
			for _, ev := range slices.Sorted(maps.Keys(counts[kind])) {
				attrs = append(attrs, string(ev), counts[kind][ev])
			}
			log.Info("job events", attrs...)
		}
		clear(counts)
	}
	for {
		select {
		case <-ctx.Done():
			flush()
			return
		case <-t.C:
			flush()
		case e, ok := <-sub.Events():
			if !ok {
				flush()
				return
			}
			kind := e.Kind
			n := 1
			if e.Event == venturi.EventOverflow {
				kind, n = "(all)", int(e.Dropped)
			}
			if counts[kind] == nil {
				counts[kind] = map[venturi.Event]int{}
			}
			counts[kind][e.Event] += n
		}
	}
}

package tasks

import (
	"fmt"
	"time"

	"github.com/venturi-dev/venturi"
)

// KindRefetchStale is RefetchStale's stored kind.
const KindRefetchStale = "refetch_stale"

// RefetchStaleSchedule is the name of the durable cron schedule (venturi.Schedule) that
// enqueues a RefetchStale every day. Every worker registers it at start with its settings;
// registering it again from more replicas changes nothing.
const RefetchStaleSchedule = "bookmarks.refetch-stale"

// Bounds of RefetchStale's settings: a sweep never enqueues more than
// MaxRefetchBatch*MaxRefetchBatches fetches.
const (
	MaxRefetchBatch   = 5000
	MaxRefetchBatches = 1000
)

// RefetchStale is one sweep of the daily refetch: it walks the bookmarks whose last fetch
// is older than StaleAfterS seconds, in ID order, Batch at a time, and enqueues a
// FetchBookmark for each, so the refetches run under FetchBookmark's flow control (host
// slots, rates, breakers) and merge with any fetch already pending. A sweep handles at most
// MaxBatches batches; what it leaves is stale tomorrow too.
//
// The worker enqueues it through its schedule (RefetchStaleSchedule), never a producer. Its
// dedup key keeps a sweep from piling up behind one still pending: a fire while the
// previous sweep waits is kept into it (the schedule's ledger says "kept").
type RefetchStale struct {
	StaleAfterS int64 `json:"stale_after_s"`
	Batch       int   `json:"batch"`
	MaxBatches  int   `json:"max_batches"`
}

// RefetchStaleCarry is a sweep's checkpoint: a run cut short (a worker killed or stopped)
// continues after the last bookmark handled.
type RefetchStaleCarry struct {
	After     string `json:"after,omitempty"` // the ID of the last bookmark handled
	Batches   int    `json:"batches"`
	Refetched int64  `json:"refetched"`
}

// Kind implements venturi.Task.
func (RefetchStale) Kind() string { return KindRefetchStale }

// DedupKey makes every sweep the same job while one is pending.
func (RefetchStale) DedupKey() venturi.DedupKey { return "refetch_stale" }

// StaleAfter is the age of a fetch that makes a bookmark stale.
func (r RefetchStale) StaleAfter() time.Duration { return time.Duration(r.StaleAfterS) * time.Second }

// Validate reports settings out of bounds: a positive age, 1 to MaxRefetchBatch
// bookmarks per batch, 1 to MaxRefetchBatches batches.
func (r RefetchStale) Validate() error {
	switch {
	case r.StaleAfterS <= 0:
		return fmt.Errorf("refetch_stale: stale_after_s must be positive, got %d", r.StaleAfterS)
	case r.Batch < 1 || r.Batch > MaxRefetchBatch:
		return fmt.Errorf("refetch_stale: batch must be 1 to %d, got %d", MaxRefetchBatch, r.Batch)
	case r.MaxBatches < 1 || r.MaxBatches > MaxRefetchBatches:
		return fmt.Errorf("refetch_stale: max_batches must be 1 to %d, got %d", MaxRefetchBatches, r.MaxBatches)
	}
	return nil
}

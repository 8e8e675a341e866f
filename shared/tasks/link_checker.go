package tasks

import (
	"time"

	"github.com/venturi-dev/venturi"
)

// KindLinkChecker is LinkChecker's stored kind.
const KindLinkChecker = "link_checker"

// LinkCheckerRestartDelay is how long the link checker waits before it starts again after a
// run ended (a failure, or a worker giving it up).
const LinkCheckerRestartDelay = 10 * time.Second

// LinkChecker is a supervised singleton service (venturi.Supervised): exactly one runs
// across all workers, forever. It walks every bookmark page by page, in ID order, and
// enqueues a refetch (a FetchBookmark) of each one whose page is stale, so the fetches run
// under FetchBookmark's flow control (host slots, rates, breakers) and its throttled merge.
// Its carry, LinkCheckerCarry, is its position: a worker that takes it over (its previous
// worker died or stopped) continues from there.
//
// Producers never enqueue it (venturi refuses): every worker that registers it ensures its
// one job when it starts. Its payload is empty; its settings are the worker's.
type LinkChecker struct{}

// LinkCheckerCarry is the link checker's checkpoint.
type LinkCheckerCarry struct {
	// After is the ID of the last bookmark checked in the current pass ("" at a pass's start).
	After string `json:"after,omitempty"`
	// Pass counts the completed passes over all bookmarks.
	Pass int `json:"pass"`
	// Checked and Refetched count bookmarks since the service was created.
	Checked   int64 `json:"checked"`
	Refetched int64 `json:"refetched"`
}

// Kind implements venturi.Task.
func (LinkChecker) Kind() string { return KindLinkChecker }

// Singleton declares the service: restarted LinkCheckerRestartDelay after any end.
func (LinkChecker) Singleton() venturi.Singleton {
	return venturi.Singleton{Restart: venturi.RestartAlways, Delay: LinkCheckerRestartDelay}
}

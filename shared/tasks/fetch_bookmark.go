package tasks

import (
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/venturi-dev/venturi"
)

// KindFetchBookmark is FetchBookmark's stored kind.
const KindFetchBookmark = "fetch_bookmark"

// Politeness towards the sites the worker fetches, enforced by venturi in the claim across
// every worker (so they hold however many worker processes run). A host is the URL's host
// name, lower-cased, without port or trailing dot ([FetchHost]).
//
// To change one, edit it here and deploy the workers: venturi reads FetchBookmark's Limits
// when the worker registers the kind and records them in the database at Start, where every
// worker's claim reads them (the last worker to start sets them). The slot limit travels
// with each job as it is enqueued, so a new value applies to fetches enqueued after the
// deploy of the producers (the API and the workers, which enqueue imported fetches).
const (
	// FetchHostConcurrency is the most fetches of one host that run at once: the slot
	// FetchSlotKey(host) admits this many, and the others wait their turn (SlotQueue).
	FetchHostConcurrency = 2
	// FetchHostRate fetches may start per FetchHostRatePer for each host (retries count).
	FetchHostRate = 1
	// FetchHostRatePer is the window of FetchHostRate.
	FetchHostRatePer = time.Second
	// FetchBreakerFailures failed fetches in a row of one host open that host's circuit
	// breaker: its fetches wait (without spending their attempts) for FetchBreakerCooldown,
	// then one probe fetch decides whether they resume. Only failures that say something
	// about the host count (timeouts, refused connections, 5xx, 429...); the worker
	// completes the fetches whose answer is about the page itself (404, not HTML...).
	FetchBreakerFailures = 5
	// FetchBreakerCooldown is how long an open breaker holds its host's fetches.
	FetchBreakerCooldown = time.Minute
)

// FetchSlotPrefix starts the slot key of a host's fetches. Slot keys are shared by every
// kind, so another kind that requests pages from a host takes FetchSlotKey(host) to share
// the host's budget of FetchHostConcurrency requests at once.
const FetchSlotPrefix = "host:"

// QueueImports is the queue of imports: the ImportBookmarks jobs and the fetches of the
// bookmarks they create. The worker serves it with handlers of its own, so a large import
// never delays the fetches users ask for interactively, which run in venturi.DefaultQueue.
const QueueImports = "imports"

// FetchBookmark fetches a bookmark's page and stores its title and text content.
//
// At most one fetch per bookmark is pending: the dedup key is the bookmark ID, and a newer
// enqueue (a refetch) replaces the pending one, so bursts of refetches coalesce into one job.
//
// A fetch takes its host's slot and partition: at most FetchHostConcurrency fetches of a
// host run at once, they start at most FetchHostRate times per FetchHostRatePer, hosts are
// served round-robin, and each host has its own circuit breaker (see Limits).
type FetchBookmark struct {
	BookmarkID string `json:"bookmark_id"`
	URL        string `json:"url"`
	// ImportID is set when an import created the bookmark: the fetch then runs in the
	// imports queue (QueueImports). Empty for fetches users ask for.
	ImportID string `json:"import_id,omitempty"`
}

// FetchCarry is FetchBookmark's carry: a fetch is single-shot and keeps nothing.
type FetchCarry = struct{}

// Kind implements venturi.Task.
func (FetchBookmark) Kind() string { return KindFetchBookmark }

// StreamEvents opts fetches in to venturi's durable event stream (venturi.EventStreamer):
// the API's GET /events shows a bookmark's fetch progress from it.
func (FetchBookmark) StreamEvents() bool { return true }

// DedupKey keys the job by bookmark.
func (t FetchBookmark) DedupKey() venturi.DedupKey { return venturi.KeyOf("bookmark", t.BookmarkID) }

// Merge lets a newer enqueue for the same bookmark supersede the pending one, keeping the
// pending job's due time (venturi's Throttle): a refetch is enqueued due RefetchDelay later
// (the API's setting), and every refetch until it runs rides that one run, so a bookmark is
// fetched at most once per window however often it is asked for. A pending
// fetch in another queue is left alone and the incoming one becomes a job of its own: a
// refetch users ask for while the bookmark's import fetch still waits must not wait in the
// imports queue (a merge keeps the pending job's queue). The job the bookmark no longer
// names completes without fetching when it runs ("superseded by a newer fetch job").
func (t FetchBookmark) Merge(existing venturi.Pending[FetchBookmark, FetchCarry]) venturi.Merge[FetchBookmark, FetchCarry] {
	if existing.Payload.Queue() != t.Queue() {
		return existing.Independent()
	}
	return existing.Replace().Throttle()
}

// Queue puts the fetches of imported bookmarks in QueueImports and the others in
// venturi.DefaultQueue.
func (t FetchBookmark) Queue() string {
	if t.ImportID != "" {
		return QueueImports
	}
	return venturi.DefaultQueue
}

// Partition is the URL's host ([FetchHost]): fetches are claimed round-robin between
// hosts, and the rate and the breaker of Limits apply to each host separately.
func (t FetchBookmark) Partition() string { return FetchHost(t.URL) }

// Slot is the host's slot, FetchSlotKey(host): at most FetchHostConcurrency fetches of the
// host run at once, and the others wait in order. A URL without a usable host takes no
// slot (its fetch fails at once with bad_url).
func (t FetchBookmark) Slot() venturi.Slot {
	host := FetchHost(t.URL)
	if host == "" {
		return venturi.Slot{}
	}
	return venturi.Slot{Key: FetchSlotKey(host), Limit: FetchHostConcurrency, Policy: venturi.SlotQueue}
}

// Limits are the fetches' per-host rate and circuit breaker (see FetchHostRate and
// FetchBreakerFailures). venturi calls it on the zero value when the worker registers the
// kind.
func (FetchBookmark) Limits() venturi.Limits {
	return venturi.Limits{
		Rate:    venturi.Rate{N: FetchHostRate, Per: FetchHostRatePer, PerPartition: true},
		Breaker: venturi.Breaker{Failures: FetchBreakerFailures, Cooldown: FetchBreakerCooldown, PerPartition: true},
	}
}

// FetchSlotKey is the slot key of host's fetches: FetchSlotPrefix and the host, at most
// venturi.MaxSlotKeyBytes.
func FetchSlotKey(host string) string {
	return truncateUTF8(FetchSlotPrefix+host, venturi.MaxSlotKeyBytes)
}

// FetchHost returns the host that politeness applies to for rawURL: its host name,
// lower-cased, without the port (a site's ports are one server) or a trailing dot, at most
// venturi.MaxPartitionBytes of valid UTF-8 without control characters. It returns "" when
// rawURL has no host. An IPv6 literal is returned without brackets; a name spelt in
// Unicode and in punycode counts as two hosts.
func FetchHost(rawURL string) string {
	u, err := url.Parse(strings.TrimSpace(rawURL))
	if err != nil {
		return ""
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	host = strings.ToValidUTF8(host, "\uFFFD")
	host = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, host)
	return truncateUTF8(host, venturi.MaxPartitionBytes)
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

package tasks

import (
	"math"
	"slices"
	"time"

	"github.com/venturi-dev/venturi"
)

// KindRebuildTagIndex is RebuildTagIndex's stored kind.
const KindRebuildTagIndex = "rebuild_tag_index"

// BoostAfter is the number of coalesced requests after which a pending tag-index rebuild
// runs at high priority: a long burst should not starve the index.
const BoostAfter = 10

// Bounds on a rebuild's tag list, so that the pending job's payload stays small however
// many requests merge into it (at most MaxRebuildTags × (MaxTagLen + 3) bytes of tags,
// about 5 KiB). A rebuild that would list more tags, or a tag longer than MaxTagLen,
// becomes a rebuild of all tags instead (All): it recounts every tag, so nothing a merged
// request asked for is lost, and it costs one pass over the bookmarks. The API refuses
// longer tags and more than 20 tags per request (422), so one request never reaches the cap.
const (
	MaxRebuildTags = 100
	MaxTagLen      = 50
)

// TagIndexMaxWait is the longest a debounced tag-index rebuild waits after the first edit of
// a burst: under a steady stream of tag edits the index is rebuilt at least this often.
const TagIndexMaxWait = 30 * time.Second

// RebuildTagIndex recounts the bookmarks of the given tags in the tag index. Every change
// to a bookmark's tags enqueues one, usually with a short delay; while one is pending,
// further enqueues merge into it with With, which unions their tags, so a burst of edits
// costs one rebuild.
//
// Rebuilds that cannot merge (those claimed together, and the reindex nodes of import
// workflows, which venturi never merges) are handled in chunks by the worker: one recount
// for up to 100 of them.
//
// An enqueue that sets QuietMS debounces: the merge pushes the pending rebuild's due time
// to now + QuietMS, so a burst of tag edits runs one rebuild once it has been quiet that
// long, and never later than TagIndexMaxWait after the burst's first edit. Enqueue the
// first one with venturi.After(quiet) too (the API does). Without QuietMS the pending
// rebuild keeps the earlier due time (venturi's default).
type RebuildTagIndex struct {
	// Tags to recount, sorted and unique. Empty with All false recounts nothing.
	Tags []string `json:"tags,omitempty"`
	// All recounts every tag and drops tags no bookmark uses any more.
	All bool `json:"all,omitempty"`
	// Requests is how many enqueues this job stands for (1 when nothing merged).
	Requests int `json:"requests"`
	// QuietMS is the debounce delay in milliseconds (0: no debounce); see the type.
	QuietMS int64 `json:"quiet_ms,omitempty"`
}

// TagIndexCarry is RebuildTagIndex's carry: what the merges folded into the job.
type TagIndexCarry struct {
	// Merged counts the enqueues merged into the pending job.
	Merged int `json:"merged"`
}

// NewRebuildTagIndex returns a rebuild request for tags (a rebuild of all tags beyond the
// bounds; see MaxRebuildTags).
func NewRebuildTagIndex(tags ...string) RebuildTagIndex {
	return RebuildTagIndex{Tags: normalizeTags(tags), Requests: 1}.bounded()
}

// Kind implements venturi.Task.
func (RebuildTagIndex) Kind() string { return KindRebuildTagIndex }

// DedupKey makes every rebuild a candidate for merging into the pending one. It names the
// index a rebuild recounts (the app has one), and the worker keys its chunks of rebuilds
// by it too (bookmarks-worker's handlers.TagIndexChunks): one recount per index per chunk.
func (RebuildTagIndex) DedupKey() venturi.DedupKey { return "tag-index" }

// Priority raises a rebuild that stands for a long burst of requests.
func (t RebuildTagIndex) Priority() venturi.Priority {
	if t.Requests >= BoostAfter {
		return venturi.PriorityHigh
	}
	return venturi.PriorityNormal
}

// Merge unions the incoming tags into the pending rebuild and counts the merge, and
// debounces when the incoming request sets QuietMS. A union beyond MaxRebuildTags becomes a
// rebuild of all tags, so the payload stays bounded.
func (t RebuildTagIndex) Merge(existing venturi.Pending[RebuildTagIndex, TagIndexCarry]) venturi.Merge[RebuildTagIndex, TagIndexCarry] {
	merged := RebuildTagIndex{
		All:      existing.Payload.All || t.All,
		Requests: addRequests(existing.Payload.Requests, t.Requests),
		QuietMS:  t.QuietMS,
	}
	if !merged.All {
		merged.Tags = normalizeTags(append(slices.Clone(existing.Payload.Tags), t.Tags...))
	}
	carry := existing.Carry
	carry.Merged++
	m := existing.With(merged.bounded(), carry)
	if t.QuietMS > 0 {
		return m.Debounce(time.Duration(t.QuietMS)*time.Millisecond, TagIndexMaxWait)
	}
	return m
}

// bounded turns a rebuild whose tags exceed the bounds into a rebuild of all tags.
func (t RebuildTagIndex) bounded() RebuildTagIndex {
	if len(t.Tags) > MaxRebuildTags || slices.ContainsFunc(t.Tags, func(s string) bool { return len(s) > MaxTagLen }) {
		t.All = true
	}
	if t.All {
		t.Tags = nil
	}
	return t
}

// addRequests adds two request counts, each at least 1, saturating instead of wrapping: a
// stored payload with an absurd count must not turn negative when merged (and so lose its
// priority boost).
func addRequests(a, b int) int {
	a, b = max(a, 1), max(b, 1)
	if a > math.MaxInt-b {
		return math.MaxInt
	}
	return a + b
}

// normalizeTags sorts tags and drops duplicates and empty strings.
func normalizeTags(tags []string) []string {
	out := slices.DeleteFunc(slices.Clone(tags), func(s string) bool { return s == "" })
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) == 0 {
		return nil
	}
	return out
}

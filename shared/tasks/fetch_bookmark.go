package tasks

import "github.com/venturi-dev/venturi"

// KindFetchBookmark is FetchBookmark's stored kind.
const KindFetchBookmark = "fetch_bookmark"

// FetchBookmark fetches a bookmark's page and stores its title and text content.
//
// At most one fetch per bookmark is pending: the dedup key is the bookmark ID, and a newer
// enqueue (a refetch) replaces the pending one, so bursts of refetches coalesce into one job.
type FetchBookmark struct {
	BookmarkID string `json:"bookmark_id"`
	URL        string `json:"url"`
}

// FetchCarry is FetchBookmark's carry: a fetch is single-shot and keeps nothing.
type FetchCarry = struct{}

// Kind implements venturi.Task.
func (FetchBookmark) Kind() string { return KindFetchBookmark }

// DedupKey keys the job by bookmark.
func (t FetchBookmark) DedupKey() venturi.DedupKey { return venturi.KeyOf("bookmark", t.BookmarkID) }

// Merge lets a newer enqueue for the same bookmark supersede the pending one.
func (t FetchBookmark) Merge(existing venturi.Pending[FetchBookmark, FetchCarry]) venturi.Merge[FetchBookmark, FetchCarry] {
	return existing.Replace()
}

// Package tasks holds the bookmarks application's task payloads: the producer side of every
// job kind. The API enqueues these structs; the worker decodes them and runs its handlers.
//
// The package depends on venturi's producer types only (Task, DedupKey, Pending, Merge, the
// flow-control declarations Slot and Limits, and the Workflow builder) and on nothing a
// worker needs: no fx, no
// HTTP client, no Echo. deps_test.go enforces that.
//
// Flow control is declared here too, because venturi reads it from the task type: fetches
// are polite per host (FetchBookmark's Slot, Partition and Limits) and imports run in a
// queue of their own (QueueImports).
//
// An import is a venturi workflow (NewImportWorkflow): ImportBookmarks, then
// FetchImportedBookmarks, which spawns a FetchBookmark per bookmark made, then a
// RebuildTagIndex of the import's tags, then SummarizeImport. The outputs its nodes pass
// downstream (FetchOutput, ImportFetchesOutput, TagIndexOutput, ImportSummary) are
// declared here too.
//
// Every payload's JSON encoding is its stored form, so renaming a field or a kind is a
// breaking change for jobs already in the queue; so is an output's.
package tasks

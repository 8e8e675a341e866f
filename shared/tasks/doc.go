// Package tasks holds the bookmarks application's task payloads: the producer side of every
// job kind. The API enqueues these structs; the worker decodes them and runs its handlers.
//
// The package depends on venturi's producer types only (Task, DedupKey, Pending, Merge, and
// the flow-control declarations Slot and Limits) and on nothing a worker needs: no fx, no
// HTTP client, no Echo. deps_test.go enforces that.
//
// Flow control is declared here too, because venturi reads it from the task type: fetches
// are polite per host (FetchBookmark's Slot, Partition and Limits) and imports run in a
// queue of their own (QueueImports).
//
// Every payload's JSON encoding is its stored form, so renaming a field or a kind is a
// breaking change for jobs already in the queue.
package tasks

package tasks

import "github.com/venturi-dev/venturi"

// KindImportBookmarks is ImportBookmarks's stored kind.
const KindImportBookmarks = "import_bookmarks"

// DefaultImportPageSize is the number of items one run of ImportBookmarks imports when the
// payload leaves PageSize at zero.
const DefaultImportPageSize = 50

// ImportBookmarks imports an uploaded bookmarks export (stored by the API as the rows of
// an import) page by page. It is the first node of the import's workflow
// (NewImportWorkflow), whose later nodes fetch the bookmarks it creates, recount the
// import's tags and summarize; an import enqueued before imports were workflows is a job
// of its own, which enqueues its fetches page by page. Each run imports one page in one transaction together with its
// checkpoint (the carry), then pauses; the next run resumes after the checkpoint. A crash
// or shutdown between pages repeats nothing that committed. The run that finds no item
// left completes the job (and marks the import done), so an import of n pages takes n+1
// runs: venturi stores the carry when a job pauses, not when it completes, and this way
// the carry a completed job keeps has the final counts.
//
// Two more things can end an import. It can be cancelled (venturi's Queue.Cancel of its
// job, DELETE /imports/{id}): a page in progress finishes, and the import stops there. And
// an import the API marked for confirmation (a row in bookmark_import_confirmation: more
// items than the API's threshold) imports nothing until it is confirmed: its first run
// waits for the signal SignalConfirmImport (venturi.WaitForSignal) until the
// confirmation's expiry, and ends cancelled if none came.
type ImportBookmarks struct {
	ImportID string `json:"import_id"`
	PageSize int    `json:"page_size,omitempty"`
}

// ImportCarry is ImportBookmarks's checkpoint, persisted on every pause and retry. The
// last page's pause stores the final counts, which the completed job then keeps.
type ImportCarry struct {
	// Next is the position of the first item not yet imported.
	Next int `json:"next"`
	// Imported counts the bookmarks created so far.
	Imported int `json:"imported"`
	// Skipped counts items whose URL the fetcher would not try (not http or https, with
	// credentials, too long, ...).
	Skipped int `json:"skipped"`
	// Pages counts the pages done.
	Pages int `json:"pages"`
	// Confirmed is set once the import read its confirmation (imports that need one): the
	// runs after it import without waiting again, even when the run that read it failed
	// (venturi consumes a signal with the run that read it, whatever its outcome).
	Confirmed bool `json:"confirmed,omitempty"`
}

// SignalConfirmImport is the signal (venturi.Queue.Signal) that confirms an import waiting
// for its confirmation. Its payload is an ImportConfirmation.
const SignalConfirmImport = "confirm"

// ConfirmDeliveryID is the delivery ID of every confirmation of an import: confirming is a
// fact, not an event, so a repeated confirmation (a retry, the link after the API) is
// stored once.
const ConfirmDeliveryID = "confirm"

// ImportConfirmation is the payload of SignalConfirmImport: who confirmed.
type ImportConfirmation struct {
	// Via is "api_key" (POST /imports/{id}/confirm) or "link" (the confirmation link).
	Via string `json:"via"`
	// KeyID is the API key's ID (not secret) when Via is "api_key".
	KeyID string `json:"key_id,omitempty"`
}

// Kind implements venturi.Task.
func (ImportBookmarks) Kind() string { return KindImportBookmarks }

// DedupKey keys the job by import, so a repeated submission of one import cannot start a
// second job beside a pending one.
func (t ImportBookmarks) DedupKey() venturi.DedupKey { return venturi.KeyOf("import", t.ImportID) }

// Merge keeps the pending import and its progress: a duplicate enqueue must not reset the
// checkpoint (the default Replace would).
func (t ImportBookmarks) Merge(existing venturi.Pending[ImportBookmarks, ImportCarry]) venturi.Merge[ImportBookmarks, ImportCarry] {
	return existing.Keep()
}

// Priority runs imports below the other jobs of a queue they share: imports have a queue of
// their own now, but those enqueued before it existed wait in the default queue.
func (ImportBookmarks) Priority() venturi.Priority { return venturi.PriorityLow }

// Queue runs imports in QueueImports, beside the fetches they enqueue and apart from the
// fetches users ask for, which a large import must not delay.
func (ImportBookmarks) Queue() string { return QueueImports }

// Size returns the effective page size.
func (t ImportBookmarks) Size() int {
	if t.PageSize <= 0 {
		return DefaultImportPageSize
	}
	return min(t.PageSize, 1000)
}

package tasks

import "github.com/venturi-dev/venturi"

// Node names of an import's workflow.
const (
	// ImportNodeImport imports the items (ImportBookmarks); its job is the import's job.
	ImportNodeImport = "import"
	// ImportNodeFetch spawns the fetches (FetchImportedBookmarks), named
	// ImportNodeFetch + "/" + the bookmark's ID.
	ImportNodeFetch = "fetch"
	// ImportNodeReindex recounts the import's tags (RebuildTagIndex).
	ImportNodeReindex = "reindex"
	// ImportNodeSummary writes the import's summary (SummarizeImport).
	ImportNodeSummary = "summary"
)

// ImportWorkflowKey is the workflow key of an import (venturi.WorkflowKey): enqueuing an
// import's workflow again while it is open writes nothing.
func ImportWorkflowKey(importID string) string { return "import/" + importID }

// NewImportWorkflow returns the workflow of an import: imp imports the items, and tags are
// the import's tags, recounted once its fetches ended. The API enqueues it with venturi's
// EnqueueWorkflowTx in the transaction that stores the import;
// WorkflowResult.Jobs[ImportNodeImport] is the import's job. Its four nodes run one after
// the other:
//
//	import   ImportBookmarks: the bookmarks, page by page (a large import first waits
//	         for its confirmation); it may end completed, cancelled or dead
//	fetch    FetchImportedBookmarks, once import ended, however: spawns one FetchBookmark
//	         node per bookmark the import created ("fetch/<bookmark id>"), so what needs
//	         fetch waits for every one of those fetches to end
//	reindex  RebuildTagIndex of the import's tags, once fetch and its fetches ended
//	summary  SummarizeImport, once fetch and reindex ended: reads their outputs and
//	         stores what the fetches came to, which GET /imports/{id} shows
//
// Every edge is NeedsEnded: a cancelled import still fetches the bookmarks it made, a
// fetch that gave up does not stop the recount, and the summary is written whatever
// happened upstream.
func NewImportWorkflow(imp ImportBookmarks, tags []string) *venturi.Workflow {
	wf := venturi.NewWorkflow("import "+imp.ImportID, venturi.WorkflowKey(ImportWorkflowKey(imp.ImportID)))
	pages := wf.Add(ImportNodeImport, imp)
	fetch := wf.Add(ImportNodeFetch, FetchImportedBookmarks{ImportID: imp.ImportID}, venturi.NeedsEnded(pages))
	reindex := wf.Add(ImportNodeReindex, NewRebuildTagIndex(tags...), venturi.NeedsEnded(fetch))
	wf.Add(ImportNodeSummary, SummarizeImport{ImportID: imp.ImportID}, venturi.NeedsEnded(fetch, reindex))
	return wf
}

// KindFetchImportedBookmarks is FetchImportedBookmarks's stored kind.
const KindFetchImportedBookmarks = "fetch_imported_bookmarks"

// FetchImportedBookmarks is the fetch node of an import's workflow: it spawns one
// FetchBookmark node per bookmark the import created that has no fetch yet, and outputs
// ImportFetchesOutput. It runs in QueueImports.
type FetchImportedBookmarks struct {
	// ImportID is the import whose bookmarks it fetches.
	ImportID string `json:"import_id"`
}

// Kind implements venturi.Task.
func (FetchImportedBookmarks) Kind() string { return KindFetchImportedBookmarks }

// Queue runs it in QueueImports, with the import's other jobs.
func (FetchImportedBookmarks) Queue() string { return QueueImports }

// KindSummarizeImport is SummarizeImport's stored kind.
const KindSummarizeImport = "summarize_import"

// SummarizeImport is the summary node of an import's workflow: it reads the outputs of the
// fetch node, of every fetch it spawned and of the reindex node, stores the import's
// summary (the app's table bookmark_import_summary) and outputs it (ImportSummary). It
// runs in QueueImports.
type SummarizeImport struct {
	// ImportID is the import it summarizes.
	ImportID string `json:"import_id"`
}

// Kind implements venturi.Task.
func (SummarizeImport) Kind() string { return KindSummarizeImport }

// Queue runs it in QueueImports, with the import's other jobs.
func (SummarizeImport) Queue() string { return QueueImports }

// The outputs of an import's nodes (venturi's Run.SetOutput), read downstream with
// Run.UpstreamOutputs. Like payloads, their JSON encoding is stored: add fields, never
// rename.

// Statuses of a FetchOutput.
const (
	// FetchStatusFetched: the page was fetched and stored.
	FetchStatusFetched = "fetched"
	// FetchStatusFailed: a verdict on the page (404, not HTML, a refused address...); the
	// bookmark is failed, Reason says why.
	FetchStatusFailed = "failed"
	// FetchStatusSuperseded: the fetch did not run; a newer fetch of the bookmark (a
	// refetch) took over, or the bookmark was deleted.
	FetchStatusSuperseded = "superseded"
)

// FetchOutput is what the fetch of an imported bookmark outputs when its job completes. A
// fetch that gives up (the host kept failing) ends dead and outputs nothing.
type FetchOutput struct {
	// Status is FetchStatusFetched, FetchStatusFailed or FetchStatusSuperseded.
	Status string `json:"status"`
	// Reason is a failure's reason code (bookmarks-worker/README.md, "What users see of a
	// failure").
	Reason string `json:"reason,omitempty"`
	// HTTPStatus is the status the site answered, when it answered.
	HTTPStatus int `json:"http_status,omitempty"`
	// TitleFound says whether a fetched page had a title.
	TitleFound bool `json:"title_found,omitempty"`
}

// ImportFetchesOutput is the fetch node's output: how many fetches it spawned.
type ImportFetchesOutput struct {
	// Fetches is how many FetchBookmark nodes it spawned.
	Fetches int `json:"fetches"`
}

// TagIndexOutput is a rebuild's output: what the recount it rode covered. Rebuilds are
// handled in chunks, so one recount may stand for several jobs (Chunk).
type TagIndexOutput struct {
	// Tags is how many tags the recount covered (0 with All).
	Tags int `json:"tags"`
	// All: the recount covered every tag.
	All bool `json:"all,omitempty"`
	// Chunk is how many rebuild jobs the recount stood for.
	Chunk int `json:"chunk"`
}

// Values of ImportSummary.TagIndex.
const (
	// TagIndexRebuilt: the reindex node completed.
	TagIndexRebuilt = "rebuilt"
	// TagIndexFailed: the reindex node did not complete (it died, or was cancelled).
	TagIndexFailed = "failed"
)

// ImportSummary is what an import's fetches came to: the summary node's output, and the
// row it stores for GET /imports/{id}. Fetched + Failed + GaveUp + Superseded = Fetches.
type ImportSummary struct {
	// Fetches is how many fetches the import made (one per bookmark it created).
	Fetches int `json:"fetches"`
	// Fetched counts the pages fetched and stored, TitlesFound those with a title.
	Fetched     int `json:"fetched"`
	TitlesFound int `json:"titles_found"`
	// Failed counts verdicts on the page; Failures counts them by reason code.
	Failed   int            `json:"failed"`
	Failures map[string]int `json:"failures"`
	// GaveUp counts fetches that ended without a result: the host kept failing until the
	// attempts ran out (or the fetch was cancelled).
	GaveUp int `json:"gave_up"`
	// Superseded counts fetches a refetch or a delete of the bookmark took over.
	Superseded int `json:"superseded"`
	// TagIndex is TagIndexRebuilt, or TagIndexFailed when the recount did not complete.
	TagIndex string `json:"tag_index"`
}

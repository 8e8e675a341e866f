package handlers

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/venturi-dev/bookmarks/shared/tasks"
	"github.com/venturi-dev/venturi"
)

// Chunks of tag-index rebuilds (venturi.RegisterChunks).
const (
	// TagIndexChunkSize is the most rebuild jobs one recount stands for. A chunk is formed
	// from the jobs the worker has claimed, so it also holds at most the default queue's
	// handlers (BOOKMARKS_WORKER_CONCURRENCY).
	TagIndexChunkSize = 100
	// TagIndexChunkLinger is how long a chunk's first rebuild waits for others before the
	// recount runs with what came.
	TagIndexChunkLinger = 100 * time.Millisecond
)

// TagIndexChunks is the chunk configuration of the rebuilds: up to TagIndexChunkSize jobs
// of one key within TagIndexChunkLinger, keyed by the index they rebuild, which is the
// rebuild's dedup key. The app has one tag index, shared by every API key (keys do not own
// bookmarks), so every rebuild has the same key and a chunk costs one recount. Were the
// index per owner, the dedup key, and so the chunk key, would name the owner: one recount
// per owner per chunk.
func TagIndexChunks() venturi.ChunkConfig[tasks.RebuildTagIndex] {
	return venturi.ChunkConfig[tasks.RebuildTagIndex]{Size: TagIndexChunkSize, Linger: TagIndexChunkLinger,
		Key: func(t tasks.RebuildTagIndex) string { return string(t.DedupKey()) }}
}

// RegisterRebuildTagIndex registers handleRebuildTagIndex for tasks.RebuildTagIndex, in
// chunks (TagIndexChunks).
func RegisterRebuildTagIndex(w *Worker) error {
	return registerRebuildTagIndex(w, TagIndexChunks())
}

// registerRebuildTagIndex registers the rebuilds with chunks cfg (the tests' own sizes).
func registerRebuildTagIndex(w *Worker, cfg venturi.ChunkConfig[tasks.RebuildTagIndex]) error {
	return venturi.RegisterChunks(w, cfg, handleRebuildTagIndex)
}

// TagIndexAttachment records what one rebuild job asked for, and the recount it rode.
type TagIndexAttachment struct {
	Tags     []string `json:"tags,omitempty"`
	All      bool     `json:"all,omitempty"`
	Requests int      `json:"requests"`
	Merged   int      `json:"merged"`
	// Chunk is how many rebuild jobs the recount stood for (1: this one alone).
	Chunk int `json:"chunk"`
}

// handleRebuildTagIndex recounts, in one transaction, what a chunk of rebuild jobs asked
// for: the union of their tags, or every tag when one of them asks for all (or the union
// passes tasks.MaxRebuildTags). Pending rebuilds already merge into one job (the payload's
// Merge); chunks take what merges cannot: the rebuilds claimed together, and the reindex
// nodes of import workflows, which venturi never merges. So a burst of rebuild jobs costs
// one recount per chunk, not one per job.
//
// Each job then completes with a note on the recount it rode and outputs a
// tasks.TagIndexOutput (a reindex node's output, for its import's summary). The jobs'
// completions are written after the recount commits, not in its transaction: a recount is
// idempotent, so a crash between the two repeats one recount and loses nothing. A failed
// recount fails every job of the chunk, each retried on its own.
func handleRebuildTagIndex(ctx context.Context, items []*venturi.ChunkItem[tasks.RebuildTagIndex, tasks.TagIndexCarry], app *App) error {
	var all bool
	var tags []string
	requests := 0
	for _, it := range items {
		all = all || it.Task.All
		tags = append(tags, it.Task.Tags...)
		requests += max(it.Task.Requests, 1)
	}
	rebuild := tasks.RebuildTagIndex{All: true}
	if !all {
		rebuild = tasks.NewRebuildTagIndex(tags...) // a rebuild of all tags past the bounds
	}
	var note string
	err := pgx.BeginFunc(ctx, app.Pool, func(tx pgx.Tx) error {
		if rebuild.All {
			if err := app.Store.DeleteAllTagCounts(ctx, tx); err != nil {
				return err
			}
			note = fmt.Sprintf("rebuilt every tag for %d request(s)", requests)
			return app.Store.InsertAllTagCounts(ctx, tx)
		}
		note = fmt.Sprintf("recounted %d tag(s) for %d request(s)", len(rebuild.Tags), requests)
		return app.Store.UpsertTagCounts(ctx, tx, rebuild.Tags)
	})
	for _, it := range items {
		_ = it.Run.SetAttachment(TagIndexAttachment{Tags: it.Task.Tags, All: it.Task.All, Requests: it.Task.Requests,
			Merged: it.Run.Carry().Merged, Chunk: len(items)})
	}
	if err != nil {
		return err // every job fails with it
	}
	if len(items) > 1 {
		note += fmt.Sprintf(" of %d jobs, in one chunk", len(items))
	}
	for _, it := range items {
		it.Set(venturi.CompletedWith(note), it.Run.SetOutput(tasks.TagIndexOutput{
			Tags: len(rebuild.Tags), All: rebuild.All, Chunk: len(items)}))
	}
	return nil
}

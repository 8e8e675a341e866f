package handlers

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/venturi-dev/bookmarks/shared/tasks"
	"github.com/venturi-dev/venturi"
)

// RegisterRebuildTagIndex registers handleRebuildTagIndex for tasks.RebuildTagIndex.
func RegisterRebuildTagIndex(w *Worker) error {
	return venturi.RegisterFunc(w, handleRebuildTagIndex)
}

// TagIndexAttachment records what one rebuild covered.
type TagIndexAttachment struct {
	Tags     []string `json:"tags,omitempty"`
	All      bool     `json:"all,omitempty"`
	Requests int      `json:"requests"`
	Merged   int      `json:"merged"`
}

// handleRebuildTagIndex recounts the payload's tags (or all tags) in one transaction with
// the job's completion.
func handleRebuildTagIndex(ctx context.Context, t tasks.RebuildTagIndex, run *venturi.Run[tasks.TagIndexCarry], app *App) (venturi.Outcome, error) {
	_ = run.SetAttachment(TagIndexAttachment{Tags: t.Tags, All: t.All, Requests: t.Requests, Merged: run.Carry().Merged})
	var out venturi.Outcome
	err := pgx.BeginFunc(ctx, app.Pool, func(tx pgx.Tx) error {
		var note string
		if t.All {
			if err := app.Store.DeleteAllTagCounts(ctx, tx); err != nil {
				return err
			}
			if err := app.Store.InsertAllTagCounts(ctx, tx); err != nil {
				return err
			}
			note = fmt.Sprintf("rebuilt every tag for %d request(s)", t.Requests)
		} else {
			if err := app.Store.UpsertTagCounts(ctx, tx, t.Tags); err != nil {
				return err
			}
			note = fmt.Sprintf("recounted %d tag(s) for %d request(s)", len(t.Tags), t.Requests)
		}
		var err error
		out, err = run.CompleteTx(ctx, tx, venturi.CompletedWith(note))
		return err
	})
	return out, err
}

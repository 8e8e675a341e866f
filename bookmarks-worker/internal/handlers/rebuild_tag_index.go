package handlers

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/venturi-dev/bookmarks/shared/tasks"
	"github.com/venturi-dev/venturi"
)

// RebuildTagIndex runs tasks.RebuildTagIndex.
type RebuildTagIndex tasks.RebuildTagIndex

// Kind implements venturi.Task.
func (t RebuildTagIndex) Kind() string { return tasks.RebuildTagIndex(t).Kind() }

// RegisterRebuildTagIndex registers RebuildTagIndex.
func RegisterRebuildTagIndex(w *Worker) error { return venturi.RegisterSafely[RebuildTagIndex](w) }

// TagIndexAttachment records what one rebuild covered.
type TagIndexAttachment struct {
	Tags     []string `json:"tags,omitempty"`
	All      bool     `json:"all,omitempty"`
	Requests int      `json:"requests"`
	Merged   int      `json:"merged"`
}

// Handle recounts the payload's tags (or all tags) in one transaction with the job's
// completion.
func (t RebuildTagIndex) Handle(ctx context.Context, run *venturi.Run[tasks.TagIndexCarry], app *App) (venturi.Outcome, error) {
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

package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/labstack/echo/v4"

	"github.com/venturi-dev/bookmarks/bookmarks-api/internal/store"
	"github.com/venturi-dev/bookmarks/shared/tasks"
	"github.com/venturi-dev/venturi"
)

func (a *API) enqueueTagRebuild(ctx context.Context, tx pgx.Tx, tags []string) error {
	if len(tags) == 0 {
		return nil
	}
	// Debounced: every tag edit pushes the pending rebuild to TagIndexDelay from now, so a
	// burst runs one rebuild once it quiets (at most tasks.TagIndexMaxWait after it began).
	task := tasks.NewRebuildTagIndex(tags...)
	task.QuietMS = a.cfg.TagIndexDelay.Milliseconds()
	_, err := a.queue.EnqueueTx(ctx, tx, task, venturi.After(a.cfg.TagIndexDelay))
	return err
}

// Tag is a tag-index entry.
type Tag struct {
	Tag       string    `json:"tag"`
	Count     int32     `json:"count"`
	RebuiltAt time.Time `json:"rebuilt_at"`
}

// TagList is a page of GET /tags.
type TagList struct {
	Items []Tag `json:"items"`
	// Next is the cursor of the following page (pass it as ?after=); empty on the last page.
	Next string `json:"next,omitempty"`
}

// Tag list page sizes.
const (
	DefaultTagPage = 100
	MaxTagPage     = 1000
)

// listTags pages through the tag index, most used first (then by name). The cursor is the
// last row's "count:tag"; a tag whose count changes between two pages may be skipped or
// shown twice, as with any keyset on a changing value.
func (a *API) listTags(c echo.Context) error {
	var ve ValidationError
	limit := DefaultTagPage
	if s := c.QueryParam("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxTagPage {
			ve.add("limit", "must be an integer from 1 to "+strconv.Itoa(MaxTagPage))
		}
		limit = n
	}
	p := store.ListTagIndexParams{MaxRows: int32(limit + 1)}
	if s := c.QueryParam("after"); s != "" {
		count, tag, ok := parseTagCursor(s)
		if !ok {
			ve.add("after", "must be the previous page's next")
		}
		p.AfterCount = pgtype.Int4{Int32: count, Valid: true}
		p.AfterTag = pgtype.Text{String: tag, Valid: true}
	}
	if err := ve.orNil(); err != nil {
		return err
	}
	rows, err := a.q.ListTagIndex(c.Request().Context(), a.pool, p)
	if err != nil {
		return err
	}
	more := len(rows) > limit
	rows = rows[:min(len(rows), limit)]
	out := TagList{Items: make([]Tag, 0, len(rows))}
	for _, r := range rows {
		out.Items = append(out.Items, Tag{Tag: r.Tag, Count: r.BookmarkCount, RebuiltAt: r.RebuiltAt})
	}
	if more {
		last := out.Items[len(out.Items)-1]
		out.Next = strconv.Itoa(int(last.Count)) + ":" + last.Tag
	}
	return c.JSON(http.StatusOK, out)
}

// parseTagCursor parses a GET /tags cursor, "count:tag".
func parseTagCursor(s string) (int32, string, bool) {
	n, tag, ok := strings.Cut(s, ":")
	if !ok || len(tag) > maxTagLen || !tagPattern.MatchString(tag) {
		return 0, "", false
	}
	count, err := strconv.ParseInt(n, 10, 32)
	if err != nil || count < 0 {
		return 0, "", false
	}
	return int32(count), tag, true
}

// RebuildTagsRequest is the body of POST /tags/rebuild.
type RebuildTagsRequest struct {
	Tags []string `json:"tags"`
	All  bool     `json:"all"`
	// DelayMS delays the rebuild so that more requests can merge into it (default: the
	// server's tag-index delay; at most one hour).
	DelayMS *int64 `json:"delay_ms"`
}

func (a *API) rebuildTags(c echo.Context) error {
	var req RebuildTagsRequest
	if err := decodeJSON(c, &req); err != nil {
		return err
	}
	var ve ValidationError
	tags, msg := checkTags(req.Tags)
	if msg != "" {
		ve.add("tags", msg)
	}
	if len(tags) == 0 && !req.All {
		ve.add("tags", "name at least one tag, or set all")
	}
	delay := a.cfg.TagIndexDelay
	if req.DelayMS != nil {
		if *req.DelayMS < 0 || *req.DelayMS > 3_600_000 {
			ve.add("delay_ms", "must be from 0 to 3600000")
		}
		delay = time.Duration(*req.DelayMS) * time.Millisecond
	}
	if err := ve.orNil(); err != nil {
		return err
	}
	task := tasks.NewRebuildTagIndex(tags...)
	if req.All {
		task = tasks.RebuildTagIndex{All: true, Requests: 1}
	}
	res, err := a.queue.Enqueue(c.Request().Context(), task, venturi.After(delay))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusAccepted, Enqueued{JobID: res.ID.String(), Action: res.Action.String()})
}

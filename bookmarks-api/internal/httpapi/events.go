package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/bookmarks/shared/tasks"
	"github.com/venturi-dev/venturi"
)

// Limits of GET /events.
const (
	MaxEventsLimit = 100              // events per response
	MaxEventsWait  = 20 * time.Second // longest long poll
)

// Long-poll bounds (Config.MaxLongPollsPerKey, Config.MaxLongPolls). A waiting request
// holds one of the MaxInFlight places for up to MaxEventsWait, so the process-wide bound
// stays well under DefaultMaxInFlight: long polls never take the places other requests
// need. Two per key let a client keep one poll open while the next one starts.
const (
	DefaultMaxLongPollsPerKey = 2
	DefaultMaxLongPolls       = 64
)

// longPollRetryAfter is the Retry-After of a refused long poll, in seconds.
const longPollRetryAfter = "1"

// errTooManyLongPolls is a long poll over its key's bound: 429 with Retry-After.
var errTooManyLongPolls = echo.NewHTTPError(http.StatusTooManyRequests,
	"too many GET /events?wait= requests waiting for this API key: wait for one to answer, or retry after the Retry-After header's seconds")

// errLongPollsFull is a long poll over the process's bound: 503 with Retry-After, not
// logged (as a shed request).
var errLongPollsFull = errors.New("too many GET /events?wait= requests are waiting on this server: retry after the Retry-After header's seconds")

// longPolls counts the long polls waiting, per API key and in all.
type longPolls struct {
	mu               sync.Mutex
	perKey           map[ulid.ULID]int
	total            int
	maxPerKey, limit int
}

func newLongPolls(maxPerKey, limit int) *longPolls {
	return &longPolls{perKey: map[ulid.ULID]int{}, maxPerKey: maxPerKey, limit: limit}
}

// acquire admits a long poll of key, or refuses it (errTooManyLongPolls,
// errLongPollsFull). release ends an admitted one.
func (l *longPolls) acquire(key ulid.ULID) (release func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.perKey[key] >= l.maxPerKey:
		return nil, errTooManyLongPolls
	case l.total >= l.limit:
		return nil, errLongPollsFull
	}
	l.perKey[key]++
	l.total++
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.total--
		if l.perKey[key]--; l.perKey[key] == 0 {
			delete(l.perKey, key)
		}
	}, nil
}

// waiting is how many long polls are admitted now.
func (l *longPolls) waiting() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// Metadata keys the API stamps on the fetch jobs it enqueues.
const (
	metaBookmark = "bookmark" // the bookmark's ID
	metaKey      = "key"      // the ID of the API key that asked for the fetch
)

// fetchMeta stamps a fetch job with its bookmark and the caller's key, so that GET /events
// shows the caller the progress of its own bookmarks' fetches.
func fetchMeta(c echo.Context, bookmark ulid.ULID) venturi.EnqueueOption {
	m := venturi.Meta{metaBookmark: bookmark.String()}
	if id, ok := keyID(c); ok {
		m[metaKey] = id.String()
	}
	return venturi.WithMeta(m)
}

// FetchEvent is one step of a bookmark's fetch, as GET /events shows it.
type FetchEvent struct {
	BookmarkID string    `json:"bookmark_id"`
	JobID      string    `json:"job_id"`
	Event      string    `json:"event"` // enqueued, started, failed, completed, dead, ...
	Run        int       `json:"run,omitempty"`
	State      string    `json:"state,omitempty"`
	At         time.Time `json:"at"`
	RetryInMs  int64     `json:"retry_in_ms,omitempty"` // a failed fetch's retry delay
}

// EventsPage is the body of GET /events: the events after the request's cursor and the
// cursor to pass as after next time.
type EventsPage struct {
	Events []FetchEvent `json:"events"`
	Cursor string       `json:"cursor"`
}

// listEvents is GET /events?after=CURSOR&limit=N&wait=D: the fetch events of the caller's
// own bookmarks (those whose fetch its API key asked for) after the cursor, oldest first.
// With none yet it waits (a long poll) up to wait (default 0: answer at once; at most
// MaxEventsWait and the request's time limit). The cursor is opaque; an empty one starts
// at the oldest event kept. Long polls are bounded per key and in the process (longPolls):
// one over a bound is refused at once, with Retry-After; one without wait never is.
func (a *API) listEvents(c echo.Context) error {
	after, err := venturi.ParseEventCursor(c.QueryParam("after"))
	if err != nil {
		return &badRequest{msg: "after must be a cursor returned by this endpoint", field: "after"}
	}
	limit := 50
	if s := c.QueryParam("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxEventsLimit || len(s) > 4 {
			return &badRequest{msg: "limit must be a whole number from 1 to " + strconv.Itoa(MaxEventsLimit), field: "limit"}
		}
		limit = n
	}
	var wait time.Duration
	if s := c.QueryParam("wait"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 || d > MaxEventsWait || len(s) > 32 {
			return &badRequest{msg: "wait must be a duration such as 5s, at most " + MaxEventsWait.String(), field: "wait"}
		}
		wait = d
	}
	caller, _ := keyID(c)
	ctx := c.Request().Context()
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl)-answerReserve)
	}
	if wait > 0 {
		release, err := a.longPolls.acquire(caller)
		if err != nil {
			c.Response().Header().Set(echo.HeaderRetryAfter, longPollRetryAfter)
			return err
		}
		defer release()
	}
	wctx, cancel := context.WithTimeout(ctx, max(wait, 0))
	defer cancel()
	page := EventsPage{Events: []FetchEvent{}}
	cur := after
	for pages := 0; pages < 10; pages++ { // bounded work per request: the cursor moves on anyway
		var evs []venturi.JobEvent
		var next venturi.EventCursor
		if wait > 0 {
			evs, next, err = a.queue.WaitEvents(wctx, cur, MaxEventsLimit)
		} else {
			evs, next, err = a.queue.Events(ctx, cur, MaxEventsLimit)
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		for _, e := range evs {
			if e.Kind != tasks.KindFetchBookmark || e.Meta[metaKey] != caller.String() || caller == (ulid.ULID{}) {
				cur = e.Cursor // not the caller's: skipped, and never read again
				continue
			}
			page.Events = append(page.Events, FetchEvent{
				BookmarkID: e.Meta[metaBookmark], JobID: e.JobID.String(), Event: string(e.Event), Run: e.Run,
				State: string(e.State), At: e.At.UTC(), RetryInMs: e.Delay.Milliseconds(),
			})
			cur = e.Cursor
			if len(page.Events) == limit {
				break
			}
		}
		if len(evs) == 0 {
			cur = next
		}
		if len(page.Events) > 0 || len(evs) == 0 || wctx.Err() != nil {
			break
		}
	}
	page.Cursor = string(cur)
	return c.JSON(http.StatusOK, page)
}

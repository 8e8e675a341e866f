package venturi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// Lifecycle events beyond the journal's. A lifecycle event ([JobEvent]) names the
// transition with the journal's [Event] where one records it (merged, completed, paused,
// failed, dead, abandoned: the lease expired and the job was rescued, interrupted,
// replaced, dropped, cancelled, waiting) and with these for the transitions the journal
// does not record.
const (
	EventEnqueued Event = "enqueued" // a new job was inserted
	EventStarted  Event = "started"  // a run was claimed (its lease and fencing token are new)
	EventReleased Event = "released" // a claimed run never started (shutdown, a paused queue): back to available, not a run
	EventWoken    Event = "woken"    // a waiting job became available: a signal it waits for came, or its wait timed out
	// EventLeaseLost is delivered to a worker's subscribers only: the run's result was
	// refused because the run no longer held its job (the stream has the rescue's
	// abandoned event instead).
	EventLeaseLost Event = "lease_lost"
	// EventOverflow is delivered to a subscriber only: it was not reading fast enough
	// and [JobEvent].Dropped events were dropped before this one.
	EventOverflow Event = "overflow"
)

// JobEvent is one transition of a job, as a [Subscription] delivers it and as
// [Queue.Events] reads it from the durable stream.
type JobEvent struct {
	// Event names the transition.
	Event Event `json:"event"`
	// JobID, Kind and Queue identify the job.
	JobID ulid.ULID `json:"job_id"`
	Kind  string    `json:"kind"`
	Queue string    `json:"queue"`
	// Run is the run's number (the job's runs so far for enqueued and merged events).
	Run int `json:"run,omitempty"`
	// State is the job's state after the transition.
	State State `json:"state,omitempty"`
	// Note is the run's note or error message (at most 1 KiB in the stream), a merge's
	// decision, a cancel's reason.
	Note string `json:"note,omitempty"`
	// Worker is the ID of the worker that ran (or claimed) the job, when there is one.
	Worker string `json:"worker,omitempty"`
	// At is when the transition happened: in the stream, the time of the transaction that
	// wrote it (database clock); in a subscription, the worker's clock when it learned
	// that the transition committed.
	At time.Time `json:"at"`
	// StartedAt is the run's start (the claim's database time) for started events and
	// the ends of runs.
	StartedAt time.Time `json:"started_at,omitzero"`
	// RunAt is the job's due time after the transition (in the stream; in a
	// subscription, for started events): for a failed run, when its retry is due.
	RunAt time.Time `json:"run_at,omitzero"`
	// Delay is a failed run's retry delay (its backoff), a pause's delay or a wait's
	// timeout.
	Delay time.Duration `json:"delay,omitempty"`
	// Meta is the job's metadata ([WithMeta], enqueue middleware).
	Meta Meta `json:"meta,omitempty"`
	// Dropped is, for [EventOverflow], how many events the subscriber missed.
	Dropped uint64 `json:"dropped,omitempty"`
	// Cursor is the event's position in the durable stream: resume after it with
	// [Queue.Events]. Empty in subscriptions.
	Cursor EventCursor `json:"cursor,omitempty"`
}

// EventCursor is a position in the durable event stream: an opaque string, empty for the
// stream's beginning (its oldest retained event). It is safe to store and to hand to
// clients; [ParseEventCursor] validates one that comes back.
type EventCursor string

// ErrInvalidCursor reports a string that is not an [EventCursor].
var ErrInvalidCursor = errors.New("venturi: invalid event cursor")

const cursorPrefix = "e1."

// ParseEventCursor validates s as an event cursor (the empty string is the stream's
// beginning). It returns [ErrInvalidCursor] for anything else.
func ParseEventCursor(s string) (EventCursor, error) {
	if _, _, err := EventCursor(s).parts(); err != nil {
		return "", err
	}
	return EventCursor(s), nil
}

// parts returns the cursor's transaction ID and sequence number.
func (c EventCursor) parts() (xid uint64, seq int64, err error) {
	if c == "" {
		return 0, 0, nil
	}
	rest, ok := strings.CutPrefix(string(c), cursorPrefix)
	if !ok || len(c) > 64 {
		return 0, 0, ErrInvalidCursor
	}
	x, s, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, 0, ErrInvalidCursor
	}
	if xid, err = strconv.ParseUint(x, 36, 64); err != nil {
		return 0, 0, ErrInvalidCursor
	}
	if seq, err = strconv.ParseInt(s, 36, 64); err != nil || seq < 0 {
		return 0, 0, ErrInvalidCursor
	}
	return xid, seq, nil
}

func makeCursor(xid uint64, seq int64) EventCursor {
	return EventCursor(cursorPrefix + strconv.FormatUint(xid, 36) + "." + strconv.FormatInt(seq, 36))
}

// MaxEventsPage bounds the events one [Queue.Events] call returns.
const MaxEventsPage = 1000

// Events returns up to limit events of the durable stream after the cursor, oldest
// first, and the cursor to resume from (after the last event returned; after unchanged
// when there is none). Only jobs that opted in have events ([EventStreamer],
// [QueueConfig].StreamEvents, [WithEvents]).
//
// The stream misses nothing and repeats nothing: resumed from the returned cursor, by
// this process or another after a restart, it returns every event once, in the order of
// the transactions that wrote them (the events of one transaction in the order written).
// An event is returned once every transaction that began before the one that wrote it has
// ended, so events lag behind their commit by the longest transaction open in the
// cluster at the time (usually milliseconds; a transaction left open for an hour holds
// the stream back for an hour). Events older than the workers' retention are pruned
// (the longer of Config.RetainCompleted and RetainDead): a cursor older than that resumes
// at the oldest event kept.
//
// limit <= 0 means 100; it is capped at [MaxEventsPage]. An invalid cursor returns
// [ErrInvalidCursor].
func (q *Queue) Events(ctx context.Context, after EventCursor, limit int) ([]JobEvent, EventCursor, error) {
	xid, seq, err := after.parts()
	if err != nil {
		return nil, after, err
	}
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, MaxEventsPage)
	rows, err := q.q.ReadEvents(ctx, q.pool, dbsqlc.ReadEventsParams{
		AfterXid: strconv.FormatUint(xid, 10), AfterSeq: seq, Max: int32(limit)})
	if err != nil {
		return nil, after, fmt.Errorf("venturi: read events: %w", err)
	}
	out := make([]JobEvent, 0, len(rows))
	next := after
	for _, r := range rows {
		x, err := strconv.ParseUint(r.Xid, 10, 64)
		if err != nil {
			return nil, after, fmt.Errorf("venturi: read events: transaction ID %q: %w", r.Xid, err)
		}
		e := JobEvent{
			Event: Event(r.Event), JobID: ulidOf(r.JobID), Kind: r.Kind, Queue: r.Queue, Run: int(r.Run),
			State: State(r.State), Note: r.Note, Worker: r.Worker, At: r.At, Delay: time.Duration(r.DelayUs) * time.Microsecond,
			Cursor: makeCursor(x, r.Seq),
		}
		if r.StartedAt != nil {
			e.StartedAt = *r.StartedAt
		}
		if r.RunAt != nil {
			e.RunAt = *r.RunAt
		}
		if len(r.Meta) > 0 && string(r.Meta) != "null" {
			if err := json.Unmarshal(r.Meta, &e.Meta); err != nil {
				return nil, after, fmt.Errorf("venturi: decode metadata of event %s: %w", e.Cursor, err)
			}
		}
		out = append(out, e)
		next = e.Cursor
	}
	return out, next, nil
}

// EventsTail returns a cursor at the stream's current end: [Queue.Events] from it returns
// the events of transactions that are still running or begin later, and none that
// [Queue.Events] from an earlier cursor could return now. A reader that wants only what
// happens from now on starts there.
func (q *Queue) EventsTail(ctx context.Context) (EventCursor, error) {
	s, err := q.q.EventsTail(ctx, q.pool)
	if err != nil {
		return "", fmt.Errorf("venturi: events tail: %w", err)
	}
	x, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return "", fmt.Errorf("venturi: events tail: transaction ID %q: %w", s, err)
	}
	return makeCursor(x, 0), nil
}

// EventPoll is how often [Queue.WaitEvents] looks for events without a notification
// (the notification's fallback, and its only means with [QueueConfig].NoNotify).
const EventPoll = time.Second

// WaitEvents is [Queue.Events] that waits, until ctx ends, for at least one event when
// there is none after the cursor. It is woken by a notification that the writing
// transaction sends at commit, and polls every [EventPoll] as a fallback (and, after a
// notification, again within milliseconds while the event is held back by an older open
// transaction). When ctx ends it returns what it has: no events, the cursor unchanged and
// ctx's error. Every waiter of the Queue shares its one LISTEN connection (the one
// [Queue.Await] uses): a wait holds no pool connection, only the statements that read the
// stream take one, briefly, so any number of long polls leave the pool to other work.
func (q *Queue) WaitEvents(ctx context.Context, after EventCursor, limit int) ([]JobEvent, EventCursor, error) {
	evs, next, err := q.Events(ctx, after, limit)
	if err != nil || len(evs) > 0 {
		return evs, next, err
	}
	var wake chan struct{}
	if !q.poll {
		if ch, err := q.eventsChannel(ctx); err == nil {
			wake = make(chan struct{}, 1)
			sub := q.notifier().Listen(ch, func(string) {
				select {
				case wake <- struct{}{}:
				default:
				}
			})
			defer sub.Unlisten()
			t := time.NewTimer(EventPoll)
			select {
			case <-sub.Ready():
			case <-t.C: // not listening yet (the database is away?): the poll serves meanwhile
			case <-ctx.Done():
			}
			t.Stop()
			// Events committed before LISTEN took effect would not notify: look again.
			if evs, next, err = q.Events(ctx, after, limit); err != nil || len(evs) > 0 {
				return evs, next, err
			}
		}
	}
	retry := time.Duration(0) // after a notification: look again soon
	for {
		d := EventPoll
		if retry > 0 {
			d = retry
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, after, ctx.Err()
		case <-wake:
			t.Stop()
			retry = 5 * time.Millisecond
		case <-t.C:
			if retry > 0 {
				retry = min(retry*2, EventPoll)
			}
		}
		if evs, next, err = q.Events(ctx, after, limit); err != nil || len(evs) > 0 {
			return evs, next, err
		}
	}
}

// eventsChannel is the channel the event stream notifies (venturi_events_channel(), after
// the schema), read once.
func (q *Queue) eventsChannel(ctx context.Context) (string, error) {
	q.eventsMu.Lock()
	defer q.eventsMu.Unlock()
	if q.eventsCh == "" {
		ch, err := q.q.EventsChannel(ctx, q.pool)
		if err != nil {
			return "", err
		}
		q.eventsCh = ch
	}
	return q.eventsCh, nil
}

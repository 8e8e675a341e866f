package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi"
)

// The durable event stream, read the way an application reads it: a reader that saves its
// cursor with what it read (one transaction per page, in chaos_event_read and
// chaos_event_cursor), restarts (a new pool and Queue that resume from the saved cursor)
// every few pages and whenever a read fails (PostgreSQL restarts), and drains the stream
// once the workers have stopped. The check compares what it read with the stream's table
// and with the jobs' journals: it must have read every event once, in cursor order, and
// every transition of an opted-in job must be in it.

const invEvents = "the durable event stream, read by a reader that restarts, misses nothing and repeats nothing (opted-in jobs)"

const eventSchema = `
CREATE TABLE chaos_event_read (
    pos    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    cursor text NOT NULL,
    job_id uuid NOT NULL,
    event  text NOT NULL,
    run    int NOT NULL
);
CREATE TABLE chaos_event_cursor (
    one      bool PRIMARY KEY DEFAULT true CHECK (one),
    cursor   text NOT NULL,
    restarts int NOT NULL DEFAULT 0
);
INSERT INTO chaos_event_cursor (cursor) VALUES ('');`

// eventReader reads the stream until ctx ends, restarting as described above. It returns
// how many times it restarted.
func eventReader(ctx context.Context, dsn string, logf func(string, ...any)) int {
	restarts := 0
	for ctx.Err() == nil {
		err := readEventsOnce(ctx, dsn, 5+restarts%7)
		if ctx.Err() != nil {
			break
		}
		restarts++
		if err != nil && restarts%20 == 1 {
			logf("event reader restarts after: %v", err)
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
	return restarts
}

// readEventsOnce is one life of the reader: it loads its cursor, reads up to pages pages
// (waiting for events), saving each with the cursor after it, and returns.
func readEventsOnce(ctx context.Context, dsn string, pages int) error {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	var cur string
	if err := pool.QueryRow(ctx, `UPDATE chaos_event_cursor SET restarts = restarts + 1 RETURNING cursor`).Scan(&cur); err != nil {
		return err
	}
	for range pages {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		evs, next, err := q.WaitEvents(wctx, venturi.EventCursor(cur), 50)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			continue
		}
		if err != nil {
			return err
		}
		if err := saveEvents(ctx, pool, cur, evs, string(next)); err != nil {
			return err
		}
		cur = string(next)
	}
	return nil
}

// saveEvents records a page and the cursor after it in one transaction, guarded by the
// cursor it was read from (a stale reader cannot record a page twice).
func saveEvents(ctx context.Context, pool *pgxpool.Pool, from string, evs []venturi.JobEvent, next string) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE chaos_event_cursor SET cursor = $2 WHERE cursor = $1`, from, next)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return errors.New("the saved cursor moved under this reader")
		}
		for _, e := range evs {
			if _, err := tx.Exec(ctx, `INSERT INTO chaos_event_read (cursor, job_id, event, run) VALUES ($1, $2, $3, $4)`,
				string(e.Cursor), e.JobID[:], string(e.Event), e.Run); err != nil {
				return err
			}
		}
		return nil
	})
}

// drainEvents reads the rest of the stream after the workers stopped, until it is empty.
func drainEvents(ctx context.Context, dsn string) error {
	for range 100 {
		var before int64
		pool, err := pgxpool.New(ctx, dsn)
		if err != nil {
			return err
		}
		err = pool.QueryRow(ctx, `SELECT count(*) FROM chaos_event_read`).Scan(&before)
		pool.Close()
		if err != nil {
			return err
		}
		if err := readEventsOnce(ctx, dsn, 3); err != nil {
			return err
		}
		pool, err = pgxpool.New(ctx, dsn)
		if err != nil {
			return err
		}
		var after, pending int64
		err = pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM chaos_event_read), (SELECT count(*) FROM venturi_event)`).Scan(&after, &pending)
		pool.Close()
		if err != nil {
			return err
		}
		if after == before && after >= pending {
			return nil
		}
	}
	return errors.New("the stream did not drain")
}

// evKey is an event's position in the stream: its transaction ID and sequence number.
type evKey struct {
	xid uint64
	seq int64
}

func (k evKey) less(o evKey) bool { return k.xid < o.xid || (k.xid == o.xid && k.seq < o.seq) }

// parseCursor decodes a venturi event cursor ("e1.<xid>.<seq>" in base 36). The format is
// opaque to applications; the chaos suite reads it to compare with the table.
func parseCursor(c string) (evKey, error) {
	p := strings.Split(c, ".")
	if len(p) != 3 || p[0] != "e1" {
		return evKey{}, fmt.Errorf("cursor %q", c)
	}
	x, err1 := strconv.ParseUint(p[1], 36, 64)
	s, err2 := strconv.ParseInt(p[2], 36, 64)
	if err1 != nil || err2 != nil {
		return evKey{}, fmt.Errorf("cursor %q", c)
	}
	return evKey{x, s}, nil
}

// streamEvent is an event as read (with its key from the cursor) or as stored.
type streamEvent struct {
	key   evKey
	job   string
	event string
	run   int
}

// evJob is what the check knows of a job: whether it opted in, its runs and its journal's
// events in order (known is false when entries moved out of the row: not compared).
type evJob struct {
	optedIn bool
	runs    int
	journal []string
	known   bool
}

// journalEvents are the stream's events that record a journal entry.
var journalEvents = map[string]bool{}

func init() {
	for _, e := range []venturi.Event{venturi.EventCompleted, venturi.EventPaused, venturi.EventFailed, venturi.EventDead,
		venturi.EventAbandoned, venturi.EventInterrupted, venturi.EventMerged, venturi.EventReplaced, venturi.EventDropped,
		venturi.EventCancelled, venturi.EventWaiting} {
		journalEvents[string(e)] = true
	}
}

// eventViolations checks what a restarting reader read against the stream's table and
// the jobs: every stored event read exactly once, in cursor order, nothing read that is
// not stored; each opted-in job's journal entries in its events, in order, one enqueued
// event, and one started event per run (less the released ones); no events for a job
// that did not opt in. It returns one line per violation (at most 20 per kind).
func eventViolations(read, stored []streamEvent, jobs map[string]evJob) []string {
	var bad []string
	add := func(format string, a ...any) {
		if len(bad) < 60 {
			bad = append(bad, fmt.Sprintf(format, a...))
		}
	}
	seen := map[evKey]int{}
	for i, e := range read {
		seen[e.key]++
		if seen[e.key] == 2 {
			add("event %v (job %s %s) read twice", e.key, e.job, e.event)
		}
		if i > 0 && !read[i-1].key.less(e.key) && read[i-1].key != e.key {
			add("event %v read after %v: out of cursor order", e.key, read[i-1].key)
		}
	}
	storedKeys := map[evKey]bool{}
	for _, e := range stored {
		storedKeys[e.key] = true
		if seen[e.key] == 0 {
			add("event %v (job %s %s run %d) is stored but was never read", e.key, e.job, e.event, e.run)
		}
	}
	byJob := map[string][]streamEvent{}
	for _, e := range read {
		if !storedKeys[e.key] {
			add("event %v (job %s %s) was read but is not stored", e.key, e.job, e.event)
		}
		byJob[e.job] = append(byJob[e.job], e)
	}
	for id, j := range jobs {
		evs := byJob[id]
		if !j.optedIn {
			if len(evs) > 0 {
				add("job %s did not opt in but has %d events", id, len(evs))
			}
			continue
		}
		var enq, started, released int
		var fromStream []string
		for _, e := range evs {
			switch {
			case e.event == string(venturi.EventEnqueued):
				enq++
			case e.event == string(venturi.EventStarted):
				started++
			case e.event == string(venturi.EventReleased):
				released++
			case journalEvents[e.event]:
				fromStream = append(fromStream, e.event)
			}
		}
		if enq != 1 {
			add("job %s: %d enqueued events, want 1", id, enq)
		}
		if started-released != j.runs {
			add("job %s: %d started - %d released events, want its %d runs", id, started, released, j.runs)
		}
		if j.known && strings.Join(fromStream, " ") != strings.Join(j.journal, " ") {
			add("job %s: stream has %q, journal has %q", id, strings.Join(fromStream, " "), strings.Join(j.journal, " "))
		}
	}
	return bad
}

// checkEvents loads the reader's record, the stream and the jobs, and checks invEvents.
func (r *report) checkEvents(ctx context.Context, pool *pgxpool.Pool) error {
	r.invariants = append(r.invariants, invariant{name: invEvents})
	var read, stored []streamEvent
	rows, err := pool.Query(ctx, `SELECT cursor, job_id, event, run FROM chaos_event_read ORDER BY pos`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var c string
		var id pgtype.UUID
		var e streamEvent
		if err := rows.Scan(&c, &id, &e.event, &e.run); err != nil {
			return err
		}
		if e.key, err = parseCursor(c); err != nil {
			return err
		}
		e.job = fmt.Sprintf("%x", id.Bytes)
		read = append(read, e)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	rows, err = pool.Query(ctx, `SELECT xid::text, seq, job_id, event, run FROM venturi_event`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var x string
		var id pgtype.UUID
		var e streamEvent
		if err := rows.Scan(&x, &e.key.seq, &id, &e.event, &e.run); err != nil {
			return err
		}
		if e.key.xid, err = strconv.ParseUint(x, 10, 64); err != nil {
			return err
		}
		e.job = fmt.Sprintf("%x", id.Bytes)
		stored = append(stored, e)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	jobs := map[string]evJob{}
	rows, err = pool.Query(ctx, `SELECT id, events, runs, journal_moved, journal FROM venturi_job_all WHERE kind <> '`+singletonKind+`'`)
	if err != nil {
		return err
	}
	opted := 0
	for rows.Next() {
		var id pgtype.UUID
		var j evJob
		var moved int64
		var journal []byte
		if err := rows.Scan(&id, &j.optedIn, &j.runs, &moved, &journal); err != nil {
			return err
		}
		var entries []venturi.JournalEntry
		if err := json.Unmarshal(journal, &entries); err != nil {
			return err
		}
		for _, en := range entries {
			j.journal = append(j.journal, string(en.Event))
		}
		j.known = moved == 0
		if j.optedIn {
			opted++
		}
		jobs[fmt.Sprintf("%x", id.Bytes)] = j
	}
	if err := rows.Err(); err != nil {
		return err
	}
	var restarts int
	if err := pool.QueryRow(ctx, `SELECT restarts FROM chaos_event_cursor`).Scan(&restarts); err != nil {
		return err
	}
	for _, v := range eventViolations(read, stored, jobs) {
		r.fail(invEvents, "%s", v)
	}
	r.events = fmt.Sprintf("event stream: %d events of %d opted-in jobs read by a reader that started %d times", len(read), opted, restarts)
	return nil
}

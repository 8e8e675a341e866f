// Package completer holds venturi's run completer ([Completer]): the worker's service
// that writes the ends of runs ([jobrun.End]) in batches, one FinishRuns statement in
// flight, retries through outages, splits a batch the database refuses to find the row
// that poisons it, spaces out the wakes of other workers when gated runs free a slot,
// and settles each end with the run tracker and the worker's event subscribers.
//
// What writing an end takes is [Writer.Write] (FinishRuns, and in the same transaction
// what the end entails: signals consumed, waits armed, breakers told, workers woken), with
// the statement's parameters built by [Params]; Run.CompleteTx and the worker's Drain and
// shutdown use these directly.
//
// The completer knows nothing of package venturi: it reaches the database through the
// functions the worker gives it ([SendFunc], [TxFunc]), the runs through the
// [jobrun.Tracker], and it reports each settled end to a callback ([Fate]); the worker's
// subscribers and its event types stay in the root.
package completer

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/jobrun"
	"github.com/venturi-dev/venturi/internal/pgerr"
)

// MaxBatch is the most run ends one FinishRuns statement writes.
const MaxBatch = 1000

// gateWakeEvery is the shortest time between two notifications that gated runs ended.
// Each one wakes every worker of the kinds, which then claims: one per finished batch
// cost a claim round trip on every worker per batch, the worker's own included (which
// looks again anyway, having a free handler slot). Other workers hear of a freed slot
// or limit within this time, or at their poll when no channel is used.
const gateWakeEvery = 100 * time.Millisecond

// Fate is what became of a submitted end, as the completer reports it to
// [Config.Publish].
type Fate int

const (
	// Written: the end is durable.
	Written Fate = iota + 1
	// Discarded: its statement committed, but the run no longer held its job (its token
	// did not match: the lease was lost, and the job rescued); nothing was written.
	Discarded
	// Dropped: the end was not written and will not be: it was submitted while the
	// completer was closing, or the completer gave up on it (its context ended, or the
	// tracker no longer holds the run). The job is left to the rescue.
	Dropped
)

// Config configures a [Completer].
type Config struct {
	// Writer writes the batches. Required (see [Writer]).
	Writer Writer
	// DB sends the wakes the completer holds back, on their own (NOTIFY). Required when
	// Writer.Channel is set.
	DB DB
	// Tracker holds the runs whose ends are submitted: the completer marks them as being
	// written while a statement is in flight, and removes them once settled. Required.
	Tracker *jobrun.Tracker
	// Again is called after a batch that made a job pending again (available, or
	// scheduled: a pause or a retry's backoff), so that the worker looks for it. Required.
	Again func()
	// Publish is called once for every submitted end, when it is settled, with what
	// became of it; it must not block. Required.
	Publish func(e *jobrun.End, fate Fate)
	// CleanNote makes a note storable in jsonb (no NUL characters, valid UTF-8, bounded),
	// for the note of an end stored degraded. Required.
	CleanNote func(string) string
	// Logger receives the completer's warnings and errors. Required.
	Logger *slog.Logger
	// Buffer is how many submitted ends may wait for a statement before Submit blocks; at
	// least MaxBatch.
	Buffer int
}

// Completer writes the ends of runs in batches: whatever has queued up while the previous
// batch was in flight goes in the next FinishRuns statement, so a busy worker writes
// many results per round trip and an idle one adds no delay. A result counts as reported
// once its batch has committed. Build it with [New]; run it with [Completer.Run], hand it
// ends with [Completer.Submit], and stop it with [Completer.Close].
type Completer struct {
	cfg     Config
	log     *slog.Logger
	tracker *jobrun.Tracker
	in      chan *jobrun.End
	closing chan struct{}
	done    chan struct{}

	// Wakes of other workers when gated runs end (a slot or a limit freed): at most one
	// per gateWakeEvery, the rest sent once that time has passed (see flush).
	lastWake time.Time
	wakeDue  []string    // kinds whose wake is held back
	wakeT    *time.Timer // fires when the held-back wake is due
}

// New returns a completer configured by cfg.
func New(cfg Config) *Completer {
	return &Completer{
		cfg: cfg, log: cfg.Logger, tracker: cfg.Tracker,
		in:      make(chan *jobrun.End, max(MaxBatch, cfg.Buffer)),
		closing: make(chan struct{}),
		done:    make(chan struct{}),
	}
}

// Submit queues a run's end.
func (c *Completer) Submit(e *jobrun.End) {
	select {
	case c.in <- e:
	case <-c.closing:
		// Shutdown already released this run; its result is discarded by the fence.
		c.tracker.Remove(e.Job)
		c.cfg.Publish(e, Dropped)
	}
}

// Close flushes what was submitted and stops Run. It returns when Run has returned, which
// happens at once when Run's ctx is cancelled.
func (c *Completer) Close() {
	close(c.closing)
	<-c.done
}

// Run writes results one FinishRuns at a time, until Close: while a statement is in
// flight, submitted results queue up, and the next statement takes all of them. An idle
// worker writes each result at once; a busy one writes hundreds per statement. One
// statement in flight measured best: parallel FinishRuns statements on neighbouring rows
// contend for the same heap and index pages, and cost more server CPU per row than their
// overlap saves (bench/FINDINGS.md). ctx is every statement's parent: once it is done,
// the completer stops retrying.
func (c *Completer) Run(ctx context.Context) {
	defer close(c.done)
	c.wakeT = time.NewTimer(time.Hour)
	c.wakeT.Stop()
	for {
		select {
		case r := <-c.in:
			c.flush(ctx, c.drain([]*jobrun.End{r}))
		case <-c.wakeT.C:
			c.sendWake(ctx)
		case <-c.closing:
			for batch := c.drain(nil); len(batch) > 0; batch = c.drain(nil) {
				c.flush(ctx, batch)
			}
			c.wakeT.Stop()
			c.sendWake(ctx) // what this worker frees, it will not claim again
			return
		}
	}
}

// wakeNow reports whether the batch's gated runs wake the workers of their kinds in the
// batch's own transaction (the last wake is gateWakeEvery old), or are held back for
// sendWake, which the timer fires when that time has passed.
func (c *Completer) wakeNow(batch []*jobrun.End) bool {
	if time.Since(c.lastWake) >= gateWakeEvery {
		return true
	}
	for _, r := range batch {
		if r.Job.Gated && !slices.Contains(c.wakeDue, r.Job.Kind) {
			c.wakeDue = append(c.wakeDue, r.Job.Kind)
		}
	}
	if len(c.wakeDue) > 0 {
		c.wakeT.Reset(gateWakeEvery - time.Since(c.lastWake))
	}
	return false
}

// sendWake sends the wakes held back (after their runs' ends committed).
func (c *Completer) sendWake(ctx context.Context) {
	if len(c.wakeDue) == 0 {
		return
	}
	nctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.notify(nctx, c.wakeDue); err != nil {
		c.log.Warn("venturi: waking workers after runs freed slots failed; they will see it at their next poll", "err", err)
	}
	c.wakeDue, c.lastWake = c.wakeDue[:0], time.Now()
}

// notify wakes the workers of kinds, when there is a channel.
func (c *Completer) notify(ctx context.Context, kinds []string) error {
	if c.cfg.Writer.Channel == "" {
		return nil
	}
	return notifyKinds(ctx, c.cfg.DB, c.cfg.Writer.Channel, kinds)
}

func (c *Completer) drain(batch []*jobrun.End) []*jobrun.End {
	for len(batch) < MaxBatch {
		select {
		case r := <-c.in:
			batch = append(batch, r)
		default:
			return batch
		}
	}
	return batch
}

// flush writes one batch. A failure that is not a refusal of the data (the connection
// broke, the server restarts) is retried with the same results until they are written or
// the worker stops, however long the outage: each row is fenced by its run's token, so a
// late write of a run whose job was rescued meanwhile is discarded, and one whose job was
// not rescued is stored instead of being redone. (The completer used to give up when the
// worker's estimate of the lease ran out, so every run that finished during an outage
// longer than the lease was rescued as abandoned, a failure, although the lease extender
// renews the leases of the tracked runs when the database is back, before any rescuer may
// take them.) Only a refusal of the data itself splits the batch to find the row that
// poisons it, which is then stored without its carry and attachment rather than lost.
func (c *Completer) flush(ctx context.Context, batch []*jobrun.End) {
	slices.SortFunc(batch, func(a, b *jobrun.End) int { return a.Job.ID.Compare(b.Job.ID) }) // lock order
	delay := 20 * time.Millisecond
	for {
		wake := c.wakeNow(batch)
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		c.tracker.Writing(batch, true) // the lease extension leaves these rows alone meanwhile
		ids, err := c.cfg.Writer.Write(wctx, batch, wake)
		cancel()
		if err != nil {
			c.tracker.Writing(batch, false)
		}
		if err == nil {
			if wake && slices.ContainsFunc(batch, func(r *jobrun.End) bool { return r.Job.Gated }) {
				c.lastWake = time.Now()
			}
			c.written(batch, ids)
			return
		}
		if pgerr.Refused(err) {
			if len(batch) > 1 {
				for _, r := range batch {
					c.flush(ctx, []*jobrun.End{r})
				}
				return
			}
			if r := batch[0]; !r.Degraded {
				c.log.Error("venturi: run result refused by the database; storing it without carry and attachment",
					"job", r.Job.ID, "kind", r.Job.Kind, "err", err)
				r.Entry.Attachment = nil
				r.Entry.Note = c.cfg.CleanNote("result could not be stored (" + err.Error() + "): " + r.Entry.Note)
				r.SetCarry, r.Carry, r.Degraded = false, nil, true
				if r.Flow != nil {
					// A completion whose output or spawned nodes the database refused
					// ends dead, noted: what needs its node sees a failure, and retrying
					// the workflow runs it again, rather than its spawns being lost.
					r.Flow, r.State, r.Failed, r.Entry.Event = nil, dbsqlc.VenturiJobStateDead, true, "dead"
				}
				continue
			}
		}
		live := batch[:0]
		for _, r := range batch {
			if ctx.Err() != nil || !c.tracker.Holds(r.Job) {
				c.log.Warn("venturi: gave up writing a run result; the job will be rescued when its lease expires",
					"job", r.Job.ID, "kind", r.Job.Kind, "err", err)
				c.tracker.Remove(r.Job)
				c.cfg.Publish(r, Dropped)
				continue
			}
			live = append(live, r)
		}
		if len(live) == 0 {
			return
		}
		batch = live
		c.log.Warn("venturi: writing run results failed; retrying", "err", err, "runs", len(batch))
		sleepCtx(ctx, delay)
		delay = min(delay*2, time.Second)
	}
}

// written settles a batch that committed: the runs whose token still matched are
// durable; the others had lost their job and their results were discarded.
func (c *Completer) written(batch []*jobrun.End, ids []pgtype.UUID) {
	ok := make(map[ulid.ULID]bool, len(ids))
	for _, u := range ids {
		ok[ulid.ULID(u.Bytes)] = true
	}
	again := false
	for _, r := range batch {
		// A job that is due again now, or later (a pause or a retry's backoff): the
		// fetcher looks at once, and learns when the next scheduled job is due.
		again = again || r.State == dbsqlc.VenturiJobStateAvailable || r.State == dbsqlc.VenturiJobStateScheduled
		if !ok[r.Job.ID] {
			c.log.Warn("venturi: run result discarded: the run no longer holds its job (lease lost)",
				"job", r.Job.ID, "kind", r.Job.Kind, "token", r.Job.Token)
			c.cfg.Publish(r, Discarded)
		} else {
			c.cfg.Publish(r, Written)
		}
		c.tracker.Remove(r.Job)
	}
	if again {
		c.cfg.Again()
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

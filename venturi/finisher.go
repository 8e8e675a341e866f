package venturi

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/pgerr"
)

// finisher writes the ends of runs in batches: whatever has queued up while the previous
// batch was in flight goes in the next FinishRuns statement, so a busy worker writes
// many results per round trip and an idle one adds no delay. A result counts as reported
// once its batch has committed.
type finisher struct {
	log     *slog.Logger
	tracker *runTracker
	hub     *eventHub // the worker's subscribers
	worker  string
	write   func(ctx context.Context, reqs []*finishReq, wake bool) ([]pgtype.UUID, error)
	notify  func(ctx context.Context, kinds []string) error
	again   func()          // a result made a job pending again: look for it
	dbCtx   context.Context // cancelled when Stop gives up: stop retrying
	in      chan *finishReq
	closing chan struct{}
	done    chan struct{}

	// Wakes of other workers when gated runs end (a slot or a limit freed): at most one
	// per gateWakeEvery, the rest sent once that time has passed (see flush).
	lastWake time.Time
	wakeDue  []string    // kinds whose wake is held back
	wakeT    *time.Timer // fires when the held-back wake is due
}

const maxFinishBatch = 1000

// gateWakeEvery is the shortest time between two notifications that gated runs ended.
// Each one wakes every worker of the kinds, which then claims: one per finished batch
// cost a claim round trip on every worker per batch, the worker's own included (which
// looks again anyway, having a free handler slot). Other workers hear of a freed slot
// or limit within this time, or at their poll when no channel is used.
const gateWakeEvery = 100 * time.Millisecond

func newFinisher(cfg Config, db *pgxpool.Pool, q *dbsqlc.Queries, tracker *runTracker, again func(), channel string, dbCtx context.Context, log *slog.Logger) *finisher {
	return &finisher{
		log: log, tracker: tracker, again: again, dbCtx: dbCtx,
		write: func(ctx context.Context, reqs []*finishReq, wake bool) ([]pgtype.UUID, error) {
			return finishRuns(ctx, db, q, cfg, channel, reqs, wake, log)
		},
		notify: func(ctx context.Context, kinds []string) error {
			if channel == "" {
				return nil
			}
			return notifyKinds(ctx, db, channel, kinds)
		},
		in:      make(chan *finishReq, max(maxFinishBatch, 4*cfg.totalConcurrency())),
		closing: make(chan struct{}),
		done:    make(chan struct{}),
	}
}

// submit queues a run's result.
func (f *finisher) submit(r *finishReq) {
	select {
	case f.in <- r:
	case <-f.closing:
		// Shutdown already released this run; its result is discarded by the fence.
		f.tracker.remove(r.job)
		f.hub.publishEnd(r.job.id, nil)
	}
}

// close flushes what was submitted and stops the loop. It returns when the loop has
// stopped, which happens at once when dbCtx is cancelled.
func (f *finisher) close() {
	close(f.closing)
	<-f.done
}

// run writes results one FinishRuns at a time: while a statement is in flight, results
// queue in f.in, and the next statement takes all of them. An idle worker writes each
// result at once; a busy one writes hundreds per statement. One statement in flight
// measured best: parallel FinishRuns statements on neighbouring rows contend for the same
// heap and index pages, and cost more server CPU per row than their overlap saves
// (bench/FINDINGS.md).
func (f *finisher) run() {
	defer close(f.done)
	f.wakeT = time.NewTimer(time.Hour)
	f.wakeT.Stop()
	for {
		select {
		case r := <-f.in:
			f.flush(f.drain([]*finishReq{r}))
		case <-f.wakeT.C:
			f.sendWake()
		case <-f.closing:
			for batch := f.drain(nil); len(batch) > 0; batch = f.drain(nil) {
				f.flush(batch)
			}
			f.wakeT.Stop()
			f.sendWake() // what this worker frees, it will not claim again
			return
		}
	}
}

// wakeNow reports whether the batch's gated runs wake the workers of their kinds in the
// batch's own transaction (the last wake is gateWakeEvery old), or are held back for
// sendWake, which the timer fires when that time has passed.
func (f *finisher) wakeNow(batch []*finishReq) bool {
	if time.Since(f.lastWake) >= gateWakeEvery {
		return true
	}
	for _, r := range batch {
		if r.job.gated && !slices.Contains(f.wakeDue, r.job.kind) {
			f.wakeDue = append(f.wakeDue, r.job.kind)
		}
	}
	if len(f.wakeDue) > 0 {
		f.wakeT.Reset(gateWakeEvery - time.Since(f.lastWake))
	}
	return false
}

// sendWake sends the wakes held back (after their runs' ends committed).
func (f *finisher) sendWake() {
	if len(f.wakeDue) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(f.dbCtx, 5*time.Second)
	defer cancel()
	if err := f.notify(ctx, f.wakeDue); err != nil {
		f.log.Warn("venturi: waking workers after runs freed slots failed; they will see it at their next poll", "err", err)
	}
	f.wakeDue, f.lastWake = f.wakeDue[:0], time.Now()
}

func (f *finisher) drain(batch []*finishReq) []*finishReq {
	for len(batch) < maxFinishBatch {
		select {
		case r := <-f.in:
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
// not rescued is stored instead of being redone. (The finisher used to give up when the
// worker's estimate of the lease ran out, so every run that finished during an outage
// longer than the lease was rescued as abandoned, a failure, although the lease extender
// renews the leases of the tracked runs when the database is back, before any rescuer may
// take them.) Only a refusal of the data itself splits the batch to find the row that
// poisons it, which is then stored without its carry and attachment rather than lost.
func (f *finisher) flush(batch []*finishReq) {
	slices.SortFunc(batch, func(a, b *finishReq) int { return a.job.id.Compare(b.job.id) }) // lock order
	delay := 20 * time.Millisecond
	for {
		wake := f.wakeNow(batch)
		wctx, cancel := context.WithTimeout(f.dbCtx, 10*time.Second)
		f.tracker.writing(batch, true) // the lease extension leaves these rows alone meanwhile
		ids, err := f.write(wctx, batch, wake)
		cancel()
		if err != nil {
			f.tracker.writing(batch, false)
		}
		if err == nil {
			if wake && slices.ContainsFunc(batch, func(r *finishReq) bool { return r.job.gated }) {
				f.lastWake = time.Now()
			}
			f.written(batch, ids)
			return
		}
		if pgerr.Refused(err) {
			if len(batch) > 1 {
				for _, r := range batch {
					f.flush([]*finishReq{r})
				}
				return
			}
			if r := batch[0]; !r.degraded {
				f.log.Error("venturi: run result refused by the database; storing it without carry and attachment",
					"job", r.job.id, "kind", r.job.kind, "err", err)
				r.entry.Attachment = nil
				r.entry.Note = cleanNote("result could not be stored (" + err.Error() + "): " + r.entry.Note)
				r.setCarry, r.carry, r.degraded = false, nil, true
				continue
			}
		}
		live := batch[:0]
		for _, r := range batch {
			if f.dbCtx.Err() != nil || !f.tracker.holds(r.job) {
				f.log.Warn("venturi: gave up writing a run result; the job will be rescued when its lease expires",
					"job", r.job.id, "kind", r.job.kind, "err", err)
				f.tracker.remove(r.job)
				f.hub.publishEnd(r.job.id, nil)
				continue
			}
			live = append(live, r)
		}
		if len(live) == 0 {
			return
		}
		batch = live
		f.log.Warn("venturi: writing run results failed; retrying", "err", err, "runs", len(batch))
		sleepCtx(f.dbCtx, delay)
		delay = min(delay*2, time.Second)
	}
}

// written settles a batch that committed: the runs whose token still matched are
// durable; the others had lost their job and their results were discarded.
func (f *finisher) written(batch []*finishReq, ids []pgtype.UUID) {
	ok := make(map[ulid.ULID]bool, len(ids))
	for _, u := range ids {
		ok[ulid.ULID(u.Bytes)] = true
	}
	again := false
	for _, r := range batch {
		// A job that is due again now, or later (a pause or a retry's backoff): the
		// fetcher looks at once, and learns when the next scheduled job is due.
		again = again || r.state == dbsqlc.VenturiJobStateAvailable || r.state == dbsqlc.VenturiJobStateScheduled
		if !ok[r.job.id] {
			f.log.Warn("venturi: run result discarded: the run no longer holds its job (lease lost)",
				"job", r.job.id, "kind", r.job.kind, "token", r.job.token)
			if f.hub.tracksEnds() {
				lost := *r
				lost.entry.Event, lost.state = EventLeaseLost, dbsqlc.VenturiJobStateRunning
				ev := endEvent(&lost, f.worker)
				f.hub.publishEnd(r.job.id, &ev)
			}
		} else if f.hub.tracksEnds() {
			ev := endEvent(r, f.worker)
			f.hub.publishEnd(r.job.id, &ev)
		}
		f.tracker.remove(r.job)
	}
	if again {
		f.again()
	}
}

// finishRuns writes the results of runs. Plain runs take one FinishRuns statement (after
// SetLocalIndexScans, in the same round trip: see sendIndexed). When
// runs reported to breakers, waited or read signals, the same transaction also does what
// that entails (see afterFinish): a breaker has counted a failure by the time its job can
// be claimed again. wakeGated says whether to wake the workers of the gated runs' kinds
// (a slot or a limit freed) in that transaction too; the finisher spaces those wakes out.
// The transaction is idle-bounded (inHotTx): a worker cut off while it holds the runs' rows
// must not keep them from the rescue of another worker.
func finishRuns(ctx context.Context, db *pgxpool.Pool, q *dbsqlc.Queries, cfg Config, channel string, reqs []*finishReq, wakeGated bool, log *slog.Logger) ([]pgtype.UUID, error) {
	var ids []pgtype.UUID
	if !slices.ContainsFunc(reqs, func(r *finishReq) bool { return r.needsTx(wakeGated && channel != "") }) {
		err := sendIndexed(ctx, db, func(b *pgx.Batch) { dbsqlc.QueueFinishRuns(b, finishParams(cfg.ID, reqs), &ids) })
		return ids, err
	}
	err := inHotTx(ctx, db, idleTxBound(cfg.Lease), func(tx pgx.Tx) error {
		var err error
		if ids, err = q.FinishRuns(ctx, tx, finishParams(cfg.ID, reqs)); err != nil {
			return err
		}
		return afterFinish(ctx, tx, q, channel, reqs, ids, wakeGated, log)
	})
	return ids, err
}

// needsTx reports whether writing r's end takes more than FinishRuns (see afterFinish);
// wake says whether the workers of a gated run's kind are to be woken.
func (r *finishReq) needsTx(wake bool) bool {
	return r.job.breaker != "" || len(r.wait) > 0 || len(r.consumed) > 0 || (wake && r.job.gated)
}

// afterFinish does what the end of runs entails beyond FinishRuns, in the transaction that
// wrote their results: it marks the signals they read as consumed, sets what waiting jobs
// wait for (waking those whose signal already came), reports gated runs' outcomes to their
// breakers (in key order, the lock order) and wakes the workers of the kinds for which a
// slot, a limit or a signal may have made a job runnable.
func afterFinish(ctx context.Context, db dbBatcher, q *dbsqlc.Queries, channel string, reqs []*finishReq, ids []pgtype.UUID, wakeGated bool, log *slog.Logger) error {
	var written map[ulid.ULID]bool
	var kinds []string // to wake
	var p dbsqlc.BreakerRecordParams
	var waits dbsqlc.ArmWaitsParams
	var used dbsqlc.ConsumeSignalsParams
	for _, r := range reqs {
		if !r.needsTx(wakeGated) {
			continue
		}
		if written == nil {
			written = make(map[ulid.ULID]bool, len(ids))
			for _, u := range ids {
				written[ulid.ULID(u.Bytes)] = true
			}
		}
		if !written[r.job.id] {
			continue
		}
		for _, seq := range r.consumed {
			used.Ids, used.Tokens, used.Seqs = append(used.Ids, uuidOf(r.job.id)), append(used.Tokens, r.job.token), append(used.Seqs, seq)
		}
		if len(r.wait) > 0 {
			waits.Ids, waits.Names = append(waits.Ids, uuidOf(r.job.id)), append(waits.Names, strings.Join(r.wait, "\x1f"))
		}
		if !r.job.gated {
			continue
		}
		if wakeGated && !slices.Contains(kinds, r.job.kind) {
			kinds = append(kinds, r.job.kind)
		}
		if failed, ok := r.breakerOutcome(); ok {
			p.Keys = append(p.Keys, r.job.breaker)
			p.Failed = append(p.Failed, failed)
		}
	}
	if len(used.Ids) > 0 {
		if err := q.ConsumeSignals(ctx, db, used); err != nil {
			return err
		}
	}
	if len(waits.Ids) > 0 {
		armed, err := q.ArmWaits(ctx, db, waits)
		if err != nil {
			return err
		}
		for _, a := range armed {
			if a.Ready && !slices.Contains(kinds, a.Kind) {
				kinds = append(kinds, a.Kind) // a signal came before the wait: run it now
			}
		}
	}
	if len(p.Keys) > 0 {
		if err := recordBreakers(ctx, db, q, p, log); err != nil {
			return err
		}
	}
	return notifyKinds(ctx, db, channel, kinds)
}

// notifyKinds wakes the workers of kinds (in db's transaction, if it is one: then on
// commit).
func notifyKinds(ctx context.Context, db dbBatcher, channel string, kinds []string) error {
	if channel == "" || len(kinds) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	for _, k := range kinds {
		dbsqlc.QueueNotify(b, dbsqlc.NotifyParams{Channel: channel, Payload: k})
	}
	return db.SendBatch(ctx, b).Close()
}

// recordBreakers reports outcomes to breakers, sorted by key (stable: one key's outcomes
// keep their order), and logs the breakers that opened or closed.
func recordBreakers(ctx context.Context, db dbsqlc.DBTX, q *dbsqlc.Queries, p dbsqlc.BreakerRecordParams, log *slog.Logger) error {
	idx := make([]int, len(p.Keys))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return strings.Compare(p.Keys[a], p.Keys[b]) })
	var sorted dbsqlc.BreakerRecordParams
	for _, i := range idx {
		sorted.Keys = append(sorted.Keys, p.Keys[i])
		sorted.Failed = append(sorted.Failed, p.Failed[i])
	}
	rows, err := q.BreakerRecord(ctx, db, sorted)
	if err != nil {
		return fmt.Errorf("venturi: report outcomes to breakers: %w", err)
	}
	for _, r := range rows {
		if r.Opened {
			log.Warn("venturi: circuit opened: claims of the kind stop until the cooldown ends, then one probe runs",
				"kind", r.Kind, "partition", r.Part, "failures", r.Fails, "open_until", r.OpenUntil)
		} else {
			log.Info("venturi: circuit closed: a run succeeded", "kind", r.Kind, "partition", r.Part)
		}
	}
	return nil
}

// breakerOutcome reports whether the run failed, for its breaker; ok is false for an
// outcome that is neither a success nor a failure (pause, interruption, replacement).
func (r *finishReq) breakerOutcome() (failed, ok bool) {
	switch {
	case r.job.breaker == "":
		return false, false
	case r.failed:
		return true, true
	case r.state == dbsqlc.VenturiJobStateCompleted:
		return false, true
	}
	return false, false
}

// dbBatcher is a pool or a transaction: it runs statements and batches.
type dbBatcher interface {
	dbsqlc.DBTX
	batcher
}

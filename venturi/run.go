package venturi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"
)

// Run is a handler's view of one execution of a job: its identity, history and carry, the
// attachment it records, and the graceful-shutdown signal.
type Run[C any] struct {
	id         ulid.ULID
	kind       string
	queue      string
	meta       Meta
	token      int64
	runs       int
	failures   int
	history    []JournalEntry
	earlier    journalLoader // reads older entries; one per worker, shared by its runs
	signals    signalReader  // reads the job's signals; one per worker
	hooks      hookCreator   // stores hooks; one per worker
	steps      *stepStore    // memoized steps (Step); one per worker
	saveCarry  carrySaver    // Run.Checkpoint's writes; one per worker
	consumed   []int64       // the signals Signals returned: consumed when the run ends
	carry      C
	attachment json.RawMessage
	shutdown   <-chan struct{}
	finish     func(ctx context.Context, tx pgx.Tx, o Outcome, carry *C, attachment json.RawMessage) error
	finalized  bool
	flows      flowAccess // the workflow calls' reads; one per worker
	flow       runFlow    // its output and spawns (workflow_run.go)
}

// carrySaver stores a running job's carry, fenced by its run's token, and reports how many
// rows it changed (0: the run lost its job).
type carrySaver func(ctx context.Context, id ulid.ULID, token int64, carry []byte) (int64, error)

// Checkpoint stores the run's current carry now, fenced by its token, so that a run that
// never ends (a [Supervised] service) leaves a checkpoint a takeover resumes from if its
// worker dies. The carry is stored at the run's end anyway, as always; a later Checkpoint
// or the run's end overwrites this one. It returns [ErrLeaseLost] when the run no longer
// holds its job (its worker stalled and the job was rescued).
func (r *Run[C]) Checkpoint(ctx context.Context) error {
	if r.saveCarry == nil {
		return errors.New("venturi: Checkpoint outside a worker's run")
	}
	b, err := encodeCarry(r.carry)
	if err != nil {
		return err
	}
	n, err := r.saveCarry(ctx, r.id, r.token, b)
	if err != nil {
		return err
	}
	if n != 1 {
		return ErrLeaseLost
	}
	return nil
}

// journalLoader reads a page of a job's journal (see Queue.Journal).
type journalLoader func(ctx context.Context, id ulid.ULID, before int64, limit int) ([]JournalEntry, error)

// ID returns the job's ID.
func (r *Run[C]) ID() ulid.ULID { return r.id }

// Kind returns the job's kind.
func (r *Run[C]) Kind() string { return r.kind }

// Queue returns the job's queue.
func (r *Run[C]) Queue() string { return r.queue }

// Meta returns the job's metadata (see [Meta]); nil when it has none. Do not modify it.
func (r *Run[C]) Meta() Meta { return r.meta }

// Token returns the run's fencing token. It is unique per run; an application that keys
// its own effects by (job, token) can tell the runs of one job apart.
func (r *Run[C]) Token() int64 { return r.token }

// RunCount reports how many times the job has been executed, including this run.
func (r *Run[C]) RunCount() int { return r.runs }

// Failures reports how many earlier runs of the job failed (errors and abandoned runs).
func (r *Run[C]) Failures() int { return r.failures }

// History returns the recent journal entries of earlier runs and merges, oldest first: the
// ones kept in the job's row (at most [JournalRecent]; at least [JournalRecentAfterMove]
// once older ones were moved). It costs nothing to call: the claim brought them. Use
// [Run.EarlierHistory] for older entries and [Run.RunCount] / [Run.Failures] for counts
// over the whole history.
func (r *Run[C]) History() []JournalEntry { return r.history }

// EarlierHistory reads up to limit journal entries numbered below before (Seq < before),
// oldest first, from the database; pass History()[0].Seq for the entries just before the
// recent ones, and a page's first Seq for the page before it. An empty result means there
// is nothing older. See [Queue.Journal].
func (r *Run[C]) EarlierHistory(ctx context.Context, before int64, limit int) ([]JournalEntry, error) {
	if r.earlier == nil {
		return nil, nil
	}
	return r.earlier(ctx, r.id, before, limit)
}

// Waited reports whether the job's last run ended with [WaitForSignal], and for which
// names (the newest wait's). It reads the journal's newest entry other than a merged one
// (an enqueue merged into the woken job) or an abandoned run (a run whose worker died or
// lost its lease after the wake: it consumed nothing, so this run finds the same signals).
// Every other end of a run counts: after a run that read the signals and then failed or
// was interrupted, Waited is false and the signals it read are consumed (keep what the
// next run needs in the carry). Whether a signal woke this run or the timeout passed,
// [Run.Signals] tells: it returns what arrived.
func (r *Run[C]) Waited() (names []string, ok bool) {
	for i := len(r.history) - 1; i >= 0; i-- {
		switch e := r.history[i]; e.Event {
		case EventMerged, EventAbandoned:
			continue
		case EventWaiting:
			return e.Wait, true
		default:
			return nil, false
		}
	}
	return nil, false
}

// Signals reads the job's signals that no run has consumed, oldest first (all of them, or
// those with one of names), at most [MaxSignalsRead]. What it returns is consumed by this
// run when it ends, whatever its outcome (a later run sees it again only if this one is
// lost: its worker died or its lease expired). Decode payloads with [DecodeSignal].
func (r *Run[C]) Signals(ctx context.Context, names ...string) ([]Signal, error) {
	if r.signals == nil {
		return nil, nil
	}
	sigs, err := r.signals(ctx, r.id, names)
	if err != nil {
		return nil, err
	}
	for _, s := range sigs {
		if !slices.Contains(r.consumed, s.Seq) {
			r.consumed = append(r.consumed, s.Seq)
		}
	}
	return sigs, nil
}

// Carry returns the carried state (the zero value on the first run).
func (r *Run[C]) Carry() C { return r.carry }

// CarryMut returns the carried state for modification. Changes are persisted for the
// next run on both retry and pause, but not when the job completes or dies.
func (r *Run[C]) CarryMut() *C { return &r.carry }

// SetCarry replaces the carried state.
func (r *Run[C]) SetCarry(c C) { r.carry = c }

// SetAttachment records v's JSON encoding as this run's attachment: structured evidence
// kept in the journal whatever the outcome, errors included. The last call wins.
// It refuses an attachment larger than [MaxAttachmentBytes], keeping the previous one.
func (r *Run[C]) SetAttachment(v any) error {
	b, err := encodeJSON(v)
	if err != nil {
		return fmt.Errorf("venturi: attachment: %w", err)
	}
	if len(b) > MaxAttachmentBytes {
		return fmt.Errorf("venturi: attachment of %d bytes exceeds the limit of %d (MaxAttachmentBytes)", len(b), MaxAttachmentBytes)
	}
	r.attachment = b
	return nil
}

// ShuttingDown reports whether the worker has begun a graceful shutdown. A long handler
// can poll it at a safe point and stop early, typically returning a Pause to checkpoint
// its carry.
func (r *Run[C]) ShuttingDown() bool {
	select {
	case <-r.shutdown:
		return true
	default:
		return false
	}
}

// Shutdown returns a channel closed when a graceful shutdown begins. It is distinct from
// the handler's ctx, which is cancelled only when the grace period ends or the lease is
// lost.
func (r *Run[C]) Shutdown() <-chan struct{} { return r.shutdown }

// CompleteTx records the outcome of this run inside tx, so the handler's own writes in tx
// commit atomically with it. The write is fenced by the run's token: if the run no longer
// holds the job it returns [ErrLeaseLost] and the caller must roll tx back. Return the
// outcome from Handle after committing; the worker then writes nothing more for this run.
// If tx rolls back instead, return an error from Handle and the run fails as usual.
//
// From then on tx holds the job's row, which no other worker can rescue while it is
// held: CompleteTx therefore bounds how long tx may sit idle between statements to half
// the lease (at least a second; a shorter idle_in_transaction_session_timeout already set
// stays), and the server ends tx if it idles longer. Commit promptly: a caller cut off
// from the database before its COMMIT (a half-open network) then releases the job a
// moment after its lease runs out instead of when the network heals.
func (r *Run[C]) CompleteTx(ctx context.Context, tx pgx.Tx, o Outcome) (Outcome, error) {
	if r.finalized {
		return o, errors.New("venturi: CompleteTx called twice for one run")
	}
	if err := r.finish(ctx, tx, o, &r.carry, r.attachment); err != nil {
		return o, err
	}
	r.finalized = true
	return o, nil
}

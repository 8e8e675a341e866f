package venturi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// Signal is a message sent to a job with [Queue.Signal] and read by its run with
// [Run.Signals].
type Signal struct {
	// Seq orders a job's signals.
	Seq  int64
	Name string
	// Payload is the JSON encoding of what the sender passed; see [DecodeSignal].
	Payload    json.RawMessage
	DeliveryID string
	SentAt     time.Time // database clock
}

// DecodeSignal decodes a signal's payload into T.
func DecodeSignal[T any](s Signal) (T, error) {
	var v T
	if err := json.Unmarshal(s.Payload, &v); err != nil {
		return v, fmt.Errorf("venturi: decode signal %q into %T: %w", s.Name, v, err)
	}
	return v, nil
}

// Bounds of signals.
const (
	MaxSignalNameBytes       = 128
	MaxSignalDeliveryIDBytes = 256
	// MaxSignalsRead bounds what one Run.Signals call returns.
	MaxSignalsRead = 1000
)

// ErrInvalidSignal is returned for a signal name that is empty, too long or not text, or
// an overlong delivery ID.
var ErrInvalidSignal = fmt.Errorf("venturi: a signal name is 1 to %d bytes of UTF-8 text, a delivery ID at most %d", MaxSignalNameBytes, MaxSignalDeliveryIDBytes)

// SignalResult says what sending a signal did.
type SignalResult struct {
	// Stored is false when the delivery ID was already delivered to the job: the send is
	// a repeat, and nothing changed.
	Stored bool
	// Woke reports that the job waited for this signal and is runnable now.
	Woke bool
}

// Signal sends a signal to job id: name, payload (any JSON-encodable value; nil for none)
// and a delivery ID chosen by the caller, so that a retried send is delivered once (an
// empty ID makes every send distinct). The signal is kept until a run of the job reads it
// with [Run.Signals] and ends, whether or not the job waits for it yet; a job waiting for
// name ([WaitForSignal]) becomes runnable at once. It returns [ErrJobFinished] for a job
// that has ended, [ErrNotFound] for an unknown one.
func (q *Queue) Signal(ctx context.Context, id ulid.ULID, name string, payload any, deliveryID string) (SignalResult, error) {
	body, deliveryID, err := signalArgs(name, payload, deliveryID)
	if err != nil {
		return SignalResult{}, err
	}
	var res SignalResult
	err = pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) (err error) {
		res, err = q.signalTx(ctx, tx, id, name, body, deliveryID)
		return err
	})
	return res, err
}

// SignalTx is [Queue.Signal] inside the caller's transaction tx: the signal is stored, and
// a job waiting for it woken, only if tx commits, so a producer can send it together with
// its own writes (record an approval and signal the job that waits for it). It locks the
// job's row until tx ends; keep tx short. Workers learn of a woken job when tx commits.
// Under REPEATABLE READ or SERIALIZABLE a concurrent change of the job fails the call with
// a serialization error; READ COMMITTED (the default) waits for it instead.
func (q *Queue) SignalTx(ctx context.Context, tx pgx.Tx, id ulid.ULID, name string, payload any, deliveryID string) (SignalResult, error) {
	body, deliveryID, err := signalArgs(name, payload, deliveryID)
	if err != nil {
		return SignalResult{}, err
	}
	if tx == nil {
		return SignalResult{}, errors.New("venturi: SignalTx needs a transaction")
	}
	return q.signalTx(ctx, tx, id, name, body, deliveryID)
}

// signalArgs checks a signal's name and delivery ID, encodes its payload, and gives an
// empty delivery ID a fresh one.
func signalArgs(name string, payload any, deliveryID string) ([]byte, string, error) {
	if err := validSignal(name, deliveryID); err != nil {
		return nil, "", err
	}
	body, err := encodeJSON(payload)
	if err != nil {
		return nil, "", err
	}
	if deliveryID == "" {
		deliveryID = ulid.Make().String()
	}
	return body, deliveryID, nil
}

// signalTx sends a signal in tx: it locks the job, then stores the signal in a statement
// whose snapshot sees the job as locked, and wakes the job's workers when the signal
// ended its wait. Queue.Signal and Queue.ResumeHook share it.
func (q *Queue) signalTx(ctx context.Context, tx pgx.Tx, id ulid.ULID, name string, body []byte, deliveryID string) (SignalResult, error) {
	job, err := q.q.LockJobForSignal(ctx, tx, uuidOf(id))
	if errors.Is(err, pgx.ErrNoRows) {
		// Not pending: finished (in the history, read in a snapshot newer than the lock
		// wait, which may have been for its move there), or not at all.
		st, herr := q.q.FinishedJobState(ctx, tx, uuidOf(id))
		switch {
		case errors.Is(herr, pgx.ErrNoRows):
			return SignalResult{}, ErrNotFound
		case herr != nil:
			return SignalResult{}, herr
		}
		return SignalResult{}, fmt.Errorf("%w (%s): signal %q not delivered", ErrJobFinished, st, name)
	}
	if err != nil {
		return SignalResult{}, err
	}
	switch job.State {
	case dbsqlc.VenturiJobStateCompleted, dbsqlc.VenturiJobStateDead, dbsqlc.VenturiJobStateCancelled:
		return SignalResult{}, fmt.Errorf("%w (%s): signal %q not delivered", ErrJobFinished, job.State, name)
	}
	row, err := q.q.SendSignal(ctx, tx, dbsqlc.SendSignalParams{ID: uuidOf(id), Name: name, Payload: string(body), DeliveryID: deliveryID})
	if err != nil {
		return SignalResult{}, err
	}
	res := SignalResult{Stored: row.Stored, Woke: row.Woke}
	if row.Woke && !q.poll {
		return res, q.q.Notify(ctx, tx, dbsqlc.NotifyParams{Channel: q.channel, Payload: job.Kind})
	}
	return res, nil
}

// SignalByKey sends a signal, as [Queue.Signal] does, to the newest job of kind with the
// dedup key that has not ended.
func (q *Queue) SignalByKey(ctx context.Context, kind string, key DedupKey, name string, payload any, deliveryID string) (ulid.ULID, SignalResult, error) {
	u, err := q.q.JobByKey(ctx, q.pool, dbsqlc.JobByKeyParams{Kind: kind, DedupKey: string(key)})
	if errors.Is(err, pgx.ErrNoRows) {
		return ulid.ULID{}, SignalResult{}, ErrNotFound
	}
	if err != nil {
		return ulid.ULID{}, SignalResult{}, err
	}
	res, err := q.Signal(ctx, ulidOf(u), name, payload, deliveryID)
	return ulidOf(u), res, err
}

func validSignal(name, deliveryID string) error {
	if name == "" || len(name) > MaxSignalNameBytes || !utf8.ValidString(name) || containsNUL(name) ||
		len(deliveryID) > MaxSignalDeliveryIDBytes || !utf8.ValidString(deliveryID) || containsNUL(deliveryID) {
		return ErrInvalidSignal
	}
	return nil
}

// validWait checks a WaitForSignal's names.
func validWait(names []string) error {
	if len(names) == 0 {
		return errors.New("venturi: WaitForSignal without a signal name")
	}
	for _, n := range names {
		if !validText(n, MaxSignalNameBytes) || n == "" {
			return fmt.Errorf("%w: %q", ErrInvalidSignal, n)
		}
	}
	return nil
}

// signalReader reads a job's unconsumed signals (see Run.Signals).
type signalReader func(ctx context.Context, id ulid.ULID, names []string) ([]Signal, error)

func pendingSignals(ctx context.Context, db dbsqlc.DBTX, q *dbsqlc.Queries, id ulid.ULID, names []string) ([]Signal, error) {
	if names == nil {
		names = []string{}
	}
	rows, err := q.PendingSignals(ctx, db, dbsqlc.PendingSignalsParams{ID: uuidOf(id), Names: names, Max: MaxSignalsRead})
	if err != nil {
		return nil, fmt.Errorf("venturi: signals of %s: %w", id, err)
	}
	out := make([]Signal, len(rows))
	for i, r := range rows {
		out[i] = Signal{Seq: r.Seq, Name: r.Name, Payload: r.Payload, DeliveryID: r.DeliveryID, SentAt: r.SentAt}
	}
	return out, nil
}

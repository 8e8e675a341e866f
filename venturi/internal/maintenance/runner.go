package maintenance

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// roundTimeout bounds one round of a duty: one transaction with a batch of each step.
const roundTimeout = 30 * time.Second

// TxFunc runs fn in a transaction and commits it when fn returns nil (pgx.BeginTxFunc).
// The worker passes one that bounds the transaction's idle time and makes its plans reach
// rows by index.
type TxFunc func(ctx context.Context, fn func(pgx.Tx) error) error

// LockFunc tries to take a duty's transaction-scoped advisory lock in tx, and reports
// whether it did (dbsqlc's TryMaintenanceLock, TryRetentionLock).
type LockFunc func(ctx context.Context, tx dbsqlc.DBTX) (bool, error)

// A Step does one batch of a duty's work in the duty's transaction and reports how many
// rows it took; a batch that came back full (Batch rows or more) means there is more to do
// now.
type Step struct {
	// Name names the step in the log.
	Name string
	// Batch is the most rows one call of Do takes.
	Batch int
	// Do does one batch in tx.
	Do func(ctx context.Context, tx pgx.Tx) (rows int, err error)
}

// Budget is how long one tick of a duty run every interval may keep repeating full
// batches: the interval, at least 250ms so that a short interval still catches up, at most
// 5s so that a tick never holds up shutdown for long.
func Budget(interval time.Duration) time.Duration {
	return min(max(interval, 250*time.Millisecond), 5*time.Second)
}

// DutyConfig configures a Duty.
type DutyConfig struct {
	// Name names the duty in the log.
	Name string
	// Lock takes the duty's advisory lock; a worker that does not get it skips the tick.
	Lock LockFunc
	// Steps are the duty's steps, in the order each round does them.
	Steps []Step
	// Budget is how long one tick may keep repeating full batches (see [Budget]).
	Budget time.Duration
	// InTx runs each round's transaction.
	InTx TxFunc
	// Logger receives the warning that the duty fell behind.
	Logger *slog.Logger
}

// A Duty is a set of maintenance steps done under one advisory lock, so that one worker
// at a time does them. A Duty is used by one goroutine at a time.
type Duty struct {
	cfg         DutyConfig // as given to the constructor
	behindSince time.Time  // when a tick last ran out of budget with work left (zero: caught up)
	lastWarn    time.Time  // when the duty last warned that it fell behind
}

// NewDuty returns the duty cfg describes.
func NewDuty(cfg DutyConfig) *Duty {
	return &Duty{cfg: cfg}
}

// Tick does the steps marked in work (one flag per step) if this worker gets the duty's
// lock: one round of them in one transaction, then further rounds of the steps whose batch
// was full, each in its own transaction (so no transaction holds more than a batch of row
// locks), until every step has caught up or the budget is spent. held says the worker had
// the lock.
func (d *Duty) Tick(ctx context.Context, work []bool) (held bool, err error) {
	deadline := time.Now().Add(d.cfg.Budget)
	for slices.Contains(work, true) {
		held, work, err = d.round(ctx, work)
		if err != nil || !held {
			return held, err
		}
		if slices.Contains(work, true) && time.Now().After(deadline) {
			d.fellBehind(work)
			return held, nil
		}
	}
	d.behindSince = time.Time{}
	return held, nil
}

// TickAll is Tick with every step marked.
func (d *Duty) TickAll(ctx context.Context) (held bool, err error) {
	work := make([]bool, len(d.cfg.Steps))
	for i := range work {
		work[i] = true
	}
	return d.Tick(ctx, work)
}

// round runs one batch of each step marked in work, in one transaction under the duty's
// lock. It reports which batches came back full.
func (d *Duty) round(ctx context.Context, work []bool) (held bool, full []bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, roundTimeout)
	defer cancel()
	full = make([]bool, len(d.cfg.Steps))
	err = d.cfg.InTx(ctx, func(tx pgx.Tx) error {
		locked, err := d.cfg.Lock(ctx, tx)
		if err != nil || !locked {
			return err
		}
		held = true
		for i, s := range d.cfg.Steps {
			if !work[i] {
				continue
			}
			n, err := s.Do(ctx, tx)
			if err != nil {
				return err
			}
			full[i] = n >= s.Batch
		}
		return nil
	})
	if err != nil || !held {
		return held, nil, err
	}
	return held, full, nil
}

// fellBehind logs, at most once a minute, that a tick ran out of budget with full batches
// still coming back: retention (or rescue, or promotion) is not keeping pace.
func (d *Duty) fellBehind(work []bool) {
	now := time.Now()
	if d.behindSince.IsZero() {
		d.behindSince = now
	}
	if now.Sub(d.lastWarn) < time.Minute {
		return
	}
	d.lastWarn = now
	var steps []string
	for i, s := range d.cfg.Steps {
		if work[i] {
			steps = append(steps, s.Name)
		}
	}
	d.cfg.Logger.Warn("venturi: maintenance is behind: a tick's budget ran out with work left",
		"duty", d.cfg.Name, "behind_for", now.Sub(d.behindSince).Round(time.Second), "budget", d.cfg.Budget,
		"steps", steps)
}

// micros converts a duration into the microseconds the SQL layer takes (0 for none).
func micros(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return d.Microseconds()
}

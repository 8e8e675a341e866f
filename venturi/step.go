package venturi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// Step runs fn as the step name of run's job, once: its result is written durably (fenced
// by the run's token) before Step returns it, and every later run of the job gets the
// written result back without running fn again. A handler written as a sequence of steps
// therefore resumes after a crash, a retry or a pause at the first step that had not
// completed; the steps before it are not repeated. A step that fails writes nothing and
// runs again next time. fn's effect and the memo are two writes: a crash between them
// repeats fn; use [StepTx] when fn's effect is in the database.
//
// It returns [ErrLeaseLost] when the run no longer holds its job (the result is then not
// memoized and the run must stop). Names are 1 to 128 bytes; T must encode to JSON.
func Step[T, C any](ctx context.Context, run *Run[C], name string, fn func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	if run.steps == nil {
		return zero, errors.New("venturi: Step outside a worker's run")
	}
	if v, ok, err := loadStep[T](ctx, run.steps.db, run.steps.q, run.id, name); err != nil || ok {
		return v, err
	}
	v, err := fn(ctx)
	if err != nil {
		return v, err
	}
	return v, saveStep(ctx, run.steps.db, run.steps.q, run.id, run.token, name, v)
}

// StepTx is [Step] for a step whose effect is in the database: fn runs in tx, and the
// memo is written in tx too, so the effect and the memo commit together or not at all.
// The caller commits tx (after StepTx returns nil) or rolls it back.
func StepTx[T, C any](ctx context.Context, run *Run[C], tx pgx.Tx, name string, fn func(ctx context.Context, tx pgx.Tx) (T, error)) (T, error) {
	var zero T
	if run.steps == nil {
		return zero, errors.New("venturi: StepTx outside a worker's run")
	}
	if v, ok, err := loadStep[T](ctx, tx, run.steps.q, run.id, name); err != nil || ok {
		return v, err
	}
	v, err := fn(ctx, tx)
	if err != nil {
		return v, err
	}
	return v, saveStep(ctx, tx, run.steps.q, run.id, run.token, name, v)
}

// stepStore is where a worker's runs keep their steps.
type stepStore struct {
	db dbsqlc.DBTX
	q  *dbsqlc.Queries
}

func loadStep[T any](ctx context.Context, db dbsqlc.DBTX, q *dbsqlc.Queries, id ulid.ULID, name string) (T, bool, error) {
	var v T
	if name == "" || len(name) > 128 {
		return v, false, fmt.Errorf("venturi: step name %q: want 1 to 128 bytes", name)
	}
	b, err := q.StepResult(ctx, db, dbsqlc.StepResultParams{JobID: uuidOf(id), Name: name})
	if errors.Is(err, pgx.ErrNoRows) {
		return v, false, nil
	}
	if err != nil {
		return v, false, fmt.Errorf("venturi: step %q: %w", name, err)
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return v, false, Permanent(fmt.Errorf("venturi: decode step %q into %v: %w", name, reflect.TypeFor[T](), err))
	}
	return v, true, nil
}

func saveStep(ctx context.Context, db dbsqlc.DBTX, q *dbsqlc.Queries, id ulid.ULID, token int64, name string, v any) error {
	b, err := encodeJSON(v)
	if err != nil {
		return Permanent(fmt.Errorf("venturi: step %q result: %w", name, err))
	}
	n, err := q.SaveStep(ctx, db, dbsqlc.SaveStepParams{JobID: uuidOf(id), Token: pgtype.Int8{Int64: token, Valid: true}, Name: name, Result: string(b)})
	if err != nil {
		return fmt.Errorf("venturi: save step %q: %w", name, err)
	}
	if n == 0 {
		// The token no longer matches (the run lost its job), or a concurrent run of the
		// same job saved it first; either way this run must not go on.
		return ErrLeaseLost
	}
	return nil
}

// StepRecord is a memoized step, as [Queue.Steps] reads it.
type StepRecord struct {
	Name   string
	Result json.RawMessage
	Run    int       // the run that completed it
	At     time.Time // database clock
}

// Steps lists job id's memoized steps, in the order they completed.
func (q *Queue) Steps(ctx context.Context, id ulid.ULID) ([]StepRecord, error) {
	rows, err := q.q.JobSteps(ctx, q.pool, uuidOf(id))
	if err != nil {
		return nil, err
	}
	out := make([]StepRecord, len(rows))
	for i, r := range rows {
		out[i] = StepRecord{Name: r.Name, Result: r.Result, Run: int(r.Run), At: r.At}
	}
	return out, nil
}

package venturi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"
	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// State is a job's lifecycle state.
type State string

// Lifecycle states; see the package documentation for the transitions.
const (
	StateScheduled State = "scheduled"
	StateAvailable State = "available"
	StateRunning   State = "running"
	StateCompleted State = "completed"
	StateDead      State = "dead"
)

// Job is a stored job as read back by [Queue.Job].
type Job struct {
	ID          ulid.ULID
	Kind        string
	State       State
	Priority    Priority
	DedupKey    DedupKey
	Payload     json.RawMessage
	Carry       json.RawMessage
	RunAt       time.Time
	RunCount    int
	Failures    int
	Journal     []JournalEntry
	CreatedAt   time.Time
	AttemptedAt *time.Time
	FinishedAt  *time.Time
}

// Job reads one job with its journal. It returns [ErrNotFound] for an unknown ID,
// including one whose job was pruned.
func (q *Queue) Job(ctx context.Context, id ulid.ULID) (*Job, error) {
	row, err := q.q.GetJob(ctx, q.pool, uuidOf(id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return jobFromRow(row)
}

// jobFromRow converts a GetJob row.
func jobFromRow(row *dbsqlc.GetJobRow) (*Job, error) {
	j := &Job{
		ID: ulidOf(row.ID), Kind: row.Kind, State: State(row.State), Priority: Priority(row.Priority),
		DedupKey: DedupKey(row.DedupKey.String), Payload: row.Payload, Carry: row.Carry,
		RunAt: row.RunAt, RunCount: int(row.Runs), Failures: int(row.Failures),
		CreatedAt: row.CreatedAt, AttemptedAt: row.AttemptedAt, FinishedAt: row.FinishedAt,
	}
	if err := json.Unmarshal(row.Journal, &j.Journal); err != nil {
		return nil, fmt.Errorf("venturi: decode journal of %s: %w", j.ID, err)
	}
	return j, nil
}

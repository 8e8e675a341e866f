package venturi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// The actions the audit log records ([AuditEntry].Action).
const (
	AuditJobsRetry        = "jobs.retry"
	AuditJobsCancel       = "jobs.cancel"
	AuditJobsDelete       = "jobs.delete"
	AuditQueuePause       = "queue.pause"
	AuditQueueResume      = "queue.resume"
	AuditQueueConcurrency = "queue.concurrency"
	AuditCronPause        = "cron.pause"
	AuditCronResume       = "cron.resume"
	AuditCronRemove       = "cron.remove"
	AuditCircuitReset     = "circuit.reset"
	AuditWorkflowCancel   = "workflow.cancel"
	AuditWorkflowRetry    = "workflow.retry"
	AuditWorkflowSeal     = "workflow.seal"
)

// Bounds of an audit entry: longer values are cut (on a UTF-8 boundary, marked with "…").
const (
	MaxActorBytes  = 256
	MaxReasonBytes = 1024
	// MaxAuditTargetBytes bounds an entry's target (a bulk action's filter text).
	MaxAuditTargetBytes = 8192
)

// unknownActor is the actor of an action whose context has none.
const unknownActor = "unknown"

type actorKey struct{}

// WithActor names who acts in ctx: the audit log records it for every operator action
// taken with ctx (bulk actions, queue and schedule settings, circuit resets). An action
// without an actor is recorded as "unknown".
func WithActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}

// actorOf is the actor ctx names, cleaned and bounded.
func actorOf(ctx context.Context) string {
	a, _ := ctx.Value(actorKey{}).(string)
	a = strings.TrimSpace(a)
	if a == "" {
		return unknownActor
	}
	return cutText(a, MaxActorBytes)
}

// cutText makes s storable (see cleanNote) and at most n bytes, marking a cut with "…".
func cutText(s string, n int) string {
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "\uFFFD")
	if len(s) <= n {
		return s
	}
	const mark = "…"
	s = s[:n-len(mark)]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + mark
}

// audit records one action of ctx's actor in db's transaction and returns its ID.
func (q *Queue) audit(ctx context.Context, db dbsqlc.DBTX, action, target string, count int64, reason string) (int64, error) {
	id, err := q.q.AuditInsert(ctx, db, dbsqlc.AuditInsertParams{Actor: actorOf(ctx), Action: action,
		Target: cutText(target, MaxAuditTargetBytes), Count: count, Reason: cutText(reason, MaxReasonBytes)})
	if err != nil {
		return 0, fmt.Errorf("venturi: audit %s: %w", action, err)
	}
	return id, nil
}

// AuditLog returns up to limit (default 50, at most MaxListPage) audit entries with IDs
// below before (0: from the newest), newest first.
func (q *Queue) AuditLog(ctx context.Context, before int64, limit int) ([]AuditEntry, error) {
	if limit <= 0 {
		limit = defaultListPage
	}
	rows, err := q.q.AuditLog(ctx, q.pool, dbsqlc.AuditLogParams{Before: before, Max: int32(min(limit, MaxListPage))})
	if err != nil {
		return nil, err
	}
	out := make([]AuditEntry, len(rows))
	for i, r := range rows {
		out[i] = AuditEntry{ID: r.ID, At: r.At, Actor: r.Actor, Action: r.Action, Target: r.Target,
			Count: int(r.Count), Reason: r.Reason}
	}
	return out, nil
}

// ErrNoCircuit is returned by [Queue.ResetCircuit] for a kind without a breaker, or a
// breaker that has not seen a claim.
var ErrNoCircuit = errors.New("venturi: no such circuit breaker")

// ResetCircuit closes a circuit breaker now (its failures forgotten), for an operator who
// knows the dependency is back. Audited as circuit.reset. partition names the breaker of a
// per-partition kind (empty for its jobs without a partition) and is ignored for a
// kind-wide one. [ErrNoCircuit] when there is no such breaker. Workers of the kind are
// woken: its jobs may run at once.
func (q *Queue) ResetCircuit(ctx context.Context, kind, partition string) error {
	return pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
		if _, err := q.q.ResetCircuit(ctx, tx, dbsqlc.ResetCircuitParams{Kind: kind, Part: partition}); errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: kind %q, partition %q", ErrNoCircuit, kind, partition)
		} else if err != nil {
			return err
		}
		target := kind
		if partition != "" {
			target += "/" + partition
		}
		if _, err := q.audit(ctx, tx, AuditCircuitReset, target, 0, ""); err != nil {
			return err
		}
		if q.poll {
			return nil
		}
		return q.q.Notify(ctx, tx, dbsqlc.NotifyParams{Channel: q.channel, Payload: kind})
	})
}

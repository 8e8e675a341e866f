package venturi

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// batcher is a pool or a transaction.
type batcher interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}

// insert inserts p as a new job (with its NOTIFY) and reports action.
func (q *Queue) insert(ctx context.Context, db batcher, p *plan, action Action) (Result, error) {
	b := &pgx.Batch{}
	q.queueInsert(b, p)
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return Result{}, err
	}
	return Result{ID: p.id, Action: action}, nil
}

// queueInsert adds the plain insert of p (and its NOTIFY) to b.
func (q *Queue) queueInsert(b *pgx.Batch, p *plan) {
	sk, sl, sp := p.slotParams()
	dbsqlc.QueueInsertJob(b, dbsqlc.InsertJobParams{
		Part: p.part, SlotKey: sk, SlotLimit: sl, SlotPolicy: sp,
		ID: uuidOf(p.id), Kind: p.kind, Queue: p.queue, Priority: int16(p.priority),
		DedupKey: pgtype.Text{String: p.key, Valid: p.key != ""},
		Payload:  string(p.payload), At: p.opts.at, DelayUs: delayOf(p.opts.delay),
		Events: p.events, Meta: p.meta,
	})
	q.queueNotify(b, p)
}

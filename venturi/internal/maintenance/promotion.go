package maintenance

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// PromoterConfig configures a Promoter.
type PromoterConfig struct {
	// Batch is the most scheduled jobs, and the most waiting jobs, one pass makes
	// available (PromoteDue's limit).
	Batch int
}

// A Promoter makes scheduled jobs that came due, and waiting jobs whose wait timed out,
// available (PromoteDue).
type Promoter struct {
	cfg PromoterConfig  // as given to the constructor
	q   *dbsqlc.Queries // the generated statements
}

// NewPromoter returns a promoter that runs q's statements.
func NewPromoter(cfg PromoterConfig, q *dbsqlc.Queries) *Promoter {
	return &Promoter{cfg: cfg, q: q}
}

// Step is the promoter as a step of a duty.
func (p *Promoter) Step() Step {
	return Step{Name: "promote", Batch: p.cfg.Batch, Do: p.RunOnce}
}

// RunOnce makes a batch of due jobs available in tx and returns how many.
func (p *Promoter) RunOnce(ctx context.Context, tx pgx.Tx) (int, error) {
	n, err := p.q.PromoteDue(ctx, tx, int32(p.cfg.Batch))
	return int(n), err
}

// PlaceStep is the placement sweep as a step: it gives their places in the gated claim's
// order to available gated jobs that have none, which only an older worker's update
// leaves (PlaceUnplaced). It runs with the sweep of what gone jobs left, once a minute.
func (p *Promoter) PlaceStep() Step {
	return Step{Name: "place_unplaced", Batch: p.cfg.Batch, Do: p.PlaceOnce}
}

// PlaceOnce places a batch of available gated jobs that have no place in tx and returns
// how many.
func (p *Promoter) PlaceOnce(ctx context.Context, tx pgx.Tx) (int, error) {
	n, err := p.q.PlaceUnplaced(ctx, tx, int32(p.cfg.Batch))
	return int(n), err
}

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

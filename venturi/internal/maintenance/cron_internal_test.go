package maintenance

import (
	"testing"
	"time"

	"github.com/venturi-dev/venturi/internal/cronexpr"
)

// The batch and count limit venturi's worker passes (venturi's cronBatch, cronCountLimit).
const (
	testCronBatch      = 1000
	testCronCountLimit = 100000
)

// TestPlanFires: missed fires are coalesced, skipped or backfilled by the policy; on-time
// fires are always planned; a plan holds at most a batch; counting a long outage of a
// per-second schedule stays bounded.
func TestPlanFires(t *testing.T) {
	t.Parallel()
	c, _ := cronexpr.Parse("0 * * * *")
	h := func(n int) time.Time { return time.Date(2026, 5, 1, n, 0, 0, 0, time.UTC) }
	now := h(10).Add(30 * time.Second)
	// next = 05:00: 05..09 missed, 10:00 on time (grace 1 min).
	p := planFires(c, time.UTC, h(5), now, MissedOnce, 0, time.Minute, testCronBatch, testCronCountLimit)
	if len(p.fires) != 2 || !p.fires[0].at.Equal(h(9)) || p.fires[0].covers != 5 || !p.fires[1].at.Equal(h(10)) ||
		p.coalesced != 4 || !p.next.Equal(h(11)) {
		t.Errorf("once: %+v", p)
	}
	p = planFires(c, time.UTC, h(5), now, MissedSkip, 0, time.Minute, testCronBatch, testCronCountLimit)
	if len(p.fires) != 1 || !p.fires[0].at.Equal(h(10)) || p.skipped != 5 {
		t.Errorf("skip: %+v", p)
	}
	p = planFires(c, time.UTC, h(5), now, MissedBackfill, 3, time.Minute, testCronBatch, testCronCountLimit)
	if len(p.fires) != 4 || !p.fires[0].at.Equal(h(7)) || p.skipped != 2 {
		t.Errorf("backfill: %+v", p)
	}
	p = planFires(c, time.UTC, h(5), now, MissedBackfill, 10, time.Minute, 2, testCronCountLimit)
	if len(p.fires) != 2 || !p.next.Equal(h(7)) {
		t.Errorf("batch: %+v", p)
	}
	// A per-second schedule after a day's outage: the window search stays cheap.
	sec, _ := cronexpr.Parse("* * * * * *")
	p = planFires(sec, time.UTC, h(5).Add(-24*time.Hour), now, MissedBackfill, 3, time.Second, testCronBatch, testCronCountLimit)
	if len(p.fires) != 3+2 || p.skipped != testCronCountLimit-3 {
		t.Errorf("per-second backfill: %d fires, skipped %d", len(p.fires), p.skipped)
	}
}

package venturi_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/venturi-dev/venturi"
)

// claimDecision is what one gated claim decided, read back inside its transaction: the
// jobs it took (in order), whether it asked for a wake-up, and the jobs and rate gates it
// changed. Times are left out: each claim reads its own clock.
type claimDecision struct {
	took   []string
	wake   bool
	jobs   []string // id, state, stop event of every job, by id
	gates  []string // key, starts in the window, until when it is full, of every gate, by key
	failed error
}

func (d claimDecision) String() string {
	return fmt.Sprintf("took %v\nwake %v\njobs %v\ngates %v\nerr %v", d.took, d.wake, d.jobs, d.gates, d.failed)
}

func decideClaim(ctx context.Context, tx pgx.Tx, fn string, max int) claimDecision {
	var d claimDecision
	rows, err := tx.Query(ctx, fmt.Sprintf(`SELECT id::text, wake_in_us FROM %s('default', ARRAY['k', 'k2'], $1, 60000000, 'w', 25, 'ch')`, fn), max)
	if err != nil {
		d.failed = err
		return d
	}
	for rows.Next() {
		var id *string
		var wake *int64
		if err := rows.Scan(&id, &wake); err != nil {
			d.failed = err
			return d
		}
		if id == nil {
			d.wake = true
		} else {
			d.took = append(d.took, *id)
		}
	}
	if d.failed = rows.Err(); d.failed != nil {
		return d
	}
	rows, err = tx.Query(ctx, `SELECT id::text || ' ' || state || ' ' || COALESCE(stop_event, '-') FROM venturi_job_all ORDER BY id`)
	if err != nil {
		d.failed = err
		return d
	}
	if d.jobs, d.failed = pgx.CollectRows(rows, pgx.RowTo[string]); d.failed != nil {
		return d
	}
	rows, err = tx.Query(ctx, `SELECT key || ' ' || rate_n::text || ' ' || cardinality(rate_at) || ' ' ||
		CASE WHEN full_until IS NULL THEN 'open' WHEN full_until = updated_at + interval '1 hour' THEN 'full for a period'
		     ELSE 'full until ' || full_until::text END
		FROM venturi_gate ORDER BY key`)
	if err != nil {
		d.failed = err
		return d
	}
	d.gates, d.failed = pgx.CollectRows(rows, pgx.RowTo[string])
	return d
}

// TestSlotsAndRatesClaimDecidesAsTheReferenceClaim: the slots-and-rates path of
// venturi_claim_gated (schema/functions/venturi_claim_gated.sql: one statement, two window
// passes) decides as the reference claim, the function as
// 019_venturi_slot_policy_recheck.up.sql creates it (five window passes). On random states
// (slots of limits 1-3 with running jobs, Queue, Replace and DropIfRunning policies, rates
// per kind and per partition with starts already in their windows, a kind without a rate
// beside one with, claims of 1 to 100 jobs), the reference and the current function, run
// one after the other on the same state, take the same jobs in the same order, drop and
// stop the same, record the same starts and ask for the same wake-ups. The schema is
// upgraded from version 19 with a slot's running job and a job waiting for it, which the
// current claim leaves waiting.
func TestSlotsAndRatesClaimDecidesAsTheReferenceClaim(t *testing.T) {
	slow(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 19)
	// Keep the reference (the function as version 19 creates it) under another name; the
	// upgrade then creates the current one.
	if _, err := pool.Exec(ctx, `ALTER FUNCTION venturi_claim_gated(text, text[], integer, bigint, text, integer, text)
		RENAME TO venturi_claim_gated_v19`); err != nil {
		t.Fatal(err)
	}
	// Jobs in the table while it upgrades: a slot with a running job and one waiting.
	if _, err := pool.Exec(ctx, `INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, runs, lease_token,
		lease_expires_at, worker_id, attempted_at, part, slot_key, slot_limit, slot_policy)
		VALUES (gen_random_uuid(), 'k', 'default', 'running', '{}', now(), 1, nextval('venturi_lease_token_seq'),
		        now() + interval '1 minute', 'v19', now(), 'up', 'up', 1, 0),
		       (gen_random_uuid(), 'k', 'default', 'available', '{}', now(), 0, NULL, NULL, NULL, NULL, 'up', 'up', 1, 0)`); err != nil {
		t.Fatal(err)
	}
	if applied, err := venturi.Migrate(ctx, pool); err != nil || !slices.Contains(applied, 20) {
		t.Fatalf("Migrate = %v, %v; want version 20 applied", applied, err)
	}
	var took int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM venturi_claim_gated('default', ARRAY['k'], 10, 60000000, 'w', 25, 'ch')
		WHERE id IS NOT NULL`).Scan(&took); err != nil || took != 0 {
		t.Fatalf("after the upgrade a claim over a full slot took %d (%v), want 0", took, err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM venturi_job`); err != nil {
		t.Fatal(err)
	}

	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 20))
	policies, rated, full := 0, 0, 0
	for round := range 200 {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		setup := randomGatedState(rng)
		if _, err := tx.Exec(ctx, setup.sql); err != nil {
			tx.Rollback(ctx)
			t.Fatalf("round %d setup: %v\n%s", round, err, setup.sql)
		}
		if _, err := tx.Exec(ctx, `SAVEPOINT before_claim`); err != nil {
			t.Fatal(err)
		}
		old := decideClaim(ctx, tx, "venturi_claim_gated_v19", setup.max)
		if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT before_claim`); err != nil {
			t.Fatal(err)
		}
		lean := decideClaim(ctx, tx, "venturi_claim_gated", setup.max)
		tx.Rollback(ctx)
		if old.failed != nil || lean.failed != nil || old.String() != lean.String() {
			t.Fatalf("round %d (seed %d): the claims decide differently\nstate:\n%s\nreference (019_venturi_slot_policy_recheck.up.sql):\n%s\nventuri_claim_gated:\n%s",
				round, seed, setup.sql, old, lean)
		}
		if setup.policies {
			policies++
		}
		if setup.rated {
			rated++
		}
		if len(lean.took) == setup.max {
			full++
		}
	}
	// The rounds covered each branch of the new statement.
	if policies == 0 || rated == 0 || full == 0 {
		t.Fatalf("coverage: %d rounds with slot policies, %d with rates, %d full claims", policies, rated, full)
	}
}

type gatedState struct {
	sql      string
	max      int
	policies bool // some slots have a Replace or DropIfRunning policy
	rated    bool // kind k has a rate
}

// randomGatedState writes SQL that sets up the kinds, rate gates and jobs of one round.
func randomGatedState(rng *rand.Rand) gatedState {
	var s gatedState
	var b strings.Builder
	s.max = []int{1, 2, 3, 5, 8, 100}[rng.IntN(6)]
	s.rated = rng.IntN(3) > 0
	s.policies = rng.IntN(3) == 0
	rateN, byPart := 0, rng.IntN(2) == 0
	if s.rated {
		rateN = 1 + rng.IntN(5)
	}
	fmt.Fprintf(&b, `INSERT INTO venturi_kind (kind, rate_n, rate_period, rate_by_part) VALUES ('k', %d, '1 hour', %t), ('k2', 0, '1 second', false)
		ON CONFLICT (kind) DO UPDATE SET rate_n = EXCLUDED.rate_n, rate_period = EXCLUDED.rate_period, rate_by_part = EXCLUDED.rate_by_part;
`, rateN, byPart)
	// Starts already in some windows (one full, perhaps).
	if s.rated {
		for p := range 3 {
			if rng.IntN(2) == 0 {
				continue
			}
			key, part := "r\x1fk", "NULL"
			if byPart {
				key, part = fmt.Sprintf("r\x1fk\x1fp%d", p), fmt.Sprintf("'p%d'", p)
			}
			n := rng.IntN(rateN + 1)
			fullUntil := "NULL"
			if n >= rateN {
				fullUntil = "now() + interval '50 minutes'"
			}
			fmt.Fprintf(&b, `INSERT INTO venturi_gate (key, kind, part, rate_at, rate_n, full_until)
				VALUES (E'%s', 'k', %s, ARRAY[now() - interval '10 minutes'], ARRAY[%d], %s) ON CONFLICT DO NOTHING;
`, strings.ReplaceAll(key, "\x1f", `\x1f`), part, n, fullUntil)
			if !byPart {
				break
			}
		}
	}
	slots := 1 + rng.IntN(4)
	limits := make([]int, slots)
	pols := make([]int, slots)
	for i := range slots {
		limits[i] = 1 + rng.IntN(3)
		if s.policies {
			pols[i] = rng.IntN(3)
		}
		for range rng.IntN(limits[i] + 1) { // running jobs of the slot
			fmt.Fprintf(&b, `INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, runs, lease_token, lease_expires_at,
				worker_id, attempted_at, part, slot_key, slot_limit, slot_policy)
				VALUES (gen_random_uuid(), 'k', 'default', 'running', '{}', now(), 1, nextval('venturi_lease_token_seq'),
				now() + interval '1 minute', 'w0', now() - interval '%d seconds', 'p%d', 's%d', %d, %d);
`, rng.IntN(100), rng.IntN(3), i, limits[i], pols[i])
		}
	}
	for range 1 + rng.IntN(40) {
		kind := "k"
		if rng.IntN(4) == 0 {
			kind = "k2"
		}
		slot, limit, policy := "NULL", "NULL", "NULL"
		if rng.IntN(4) > 0 {
			i := rng.IntN(slots)
			slot, limit, policy = fmt.Sprintf("'s%d'", i), fmt.Sprint(limits[i]), fmt.Sprint(pols[i])
		}
		fmt.Fprintf(&b, `INSERT INTO venturi_job (id, kind, queue, state, priority, payload, run_at, part, slot_key, slot_limit, slot_policy)
			VALUES (gen_random_uuid(), '%s', 'default', 'available', %d, '{}', now() - interval '%d seconds', 'p%d', %s, %s, %s);
`, kind, rng.IntN(2), rng.IntN(100), rng.IntN(3), slot, limit, policy)
	}
	s.sql = b.String()
	return s
}

package venturi_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// TestDropUnusedFunctionsUpgradesAVersion20Schema: the upgrade of a version-20 schema with
// jobs in it (a plain one, a gated one, a scheduled one that came due) drops
// venturi_gated_heads and venturi_gated_heads_upto, keeps venturi_gate_lock, and a worker
// started after it claims and completes every job, the gated one through
// venturi_claim_gated.
func TestDropUnusedFunctionsUpgradesAVersion20Schema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 20)
	functions := func() []string {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT proname::text FROM pg_proc
			WHERE pronamespace = current_schema()::regnamespace AND proname ~ '^venturi_gate'
			ORDER BY proname`)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
			names = append(names, n)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return names
	}
	if got, want := functions(), []string{"venturi_gate_lock", "venturi_gated_heads", "venturi_gated_heads_upto"}; !slices.Equal(got, want) {
		t.Fatalf("version 20 has functions %v, want %v", got, want)
	}
	var ids [][]byte
	insert := func(state, part string, runAt time.Duration) {
		t.Helper()
		id := ulid.Make()
		var p *string
		if part != "" {
			p = &part
		}
		if _, err := pool.Exec(ctx, `
			INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, part)
			VALUES ($1, 'ops', 'default', $2::venturi_job_state, '{"n": 1}', now() + $3::bigint * interval '1 microsecond', $4)`,
			id[:], state, runAt.Microseconds(), p); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id[:])
	}
	insert("available", "", 0)
	insert("available", "p", 0) // gated: venturi_claim_gated claims it
	insert("scheduled", "", -time.Second)
	if applied, err := venturi.Migrate(ctx, pool); err != nil || !slices.Equal(applied, []int{21}) {
		t.Fatalf("Migrate = %v, %v; want version 21 applied", applied, err)
	}
	if got, want := functions(), []string{"venturi_gate_lock"}; !slices.Equal(got, want) {
		t.Fatalf("after the upgrade: functions %v, want %v", got, want)
	}
	startOpsWorker(t, pool, fastConfig())
	eventually(t, 10*time.Second, "the jobs of the version-20 schema complete", func() bool {
		return countJobs(t, pool, "id = ANY($1) AND state = 'completed'", ids) == len(ids)
	})
}

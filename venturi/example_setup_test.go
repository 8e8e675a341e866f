package venturi_test

// Shared setup of the runnable examples (example_*_test.go). Examples run in `go test`
// against the PostgreSQL named by TEST_DATABASE_URL (or DATABASE_URL), each in a fresh
// schema. An example cannot skip: without a database it stops the test binary with a
// message saying how to provide one.

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/internal/testdb"
)

// exampleWithin bounds every wait of an example: generous, so that a loaded machine does
// not turn slowness into a failure.
const exampleWithin = 30 * time.Second

// exampleDB returns a pool on a fresh, migrated schema and a cleanup that drops it.
func exampleDB() (*pgxpool.Pool, func()) {
	ctx := context.Background()
	pool, cleanup, err := testdb.Open(ctx, 10)
	if err != nil {
		log.Fatalf("venturi examples need PostgreSQL: %v", err)
	}
	if _, err := venturi.Migrate(ctx, pool); err != nil { // embedded migrations, advisory-locked
		cleanup()
		log.Fatalf("migrate: %v", err)
	}
	return pool, cleanup
}

// mustExec runs an SQL statement of an example's own schema.
func mustExec(pool *pgxpool.Pool, sql string, args ...any) {
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		log.Fatalf("%s: %v", sql, err)
	}
}

// awaitJob polls the job until cond holds, and fails the example after exampleWithin.
func awaitJob(q *venturi.Queue, id ulid.ULID, what string, cond func(*venturi.Job) bool) *venturi.Job {
	deadline := time.NewTimer(exampleWithin)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		j, err := q.Job(context.Background(), id)
		if err != nil {
			log.Fatalf("read job: %v", err)
		}
		if cond(j) {
			return j
		}
		select {
		case <-deadline.C:
			log.Fatalf("timed out after %v waiting for %s (state %s, %d runs)", exampleWithin, what, j.State, j.RunCount)
		case <-tick.C:
		}
	}
}

// awaitFinished waits until the job is completed or dead.
func awaitFinished(q *venturi.Queue, id ulid.ULID) *venturi.Job {
	return awaitJob(q, id, "the job to finish", func(j *venturi.Job) bool {
		return j.State == venturi.StateCompleted || j.State == venturi.StateDead
	})
}

// printJournal prints each journal entry: the run's number, event and note, or a merged
// entry's decision (its note names a job ID, which changes from run to run).
func printJournal(j *venturi.Job) {
	for _, e := range j.Journal {
		if e.Event == venturi.EventMerged {
			fmt.Printf("  merged: %s\n", e.Merge)
			continue
		}
		fmt.Printf("  run %d %s: %s\n", e.Run, e.Event, e.Note)
	}
}

// A deploy step or a readiness check asks whether the schema has every migration this
// venturi knows, without migrating or locking anything.
func ExampleMigrationStatus() {
	ctx := context.Background()
	pool, cleanup := exampleDB() // a fresh schema, migrated
	defer cleanup()

	states, err := venturi.MigrationStatus(ctx, pool)
	if err != nil {
		log.Fatal(err)
	}
	pending := 0
	for _, m := range states {
		if !m.Applied {
			pending++
		}
	}
	fmt.Println("first:", states[0].Name, states[0].Applied)
	fmt.Println("pending:", pending)
	// Output:
	// first: 001_venturi_init true
	// pending: 0
}

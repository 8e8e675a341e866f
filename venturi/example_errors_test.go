package venturi_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi"
)

// IsTransient tells "try again" (the connection broke, the server restarts) from "the
// server refused this data": a producer answers 503 for the first and 400 for the second.
func ExampleIsTransient() {
	for _, err := range []error{
		&pgconn.PgError{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"},
		&pgconn.PgError{Severity: "ERROR", Code: "40P01", Message: "deadlock detected"},
		&pgconn.PgError{Severity: "ERROR", Code: "23505", Message: "duplicate key value violates unique constraint"},
		&pgconn.PgError{Severity: "ERROR", Code: "22P02", Message: "invalid input syntax"},
		context.DeadlineExceeded,
	} {
		fmt.Printf("transient=%-5v %v\n", venturi.IsTransient(err), err)
	}
	// Output:
	// transient=true  FATAL: terminating connection due to administrator command (SQLSTATE 57P01)
	// transient=true  ERROR: deadlock detected (SQLSTATE 40P01)
	// transient=false ERROR: duplicate key value violates unique constraint (SQLSTATE 23505)
	// transient=false ERROR: invalid input syntax (SQLSTATE 22P02)
	// transient=true  context deadline exceeded
}

// NewWorker checks its Config: every invalid field is a ConfigError that names it, so a
// worker that was built never fails on its configuration later.
func ExampleNewWorker_invalidConfig() {
	pool, err := pgxpool.New(context.Background(), "postgres://localhost/app") // connects lazily
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	_, err = venturi.NewWorker(pool, struct{}{}, venturi.Config{Lease: -time.Second, ClaimBatch: 5000})
	fmt.Println(err)
	var ce *venturi.ConfigError
	fmt.Println(errors.As(err, &ce), ce.Field)
	// Output:
	// venturi: Config.ClaimBatch: 5000; want 1 to 1000 (0 for the default)
	// venturi: Config.Lease: negative duration -1s
	// true ClaimBatch
}

// A handler's error says what happens next: TaskError.Permanent and TaskError.Delay read
// it back, as middleware that logs or counts failures may.
func ExampleTaskError_Delay() {
	for _, err := range []error{
		venturi.RetryIn(30*time.Second, errors.New("429 Too Many Requests")),
		fmt.Errorf("fetch: %w", venturi.RetryIn(0, errors.New("connection reset"))),
		venturi.Permanent(errors.New("404 Not Found")),
	} {
		var te *venturi.TaskError
		if errors.As(err, &te) {
			d, ok := te.Delay()
			fmt.Printf("permanent=%-5v delay=%v (%v): %v\n", te.Permanent(), d, ok, err)
		}
	}
	// Output:
	// permanent=false delay=30s (true): 429 Too Many Requests
	// permanent=false delay=0s (true): fetch: connection reset
	// permanent=true  delay=0s (false): 404 Not Found
}

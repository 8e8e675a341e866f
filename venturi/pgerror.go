package venturi

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// IsTransient reports whether err says that a statement could not run to completion
// (the connection broke, the server is shutting down or short of resources, the
// transaction hit a deadlock or serialization failure, a statement timed out) rather
// than that the server refused the statement's data. The same call may succeed when
// retried; a refusal (a constraint, an invalid value, a value too large) will not.
//
// Every path of the worker classifies errors with it: a transient failure to store a
// run's result is retried with the same result until the run's lease would expire,
// never stored degraded. A producer can use it to tell "try again" from "bad input",
// for example to answer 503 rather than 400.
func IsTransient(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return transientSQLState(pgErr.Code)
	}
	// Anything else did not come from the server's judgement of the statement: a
	// network or TLS error, a connect failure, a timeout or cancellation, a closed pool.
	return true
}

// refused reports whether the server rejected the statement itself: retrying the same
// statement with the same data fails again.
func refused(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && !transientSQLState(pgErr.Code) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// transientSQLState classifies a SQLSTATE (PostgreSQL appendix A) by its class, and by
// code where a class mixes both kinds.
func transientSQLState(code string) bool {
	if len(code) != 5 {
		return false
	}
	switch code[:2] {
	case "08", // connection exception
		"40", // transaction rollback: serialization failure, deadlock
		"53", // insufficient resources: disk full, out of memory, too many connections
		"57", // operator intervention: admin/crash shutdown, cannot connect now, query canceled
		"58": // system error: I/O error
		return true
	}
	switch code {
	case "25P03", // idle_in_transaction_session_timeout
		"55P03", // lock_not_available (lock_timeout)
		"55006", // object_in_use
		"55000", // object_not_in_prerequisite_state (a recovery in progress, for one)
		"XX000": // internal_error: not a verdict on the data
		return true
	}
	return false
}

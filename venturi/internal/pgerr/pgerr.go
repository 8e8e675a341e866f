// Package pgerr classifies PostgreSQL errors by SQLSTATE: whether a failed statement
// may succeed when retried (transient) or was refused for its data.
package pgerr

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// IsTransient reports whether err says that a statement could not run to completion
// (the connection broke, the server is shutting down or short of resources, the
// transaction hit a deadlock or serialization failure, a statement timed out) rather
// than that the server refused the statement's data. An error that did not come from
// the server (a network or TLS error, a connect failure, a timeout or cancellation, a
// closed pool) is transient.
func IsTransient(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return TransientSQLState(pgErr.Code)
	}
	return true
}

// Refused reports whether the server rejected the statement itself: retrying the same
// statement with the same data fails again.
func Refused(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && !TransientSQLState(pgErr.Code) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// TransientSQLState classifies a SQLSTATE (PostgreSQL appendix A) by its class, and by
// code where a class mixes both kinds.
func TransientSQLState(code string) bool {
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

// LockNotAvailable is SQLSTATE 55P03: a lock was not granted within lock_timeout (or
// NOWAIT).
const LockNotAvailable = "55P03"

// Code returns the SQLSTATE of the PostgreSQL error err wraps, or "" when it wraps none.
func Code(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

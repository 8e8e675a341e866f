package pgerr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestIsTransient(t *testing.T) {
	t.Parallel()
	pg := func(code string) error { return fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: code}) }
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{pg("57P01"), true}, // admin_shutdown: pg_terminate_backend, a restart
		{pg("57P02"), true}, // crash_shutdown
		{pg("57P03"), true}, // cannot_connect_now
		{pg("57014"), true}, // query_canceled: statement_timeout
		{pg("08006"), true}, // connection_failure
		{pg("08000"), true},
		{pg("40001"), true},  // serialization_failure
		{pg("40P01"), true},  // deadlock_detected
		{pg("53100"), true},  // disk_full
		{pg("53300"), true},  // too_many_connections
		{pg("58030"), true},  // io_error
		{pg("25P03"), true},  // idle_in_transaction_session_timeout
		{pg("55P03"), true},  // lock_not_available
		{pg("22P02"), false}, // invalid_text_representation: the data is refused
		{pg("23505"), false}, // unique_violation
		{pg("54000"), false}, // program_limit_exceeded: a value too large
		{pg("42601"), false}, // syntax_error
		{pg("22021"), false}, // character_not_in_repertoire
		{io.ErrUnexpectedEOF, true},
		{&net.OpError{Op: "read", Err: errors.New("connection reset by peer")}, true},
		{context.DeadlineExceeded, true},
	} {
		if got := IsTransient(tc.err); got != tc.want {
			t.Errorf("IsTransient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestRefusedOnlyForServerVerdictsOnTheData(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "23505"}, true},
		{&pgconn.PgError{Code: "57P01"}, false},
		{io.ErrUnexpectedEOF, false},
		{fmt.Errorf("%w: %w", context.Canceled, &pgconn.PgError{Code: "23505"}), false},
	} {
		if got := Refused(tc.err); got != tc.want {
			t.Errorf("Refused(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

package venturi

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/venturi-dev/venturi/internal/testdb"
)

// TestInTxBoundsItsOwnTransactionOnly: inTx's transaction has the idle bound and the
// requested isolation and access mode; the connection, back in the pool, has neither.
func TestInTxBoundsItsOwnTransactionOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.Pool(t, testdb.Schema(t), 1) // one connection: the same session after
	var idle, iso, ro string
	err := inTx(ctx, pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, 1500*time.Millisecond,
		func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, `SELECT current_setting('idle_in_transaction_session_timeout'),
				current_setting('transaction_isolation'), current_setting('transaction_read_only')`).Scan(&idle, &iso, &ro)
		})
	if err != nil || idle != "1500ms" || iso != "repeatable read" || ro != "on" {
		t.Fatalf("in the transaction: idle %q, isolation %q, read only %q, err %v", idle, iso, ro, err)
	}
	if err := pool.QueryRow(ctx, `SELECT current_setting('idle_in_transaction_session_timeout')`).Scan(&idle); err != nil || idle != "0" {
		t.Fatalf("after the transaction the session's bound is %q (%v), want 0", idle, err)
	}
	if got := idleTxBound(30 * time.Second); got != 15*time.Second {
		t.Fatalf("idleTxBound(30s) = %v", got)
	}
	if got := idleTxBound(MinLease); got != minIdleTx {
		t.Fatalf("idleTxBound(MinLease) = %v", got)
	}
}

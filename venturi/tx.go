package venturi

import (
	"context"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// minIdleTx is the shortest idle bound of the worker's own transactions (idleTxBound):
// below it a busy client's pause between two statements would end healthy transactions.
const minIdleTx = time.Second

// idleTxBound is how long a transaction the worker opens itself (maintenance, stats
// samples, cron fires, run results that take more than one statement) may sit idle on the
// server between statements: half the lease, at least minIdleTx. Every such transaction
// is a few statements sent back to back, so only a worker that can no longer reach the
// server (a half-open network: no reset, no close) idles that long; ending its
// transaction then frees the locks it held (the maintenance lock, the rows of the runs
// whose results it was writing) before those runs' leases expire, so the other workers'
// rescue is not held up until the network heals or the kernel gives up on it.
func idleTxBound(lease time.Duration) time.Duration {
	return max(lease/2, minIdleTx)
}

// beginner is what opens a transaction: a pool, a connection.
type beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// inTx runs fn in a transaction with opts (pgx.BeginTxFunc) that the server ends if it
// stays idle between statements for longer than idle. The bound is set for this
// transaction only (SET LOCAL idle_in_transaction_session_timeout) in the BEGIN's own
// round trip, so it holds from the first moment the transaction exists, costs nothing
// extra, and works through PgBouncer's transaction pooling.
func inTx(ctx context.Context, db beginner, opts pgx.TxOptions, idle time.Duration, fn func(pgx.Tx) error) error {
	opts.BeginQuery = beginSQL(opts) + "; SET LOCAL idle_in_transaction_session_timeout = " + idleTxMs(idle)
	return pgx.BeginTxFunc(ctx, db, opts, fn)
}

// inHotTx is inTx (default isolation, read-write) for the transactions of the finish and
// maintenance paths, whose statements take batches of jobs that an index finds: plans in
// it reach rows by index (SET LOCAL enable_seqscan = off, in the same round trip), so that
// a plan PostgreSQL cached while venturi_job was nearly empty does not scan the whole
// table once it has grown (see SetLocalIndexScans in queries/session.sql). The claim's transaction
// sets the same (internal/fetcher's Claim), and so do the finish, lease-extension and release
// statements sent alone (sendIndexed). It is set per transaction, not as a parameter of
// the control pool's connections: PgBouncer refuses startup parameters it does not know,
// and a session-level SET through transaction pooling would land on whichever server
// connection ran it, for other clients.
func inHotTx(ctx context.Context, db beginner, idle time.Duration, fn func(pgx.Tx) error) error {
	opts := pgx.TxOptions{BeginQuery: "BEGIN; SET LOCAL idle_in_transaction_session_timeout = " + idleTxMs(idle) +
		"; SET LOCAL enable_seqscan = off"}
	return pgx.BeginTxFunc(ctx, db, opts, fn)
}

// sendIndexed sends SetLocalIndexScans and then the statements queue adds, in one round
// trip: they share the pipeline's implicit transaction (or, in pgx's simple protocol, the
// multi-statement query's), so the setting holds for them. It is inHotTx for statements
// that need no transaction of their own.
func sendIndexed(ctx context.Context, db *pgxpool.Pool, queue func(*pgx.Batch)) error {
	b := &pgx.Batch{}
	dbsqlc.QueueSetLocalIndexScans(b)
	queue(b)
	return db.SendBatch(ctx, b).Close()
}

// idleTxMs is idle as an idle_in_transaction_session_timeout setting (milliseconds; 0
// would mean none).
func idleTxMs(idle time.Duration) string {
	return strconv.FormatInt(max(idle.Milliseconds(), 1), 10)
}

// beginSQL is the BEGIN statement for opts' isolation level and access mode (the only
// options the worker's transactions use).
func beginSQL(opts pgx.TxOptions) string {
	s := "BEGIN"
	if opts.IsoLevel != "" {
		s += " ISOLATION LEVEL " + string(opts.IsoLevel)
	}
	if opts.AccessMode != "" {
		s += " " + string(opts.AccessMode)
	}
	return s
}

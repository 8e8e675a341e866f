package dbsqlc

import "github.com/jackc/pgx/v5"

// The SQL of generated queries that venturi pipelines with pgx.Batch, so that several
// statements travel in one round trip. The statements themselves live in queries.sql.
const (
	DedupLockSQL           = dedupLock
	InsertIfNoCandidateSQL = insertIfNoCandidate
	InsertJobSQL           = insertJob
	InsertJobsSQL          = insertJobs
	InsertOrReplaceSQL     = insertOrReplace
	NotifySQL              = notify
	PromoteDueSQL          = promoteDue
)

// QueueClaim adds the Claim statement to b; each claimed row is passed to add, scanned
// exactly as the generated Claim method scans it.
func QueueClaim(b *pgx.Batch, arg ClaimParams, add func(*ClaimRow)) {
	b.Queue(claim, arg.LeaseUs, arg.WorkerID, arg.MaxFailures, arg.Kinds, arg.Max).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var i ClaimRow
			if err := rows.Scan(&i.ID, &i.Kind, &i.Payload, &i.Carry, &i.Runs, &i.Failures,
				&i.LeaseToken, &i.Journal, &i.AttemptedAt); err != nil {
				return err
			}
			add(&i)
		}
		return rows.Err()
	})
}

package dbsqlc

// The SQL of generated queries that venturi pipelines with pgx.Batch, so that several
// statements travel in one round trip. The statements themselves live in queries.sql.
const (
	ClaimSQL               = claim
	DedupLockSQL           = dedupLock
	InsertIfNoCandidateSQL = insertIfNoCandidate
	InsertJobSQL           = insertJob
	InsertJobsSQL          = insertJobs
	InsertOrReplaceSQL     = insertOrReplace
	NotifySQL              = notify
	PromoteDueSQL          = promoteDue
)

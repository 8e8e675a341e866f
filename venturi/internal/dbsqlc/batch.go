package dbsqlc

import (
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Typed batch forms of generated queries. venturi pipelines several statements in one
// round trip with pgx.Batch (an enqueue's lock, insert and NOTIFY; a claim and the
// promotion before it), which sqlc's per-query methods cannot do. Each function here
// queues the generated SQL with its generated Params type, in the generated argument
// order, and scans into its generated Row type, so every statement venturi sends is
// still the one in queries/*.sql and sqlc's types still check its arguments.

// QueueInsertJob is InsertJob in a batch.
func QueueInsertJob(b *pgx.Batch, arg InsertJobParams) {
	b.Queue(insertJob, arg.ID, arg.Kind, arg.Queue, arg.Priority, arg.DedupKey, arg.Payload, arg.Part, arg.SlotKey,
		arg.SlotLimit, arg.SlotPolicy, arg.Events, arg.Meta, arg.At, arg.DelayUs)
}

// QueueInsertJobs is InsertJobs in a batch.
func QueueInsertJobs(b *pgx.Batch, arg InsertJobsParams) {
	b.Queue(insertJobs, arg.Ids, arg.Kinds, arg.Queues, arg.Priorities, arg.Payloads, arg.HasAt, arg.Ats, arg.DelaysUs,
		arg.HasPart, arg.Parts, arg.SlotKeys, arg.SlotLimits, arg.SlotPolicies, arg.Events, arg.Metas)
}

// QueueNotify is Notify in a batch (delivered when the batch's transaction commits).
func QueueNotify(b *pgx.Batch, arg NotifyParams) {
	b.Queue(notify, arg.Channel, arg.Payload)
}

// QueueSetLocalIdleTimeout is SetLocalIdleTimeout in a batch.
func QueueSetLocalIdleTimeout(b *pgx.Batch, ms string) {
	b.Queue(setLocalIdleTimeout, ms)
}

// QueueBoundLocalIdleTimeout is BoundLocalIdleTimeout in a batch.
func QueueBoundLocalIdleTimeout(b *pgx.Batch, ms int64) {
	b.Queue(boundLocalIdleTimeout, ms)
}

// QueueSetLocalIndexScans is SetLocalIndexScans in a batch: it holds for the statements
// queued after it, which share the batch's transaction (its implicit one without BEGIN).
func QueueSetLocalIndexScans(b *pgx.Batch) {
	b.Queue(setLocalIndexScans)
}

// QueueFinishRuns is FinishRuns in a batch; the IDs of the runs written land in ids (nil:
// read and dropped).
func QueueFinishRuns(b *pgx.Batch, arg FinishRunsParams, ids *[]pgtype.UUID) {
	b.Queue(finishRuns, arg.Ids, arg.Tokens, arg.States, arg.DelaysUs, arg.Failed, arg.SetCarry, arg.Carries,
		arg.Entries, arg.RanUs, arg.RetainDeadUs, arg.RetainCompletedUs).Query(scanIDs(ids))
}

// QueueExtendLeases is ExtendLeases in a batch; each row is passed to add.
func QueueExtendLeases(b *pgx.Batch, arg ExtendLeasesParams, add func(*ExtendLeasesRow)) {
	b.Queue(extendLeases, arg.Ids, arg.Tokens, arg.LeaseUs).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var i ExtendLeasesRow
			if err := rows.Scan(&i.ID, &i.Extended, &i.StopEvent); err != nil {
				return err
			}
			add(&i)
		}
		return rows.Err()
	})
}

// QueueExtendHeldLeases is ExtendHeldLeases in a batch; each row is passed to add.
func QueueExtendHeldLeases(b *pgx.Batch, arg ExtendHeldLeasesParams, add func(*ExtendHeldLeasesRow)) {
	b.Queue(extendHeldLeases, arg.LeaseUs, arg.Ids, arg.Tokens).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var i ExtendHeldLeasesRow
			if err := rows.Scan(&i.ID, &i.StopEvent); err != nil {
				return err
			}
			add(&i)
		}
		return rows.Err()
	})
}

// QueueReleaseUnstarted is ReleaseUnstarted in a batch; the IDs of the jobs released land
// in ids (nil: read and dropped).
func QueueReleaseUnstarted(b *pgx.Batch, arg ReleaseUnstartedParams, ids *[]pgtype.UUID) {
	b.Queue(releaseUnstarted, arg.Ids, arg.Tokens).Query(scanIDs(ids))
}

// scanIDs reads one-column UUID rows into ids (with ids nil, it reads and drops them).
func scanIDs(ids *[]pgtype.UUID) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		for rows.Next() {
			var id pgtype.UUID
			if err := rows.Scan(&id); err != nil {
				return err
			}
			if ids != nil {
				*ids = append(*ids, id)
			}
		}
		return rows.Err()
	}
}

// QueuePromoteDue is PromoteDue in a batch.
func QueuePromoteDue(b *pgx.Batch, max int32) {
	b.Queue(promoteDue, max)
}

// QueueDedupLock is DedupLock in a batch; the isolation level lands in isolation.
func QueueDedupLock(b *pgx.Batch, arg DedupLockParams, isolation *string) {
	b.Queue(dedupLock, arg.Kind, arg.DedupKey).QueryRow(func(r pgx.Row) error { return r.Scan(isolation) })
}

// QueueInsertIfNoCandidate is InsertIfNoCandidate in a batch; its row lands in out.
func QueueInsertIfNoCandidate(b *pgx.Batch, arg InsertIfNoCandidateParams, out *InsertIfNoCandidateRow) {
	b.Queue(insertIfNoCandidate, arg.Kind, arg.DedupKey, arg.ID, arg.Queue, arg.Priority, arg.Payload, arg.Part, arg.SlotKey,
		arg.SlotLimit, arg.SlotPolicy, arg.Events, arg.Meta, arg.At, arg.DelayUs).
		QueryRow(func(r pgx.Row) error { return r.Scan(&out.Inserted, &out.Due, &out.Deferred) })
}

// QueueInsertOrReplace is InsertOrReplace in a batch; its row lands in out.
func QueueInsertOrReplace(b *pgx.Batch, arg InsertOrReplaceParams, out *InsertOrReplaceRow) {
	b.Queue(insertOrReplace, arg.At, arg.DelayUs, arg.Kind, arg.DedupKey, arg.Payload, arg.Priority, arg.Queue,
		arg.Part, arg.SlotKey, arg.SlotLimit, arg.SlotPolicy, arg.Events, arg.Entry, arg.ID, arg.Meta).
		QueryRow(func(r pgx.Row) error { return r.Scan(&out.JobID, &out.Replaced, &out.Due) })
}

// QueueClaim is Claim in a batch; each claimed row is passed to add.
func QueueClaim(b *pgx.Batch, arg ClaimParams, add func(*ClaimRow)) {
	b.Queue(claim, arg.LeaseUs, arg.WorkerID, arg.MaxFailures, arg.Queue, arg.Kinds, arg.Max).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var i ClaimRow
			if err := rows.Scan(&i.ID, &i.Kind, &i.Payload, &i.Carry, &i.Runs, &i.Failures,
				&i.LeaseToken, &i.Journal, &i.JournalMoved, &i.AttemptedAt, &i.Meta, &i.RunAt, &i.Priority, &i.Events); err != nil {
				return err
			}
			add(&i)
		}
		return rows.Err()
	})
}

// QueueWriteStartedEvents is WriteStartedEvents in a batch.
func QueueWriteStartedEvents(b *pgx.Batch, arg WriteStartedEventsParams) {
	b.Queue(writeStartedEvents, arg.LeaseUs, arg.WorkerID)
}

// QueueClaimGated is ClaimGated in a batch; each claimed row is passed to add.
func QueueClaimGated(b *pgx.Batch, arg ClaimGatedParams, add func(*ClaimGatedRow)) {
	b.Queue(claimGated, arg.Queue, arg.Kinds, arg.Max, arg.LeaseUs, arg.WorkerID, arg.MaxFailures, arg.Channel).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var i ClaimGatedRow
			if err := rows.Scan(&i.ID, &i.Kind, &i.Payload, &i.Carry, &i.Runs, &i.Failures,
				&i.LeaseToken, &i.Journal, &i.JournalMoved, &i.AttemptedAt, &i.Breaker, &i.WakeInUs, &i.Meta, &i.RunAt); err != nil {
				return err
			}
			add(&i)
		}
		return rows.Err()
	})
}

// QueueNextDue is NextDue in a batch; its row lands in out.
func QueueNextDue(b *pgx.Batch, arg NextDueParams, out *NextDueRow) {
	b.Queue(nextDue, arg.Queue, arg.Due, arg.Kinds).QueryRow(func(r pgx.Row) error { return r.Scan(&out.DueInUs, &out.Paused) })
}

// QueueInsertWorkflowNodes is InsertWorkflowNodes in a batch.
func QueueInsertWorkflowNodes(b *pgx.Batch, arg InsertWorkflowNodesParams) {
	b.Queue(insertWorkflowNodes, arg.WorkflowID, arg.Nodes)
}

// QueueInsertWorkflowJobs is InsertWorkflowJobs in a batch.
func QueueInsertWorkflowJobs(b *pgx.Batch, arg InsertWorkflowJobsParams) {
	b.Queue(insertWorkflowJobs, arg.WorkflowID, arg.Ids, arg.Kinds, arg.Queues, arg.Priorities, arg.Payloads, arg.HasAt,
		arg.Ats, arg.DelaysUs, arg.HasPart, arg.Parts, arg.SlotKeys, arg.SlotLimits, arg.SlotPolicies, arg.Events,
		arg.Metas, arg.Released)
}

// QueueSettleWorkflows is SettleWorkflows in a batch (its count is dropped).
func QueueSettleWorkflows(b *pgx.Batch, arg SettleWorkflowsParams) {
	b.Queue(settleWorkflows, arg.Ids, arg.Channel)
}

// QueueSettleWorkflowTouch is SettleWorkflowTouch in a batch (its count is dropped).
func QueueSettleWorkflowTouch(b *pgx.Batch, arg SettleWorkflowTouchParams) {
	b.Queue(settleWorkflowTouch, arg.ID, arg.Channel, arg.Touch)
}

// QueueShareWorkflows is ShareWorkflows in a batch.
func QueueShareWorkflows(b *pgx.Batch, ids []pgtype.UUID) {
	b.Queue(shareWorkflows, ids)
}

// QueueSetLocalFinishChannel is SetLocalFinishChannel in a batch.
func QueueSetLocalFinishChannel(b *pgx.Batch, channel string) {
	b.Queue(setLocalFinishChannel, channel)
}

// QueueSetLocalFinish is SetLocalFinish in a batch.
func QueueSetLocalFinish(b *pgx.Batch, channel string) {
	b.Queue(setLocalFinish, channel)
}

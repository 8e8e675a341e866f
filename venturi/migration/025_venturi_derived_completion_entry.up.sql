-- venturi schema, version 25: the journal entry of a plain completion is derived from the
-- history row's columns instead of stored in its journal.
--
-- A run that completes its job with no note and no attachment leaves an entry whose
-- fields are all in the job's row already (the run number in runs, the worker in
-- worker_id, the start in attempted_at, the event in state) but two: its fencing token and
-- how long it ran. The finish used to parse that entry (~190 bytes of jsonb) and append it
-- to the journal of the history row it inserts, once per job; it now stores the two
-- numbers (derived_token, derived_run_us) and appends nothing, and every read of the job
-- through venturi_job_all gets the entry back (venturi_completed_entry): the journal a
-- reader sees is unchanged, its times written in UTC as the worker writes them. A job's
-- other entries, and the entries of runs that end otherwise (a note, an attachment, a
-- failure, a cancel), are stored as before.
--
-- A bulk retry that moves a finished job back writes the derived entry into the journal it
-- moves back (RetryJobs).
--
-- Rolling deploy: older workers keep working; nothing is lost or run twice. Their finishes
-- store every entry (derived_token NULL), and their reads through venturi_job_all see the
-- derived entries. An older worker's bulk retry of a job whose entry is derived moves the
-- job back without that entry (its journal then ends at the run before); the job itself is
-- retried as asked.

ALTER TABLE venturi_job_history
    ADD COLUMN derived_token  bigint,
    ADD COLUMN derived_run_us bigint;

-- The journal entry of run p_run, a plain completion: as the worker writes it (field
-- order aside, which jsonb does not keep), times in UTC with microseconds.
CREATE FUNCTION venturi_completed_entry(p_run integer, p_token bigint, p_worker text, p_started timestamptz, p_run_us bigint)
RETURNS jsonb LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT jsonb_build_object(
        'event', 'completed', 'run', p_run, 'token', p_token, 'worker', p_worker,
        'started_at', to_char(p_started AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'at', to_char((p_started + p_run_us * interval '1 microsecond') AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
$$;

CREATE OR REPLACE VIEW venturi_job_all AS
SELECT j.id, j.kind, j.state, j.priority, j.dedup_key, j.payload, j.carry, j.run_at, j.runs, j.failures,
       j.max_failures, j.lease_token, j.lease_expires_at, j.worker_id, j.attempted_at, j.journal,
       j.created_at, j.finished_at, j.journal_moved, j.journal_dropped, j.queue, j.part, j.slot_key,
       j.slot_limit, j.slot_policy, j.breaker, j.stop_requested_at, j.stop_event, j.stop_note,
       j.await_channel, j.wait_signals, j.events, j.meta, false AS in_history
FROM venturi_job j
UNION ALL
SELECT h.id, h.kind, h.state, h.priority, h.dedup_key, h.payload, h.carry, h.run_at, h.runs, h.failures,
       h.max_failures, NULL::bigint, NULL::timestamptz, h.worker_id, h.attempted_at,
       CASE WHEN h.derived_token IS NULL THEN h.journal
            ELSE h.journal || jsonb_build_array(venturi_completed_entry(h.runs, h.derived_token, h.worker_id,
                                                                        h.attempted_at, h.derived_run_us)) END,
       h.created_at, h.finished_at, h.journal_moved, h.journal_dropped, h.queue, h.part, h.slot_key,
       h.slot_limit, h.slot_policy, h.breaker, h.stop_requested_at, h.stop_event, h.stop_note,
       NULL::text, NULL::text[], h.events, h.meta, true AS in_history
FROM venturi_job_history h;

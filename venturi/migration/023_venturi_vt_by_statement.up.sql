-- venturi schema, version 23: the statements that make a gated job available give it its
-- virtual time; the BEFORE UPDATE trigger that did (venturi_job_vt_update, migrations 16
-- and 17) is dropped.
--
-- A BEFORE UPDATE row trigger makes PostgreSQL lock and re-read every row an UPDATE of the
-- table changes before it tests the trigger's WHEN, whatever the WHEN says: every update
-- of every job paid for it, plain jobs included, and one that had not locked its rows
-- first (a retry, a promotion, a rescue) wrote a lock record more per row and visited each
-- row twice (bench/FINDINGS.md section 18). The rule it applied is unchanged and now lives
-- in the statements that make a gated job available, each of which calls
-- venturi_job_place for the rows that need a place:
--
--   - a job that becomes available (promoted, woken by a signal, retried, merged from
--     scheduled, gated by its kind's first limits) goes behind its partition's pending jobs,
--     and no earlier than the queue's front at its priority;
--   - a job whose run ends and that is due at once again (a retry or pause without delay, a
--     lease rescue, a release unstarted) keeps the place it had;
--   - a merge that changes an available job's queue, partition or priority places it anew.
--
-- A plain job (part NULL) has no virtual time: venturi_job_place is STRICT, so a
-- statement that passes a plain row's NULL partition neither calls it nor gives the row one.
--
-- The insert trigger (venturi_job_vt_insert) stays: a BEFORE INSERT trigger locks nothing,
-- its WHEN is one test for a plain job, and it places the gated jobs of every insert (an
-- enqueue, a merge's insert, a cron fire, a bulk retry's move back from the history, an
-- older producer's insert) without each statement saying so.
--
-- Rolling deploy: older workers keep working; nothing is lost or run twice. A gated job
-- that an older worker makes available by an update keeps the virtual time it had: one
-- due again at once keeps its place, as it would; one coming back from a backoff or a wait
-- is claimed in its earlier place (ahead of its partition's newer jobs); one that had none
-- (inserted scheduled or waiting) is claimed after its queue's placed gated jobs of its
-- priority until the retention worker's placement sweep (PlaceUnplaced, once a minute)
-- places it. make chaos/rolling runs older workers through this migration under load.

-- The queue's front at the job's priority, or one past its partition's last pending job,
-- whichever is later. Both reads are index probes (venturi_job_claim_vt_idx,
-- venturi_job_part_vt_idx). VOLATILE, so that within one statement each row's reads see the
-- places given to the rows before it (a promotion of a partition's jobs gives them
-- consecutive places); plpgsql, so that it is never inlined into the calling statement.
CREATE FUNCTION venturi_job_place(p_queue text, p_part text, p_priority smallint) RETURNS bigint
LANGUAGE plpgsql STRICT VOLATILE AS $$
BEGIN
    RETURN GREATEST(
        COALESCE((SELECT x.vt FROM venturi_job x
                  WHERE x.state = 'available' AND x.part IS NOT NULL AND x.queue = p_queue
                    AND x.priority = p_priority AND x.vt IS NOT NULL
                  ORDER BY x.vt, x.id LIMIT 1), 0),
        COALESCE((SELECT x.vt FROM venturi_job x
                  WHERE x.state = 'available' AND x.part IS NOT NULL AND x.queue = p_queue
                    AND x.part = p_part AND x.priority = p_priority AND x.vt IS NOT NULL
                  ORDER BY x.vt DESC LIMIT 1) + 1, 0));
END
$$;

-- The insert trigger's function: an inserted gated job takes its place.
CREATE OR REPLACE FUNCTION venturi_job_vt() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.vt := venturi_job_place(NEW.queue, NEW.part, NEW.priority);
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS venturi_job_vt_update ON venturi_job;

-- A plain job has no virtual time (one that was gated kept its last).
UPDATE venturi_job SET vt = NULL WHERE part IS NULL AND vt IS NOT NULL;

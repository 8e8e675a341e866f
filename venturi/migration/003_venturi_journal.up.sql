-- venturi schema, version 3: a job's journal costs the same at run 100,000 as at run 1.
--
-- Until now every entry stayed in venturi_job.journal, so each run rewrote (and each claim
-- returned and decoded) the whole history: a run's cost grew with the number of earlier
-- runs. Now the row keeps only the recent entries. When a write leaves more than 32
-- entries in it, a trigger moves all but the newest 16 to venturi_journal (one row per
-- entry), so a job's row stays small and the move happens once per 17 or more entries.
-- venturi_journal keeps the newest 1,000 moved entries of each job; older ones are
-- dropped and counted in venturi_job.journal_dropped (entries per event, first and last
-- time). One job therefore keeps at most 1,032 entries, whatever it does; each entry is
-- bounded too (a note of 16 KiB, an attachment of 64 KiB).
--
-- The trigger does the moving rather than the queue's statements so that every writer
-- obeys the bound: finishing runs, rescues, merges, and workers of version 2 during a
-- rolling deploy. It is an AFTER trigger with a WHEN condition: an update that leaves the
-- row's journal short costs only the condition's test (a BEFORE trigger would lock each
-- row before every update). A second trigger deletes a job's moved entries with the job,
-- whoever deletes it (retention, an operator, a version-2 worker).
--
-- Rolling deploy: version-2 workers keep working beside version-3 workers. They read the
-- row's journal as the whole history (so their handlers see only the recent entries),
-- and everything they write is bounded by the trigger.

ALTER TABLE venturi_job
    -- Entries moved out of journal so far (to venturi_journal, or dropped): the first
    -- entry in journal is entry number journal_moved + 1 of the job's whole journal.
    ADD COLUMN journal_moved   bigint NOT NULL DEFAULT 0,
    -- Summary of the entries dropped from venturi_journal past its bound: NULL until one
    -- is dropped, then {"entries": n, "events": {"paused": n, ...}, "first_at": t, "last_at": t}.
    ADD COLUMN journal_dropped jsonb;

CREATE TABLE venturi_journal (
    job_id uuid   NOT NULL,
    seq    bigint NOT NULL, -- the entry's number in the job's whole journal; 1 is the first
    entry  jsonb  NOT NULL,
    PRIMARY KEY (job_id, seq)
);

-- Entries arrive and leave in batches all the time: vacuum like the job table.
ALTER TABLE venturi_journal SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0,
    autovacuum_vacuum_insert_scale_factor = 0.02,
    autovacuum_vacuum_insert_threshold = 1000
);

CREATE FUNCTION venturi_journal_move() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    keep_in_row CONSTANT int := 16;   -- entries left in the row after a move
    keep_moved  CONSTANT int := 1000; -- moved entries kept per job
    n     int    := jsonb_array_length(NEW.journal);
    moved bigint := NEW.journal_moved + (n - keep_in_row);
    drop_upto bigint := moved - keep_moved;
    dropped jsonb := NEW.journal_dropped;
BEGIN
    INSERT INTO venturi_journal (job_id, seq, entry)
    SELECT NEW.id, NEW.journal_moved + e.ord, e.entry
    FROM jsonb_array_elements(NEW.journal) WITH ORDINALITY AS e(entry, ord)
    WHERE e.ord <= n - keep_in_row
    ON CONFLICT (job_id, seq) DO NOTHING;

    IF drop_upto > 0 THEN
        WITH gone AS (
            DELETE FROM venturi_journal
            -- Earlier moves dropped everything up to NEW.journal_moved - keep_moved:
            -- start after it, not at the job's first (long dead) index entries.
            WHERE job_id = NEW.id AND seq > NEW.journal_moved - keep_moved AND seq <= drop_upto
            RETURNING seq, entry
        ), per_event AS (
            SELECT COALESCE(entry->>'event', '?') AS event, count(*) AS n FROM gone GROUP BY 1
        )
        SELECT jsonb_build_object(
                   'entries', COALESCE((dropped->>'entries')::bigint, 0) + (SELECT count(*) FROM gone),
                   'events', COALESCE(dropped->'events', '{}'::jsonb) || COALESCE((
                       SELECT jsonb_object_agg(p.event, p.n + COALESCE((dropped->'events'->>p.event)::bigint, 0))
                       FROM per_event p), '{}'::jsonb),
                   'first_at', COALESCE(dropped->'first_at',
                       (SELECT entry->'at' FROM gone ORDER BY seq LIMIT 1)),
                   'last_at', COALESCE((SELECT entry->'at' FROM gone ORDER BY seq DESC LIMIT 1),
                       dropped->'last_at'))
        INTO dropped
        WHERE EXISTS (SELECT 1 FROM gone);
        dropped := COALESCE(dropped, NEW.journal_dropped);
    END IF;

    UPDATE venturi_job SET
        journal = COALESCE((
            SELECT jsonb_agg(e.entry ORDER BY e.ord)
            FROM jsonb_array_elements(NEW.journal) WITH ORDINALITY AS e(entry, ord)
            WHERE e.ord > n - keep_in_row), '[]'::jsonb),
        journal_moved = moved,
        journal_dropped = dropped
    WHERE id = NEW.id AND journal_moved = NEW.journal_moved;
    RETURN NULL;
END
$$;

CREATE TRIGGER venturi_journal_move
    AFTER UPDATE OF journal ON venturi_job
    FOR EACH ROW WHEN (jsonb_array_length(NEW.journal) > 32)
    EXECUTE FUNCTION venturi_journal_move();

CREATE FUNCTION venturi_journal_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM venturi_journal WHERE job_id = OLD.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER venturi_journal_delete
    AFTER DELETE ON venturi_job
    FOR EACH ROW WHEN (OLD.journal_moved > 0)
    EXECUTE FUNCTION venturi_journal_delete();

-- Jobs of version 2 with long journals are brought under the bound now.
UPDATE venturi_job SET journal = journal WHERE jsonb_array_length(journal) > 32;

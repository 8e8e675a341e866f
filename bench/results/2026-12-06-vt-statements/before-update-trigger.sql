-- A database that bench migrated (schema version 23): the same 20,000-row update without
-- and with the BEFORE UPDATE trigger that migration 23 dropped, each after a checkpoint.
SET search_path = venturi_bench;
BEGIN;
INSERT INTO venturi_job (id, kind, queue, state, payload, run_at)
SELECT gen_random_uuid(), 'probe', 'probe', 'available', '{}', now() FROM generate_series(1, 20000);
CHECKPOINT;
EXPLAIN (ANALYZE, BUFFERS, WAL, COSTS OFF, TIMING OFF) UPDATE venturi_job SET state = 'scheduled', run_at = now() + interval '1 minute' WHERE queue = 'probe';
ROLLBACK;
BEGIN;
INSERT INTO venturi_job (id, kind, queue, state, payload, run_at)
SELECT gen_random_uuid(), 'probe', 'probe', 'available', '{}', now() FROM generate_series(1, 20000);
CREATE TRIGGER venturi_job_vt_update BEFORE UPDATE OF state, part, queue, priority ON venturi_job
    FOR EACH ROW WHEN (NEW.state = 'available' AND NEW.part IS NOT NULL
                       AND (OLD.state <> 'available' OR OLD.part IS DISTINCT FROM NEW.part
                            OR OLD.queue <> NEW.queue OR OLD.priority <> NEW.priority))
    EXECUTE FUNCTION venturi_job_vt();
CHECKPOINT;
EXPLAIN (ANALYZE, BUFFERS, WAL, COSTS OFF, TIMING OFF) UPDATE venturi_job SET state = 'scheduled', run_at = now() + interval '1 minute' WHERE queue = 'probe';
ROLLBACK;

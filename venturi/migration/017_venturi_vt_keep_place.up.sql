-- venturi schema, version 17: a gated job whose run ends straight back to available keeps
-- its virtual time. Functions only; no table changes.
--
-- venturi_job_vt (migration 16) kept a job's virtual time only when a stopping worker
-- released it unstarted. A job whose run ends and that is due at once again (the lease
-- rescue of a dead worker's run, a retry or a pause without delay) went behind its
-- partition's pending jobs, where before migration 16 it kept its due time and so its
-- place (RescueExpired says so). Now every run that ends back in available keeps the
-- job's place; a job due later (a backoff, a pause with a delay) is placed when it comes
-- due, as before.
--
-- Rolling deploy: older workers keep working; the trigger function is replaced in the
-- migration's transaction and applies to every writer at once.

CREATE OR REPLACE FUNCTION venturi_job_vt() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- A run ended and the job is due at once (a rescue, a release, a retry or pause without
    -- delay): the job keeps its place.
    IF TG_OP = 'UPDATE' AND OLD.vt IS NOT NULL AND OLD.state = 'running'
       AND OLD.part IS NOT DISTINCT FROM NEW.part AND OLD.priority = NEW.priority AND OLD.queue = NEW.queue THEN
        RETURN NEW;
    END IF;
    NEW.vt := GREATEST(
        COALESCE((SELECT x.vt FROM venturi_job x
                  WHERE x.state = 'available' AND x.part IS NOT NULL AND x.queue = NEW.queue
                    AND x.priority = NEW.priority
                  ORDER BY x.vt, x.id LIMIT 1), 0),
        COALESCE((SELECT x.vt FROM venturi_job x
                  WHERE x.state = 'available' AND x.part IS NOT NULL AND x.queue = NEW.queue
                    AND x.part = NEW.part AND x.priority = NEW.priority
                  ORDER BY x.vt DESC LIMIT 1) + 1, 0));
    RETURN NEW;
END
$$;

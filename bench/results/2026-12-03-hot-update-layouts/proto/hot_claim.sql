-- A prototype, not venturi's schema: bench/FINDINGS.md section 12. Storage layouts for the
-- claim and the finish of plain jobs, drained by one session (proto.drain), to compare WAL
-- bytes, WAL records and time per job. Load it from this folder, then run hot_claim_run.sql once per
-- layout:
--
--   psql "$BENCH_DATABASE_URL" -f hot_claim.sql
--   psql "$BENCH_DATABASE_URL" -v tbl=j0 -v hot=false -v lease=NULL -f hot_claim_run.sql       # P0: today
--   psql "$BENCH_DATABASE_URL" -v tbl=j1 -v hot=true -v lease=NULL -f hot_claim_run.sql        # P1: HOT claim, no rescue
--   psql "$BENCH_DATABASE_URL" -v tbl=j1 -v hot=true -v lease="'lease_l'" -f hot_claim_run.sql # P2: + logged lease rows
--   psql "$BENCH_DATABASE_URL" -v tbl=j1 -v hot=true -v lease="'lease_u'" -f hot_claim_run.sql # P3: + unlogged lease rows
--   psql "$BENCH_DATABASE_URL" -v tbl=j1 -v hot=true -v lease="'wclaims'" -f hot_claim_run.sql # P4: + a job list per worker
--   psql "$BENCH_DATABASE_URL" -v tbl=j1 -v hot=true -v lease="'cbatch'" -f hot_claim_run.sql  # P5: + a row per claim batch
--
-- It works in schema proto (dropped and made again), never in venturi's.
DROP SCHEMA IF EXISTS proto CASCADE;
CREATE SCHEMA proto;
SET search_path = proto;
-- P0: today's layout (the columns a plain no-op job touches), state in the partial indexes.
CREATE TABLE j0 (
  id uuid PRIMARY KEY, kind text NOT NULL, queue text NOT NULL, state text NOT NULL,
  priority int NOT NULL DEFAULT 0, payload jsonb NOT NULL, run_at timestamptz NOT NULL,
  runs int NOT NULL DEFAULT 0, failures int NOT NULL DEFAULT 0, max_failures int NOT NULL DEFAULT 25,
  lease_token bigint, lease_expires_at timestamptz, worker_id text, attempted_at timestamptz,
  journal jsonb NOT NULL DEFAULT '[]', created_at timestamptz NOT NULL DEFAULT now(), finished_at timestamptz,
  part text, slot_key text, meta jsonb);
CREATE INDEX j0_claim ON j0 (queue, priority DESC, run_at, id) WHERE state = 'available' AND part IS NULL;
CREATE INDEX j0_lease ON j0 (lease_expires_at) WHERE state = 'running';
CREATE INDEX j0_finished ON j0 (finished_at) WHERE state = 'completed';
-- P1: the claim as a HOT update: nothing the claim changes is indexed or in a predicate;
-- the claim index holds every unfinished job (running ones are filtered on the heap), and
-- pages keep room for the new versions (fillfactor).
CREATE TABLE j1 (LIKE j0 INCLUDING DEFAULTS) WITH (fillfactor = 50);
ALTER TABLE j1 ADD PRIMARY KEY (id);
CREATE INDEX j1_claim ON j1 (queue, priority DESC, run_at, id) WHERE finished_at IS NULL AND part IS NULL;
CREATE INDEX j1_finished ON j1 (finished_at) WHERE finished_at IS NOT NULL;
CREATE SEQUENCE tok;
-- P2/P3: P1 plus the leases the rescue needs in a narrow table of their own (P2 logged,
-- P3 unlogged): a row inserted by the claim, deleted by the finish.
CREATE TABLE lease_l (job_id uuid PRIMARY KEY, token bigint NOT NULL, expires_at timestamptz NOT NULL);
CREATE INDEX lease_l_exp ON lease_l (expires_at);
CREATE UNLOGGED TABLE lease_u (job_id uuid PRIMARY KEY, token bigint NOT NULL, expires_at timestamptz NOT NULL);
CREATE INDEX lease_u_exp ON lease_u (expires_at);
-- P4: P1 plus, per worker, one row listing the jobs it holds, rewritten once per claim and
-- once per finish batch (a heartbeat on it would replace the per-job leases; rescue reads
-- the list of a worker whose heartbeat stopped).
CREATE TABLE wclaims (worker text PRIMARY KEY, ids uuid[] NOT NULL DEFAULT '{}', beat timestamptz NOT NULL DEFAULT now());
-- P5: P1 plus one row per claim batch (its worker and job IDs), written once by the claim
-- and deleted once all its jobs have finished (here: when the batch's jobs are finished).
CREATE TABLE cbatch (id bigserial PRIMARY KEY, worker text NOT NULL, ids uuid[] NOT NULL);

-- Drain: claim batches of 500; finish each batch two claims later (about 1,000 running,
-- as a worker holds), one transaction per claim and per finish.
CREATE PROCEDURE drain(tbl text, hot boolean, lease text DEFAULT NULL)
LANGUAGE plpgsql AS $$
DECLARE
  q1 uuid[]; q2 uuid[]; cur uuid[];
  n int := 0;
BEGIN
  LOOP
    IF hot THEN
      EXECUTE format($f$WITH upd AS (WITH picked AS (SELECT j.id FROM %I j WHERE j.finished_at IS NULL AND j.part IS NULL AND j.queue = 'default'
                 AND j.state = 'available' ORDER BY j.priority DESC, j.run_at, j.id LIMIT 500 FOR UPDATE SKIP LOCKED)
        UPDATE %I j SET state = 'running', runs = j.runs + 1, lease_token = nextval('tok'), lease_expires_at = now() + interval '30 seconds',
               worker_id = 'w1', attempted_at = now()
        WHERE j.id = ANY(ARRAY(SELECT id FROM picked)) RETURNING j.id) SELECT array_agg(id) FROM upd$f$, tbl, tbl) INTO cur;
    ELSE
      EXECUTE format($f$WITH upd AS (WITH picked AS (SELECT j.id FROM %I j WHERE j.state = 'available' AND j.part IS NULL AND j.queue = 'default'
                 ORDER BY j.priority DESC, j.run_at, j.id LIMIT 500 FOR UPDATE SKIP LOCKED)
        UPDATE %I j SET state = 'running', runs = j.runs + 1, lease_token = nextval('tok'), lease_expires_at = now() + interval '30 seconds',
               worker_id = 'w1', attempted_at = now()
        WHERE j.id = ANY(ARRAY(SELECT id FROM picked)) RETURNING j.id) SELECT array_agg(id) FROM upd$f$, tbl, tbl) INTO cur;
    END IF;
    IF lease = 'cbatch' AND cur IS NOT NULL THEN
      INSERT INTO cbatch (worker, ids) VALUES ('w1', cur);
    ELSIF lease = 'wclaims' AND cur IS NOT NULL THEN
      UPDATE wclaims SET ids = ids || cur, beat = now() WHERE worker = 'w1';
    ELSIF lease IS NOT NULL AND cur IS NOT NULL THEN
      EXECUTE format('INSERT INTO %I (job_id, token, expires_at) SELECT j.id, j.lease_token, j.lease_expires_at FROM %I j WHERE j.id = ANY($1)', lease, tbl) USING cur;
    END IF;
    COMMIT;
    IF q2 IS NOT NULL THEN
      IF lease = 'cbatch' THEN
        DELETE FROM cbatch WHERE ids = q2;
      ELSIF lease = 'wclaims' THEN
        UPDATE wclaims SET ids = ARRAY(SELECT unnest(ids) EXCEPT ALL SELECT unnest(q2)) WHERE worker = 'w1';
      ELSIF lease IS NOT NULL THEN
        EXECUTE format('DELETE FROM %I WHERE job_id = ANY($1)', lease) USING q2;
      END IF;
      EXECUTE format($f$UPDATE %I j SET state = 'completed', finished_at = now(), lease_token = NULL, lease_expires_at = NULL,
               journal = j.journal || jsonb_build_array(jsonb_build_object('event', 'completed', 'run', j.runs, 'at', now()))
             WHERE j.id = ANY($1)$f$, tbl) USING q2;
      COMMIT;
    END IF;
    q2 := q1; q1 := cur;
    EXIT WHEN cur IS NULL AND q2 IS NULL AND q1 IS NULL;
    n := n + 1;
    EXIT WHEN n > 1000;
  END LOOP;
END $$;

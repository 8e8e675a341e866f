-- Where venturi_claim_gated spends its time: one claim of 1,000 jobs out of 100,000
-- available (and 1,100 running, what one worker holds), per scenario-11 variant, with
-- every statement inside the function explained by auto_explain (durations and buffers;
-- per-node timing off, so the durations are the statements' own). The plain claim (queries.sql, Claim) is explained the same way for
-- comparison. Every claim runs in a transaction that is rolled back, warm (run three
-- times; read the last).
--
-- Run against the bench schema after any bench run has migrated it (it truncates
-- venturi_job, venturi_gate and venturi_queue):
--
--   psql "$(scripts/pg.sh url venturi_bench)" -f bench/explain_flow.sql > explain-flow.out 2>&1
--
-- and read, per section, the statements of the last claim: each nested statement's
-- "duration" and "Buffers" (auto_explain logs nested statements before the claim).
--
-- FINDINGS.md section 9 has the summary.
\set ON_ERROR_STOP on
SET search_path = venturi_bench;
LOAD 'auto_explain';
SET auto_explain.log_min_duration = 0;
SET auto_explain.log_nested_statements = on;
SET auto_explain.log_analyze = on;
SET auto_explain.log_buffers = on;
SET auto_explain.log_timing = off;
SET auto_explain.log_level = notice;
SET client_min_messages = notice;

-- jobs(kind, part, slot?) fills venturi_job with 100,000 available jobs in time order.
CREATE OR REPLACE FUNCTION pg_temp.jobs(p_kind text, p_parts integer, p_slot boolean, p_gated boolean) RETURNS void
LANGUAGE sql AS $$
    TRUNCATE venturi_job, venturi_gate, venturi_queue;
    INSERT INTO venturi_job (id, kind, queue, state, priority, payload, run_at, part, slot_key, slot_limit, slot_policy)
    SELECT (lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0') || lpad(to_hex(g), 20, '0'))::uuid,
           p_kind, 'default', 'available', 0, jsonb_build_object('n', g), now() - interval '1 microsecond' * (100000 - g),
           CASE WHEN NOT p_gated THEN NULL WHEN p_parts = 0 THEN '' ELSE 'p-' || lpad((g % p_parts)::text, 4, '0') END,
           CASE WHEN p_slot THEN 'p-' || lpad((g % p_parts)::text, 4, '0') END,
           CASE WHEN p_slot THEN 2 END, CASE WHEN p_slot THEN 0::smallint END
    FROM generate_series(1, 100000) g;
    -- What one worker holds during a drain: Concurrency + Prefetch = 1,100 claimed jobs,
    -- running as far as the gates count.
    UPDATE venturi_job SET state = 'running', runs = 1, lease_token = nextval('venturi_lease_token_seq'),
           lease_expires_at = now() + interval '30 seconds', worker_id = 'w', attempted_at = now()
    WHERE id IN (SELECT id FROM venturi_job ORDER BY run_at LIMIT 1100);
$$;

INSERT INTO venturi_kind (kind, concurrency) VALUES ('bench_flow_limit', 2000)
ON CONFLICT (kind) DO UPDATE SET concurrency = 2000, rate_n = 0, brk_failures = 0;
INSERT INTO venturi_kind (kind, rate_n, rate_period, rate_by_part) VALUES ('bench_flow_rate', 1000, '1 second', true)
ON CONFLICT (kind) DO UPDATE SET concurrency = 0, rate_n = 1000, rate_period = '1 second', rate_by_part = true, brk_failures = 0;

\echo '### plain: Claim (queries.sql) of 1,000'
SELECT pg_temp.jobs('bench_noop', 0, false, false);
VACUUM ANALYZE venturi_job;
\set claim 'WITH picked AS (SELECT j.id FROM venturi_job j WHERE j.state = ''available'' AND j.part IS NULL AND j.queue = ''default'' AND j.kind = ANY(ARRAY[''bench_noop'']) AND NOT EXISTS (SELECT 1 FROM venturi_queue vq WHERE vq.name = ''default'' AND (vq.paused OR vq.concurrency > 0)) ORDER BY j.priority DESC, j.run_at, j.id LIMIT 1000 FOR UPDATE SKIP LOCKED), claimed AS (UPDATE venturi_job j SET state = ''running'', runs = j.runs + 1, lease_token = nextval(''venturi_lease_token_seq''), lease_expires_at = now() + interval ''30 seconds'', worker_id = ''w'', attempted_at = now(), max_failures = 25 WHERE j.id = ANY(ARRAY(SELECT picked.id FROM picked)) RETURNING j.id, j.kind, j.payload, j.carry, j.runs, j.failures, j.lease_token, j.journal, j.journal_moved, j.attempted_at, j.priority, j.run_at) SELECT count(*) FROM claimed c'
BEGIN; :claim; ROLLBACK;
BEGIN; :claim; ROLLBACK;
BEGIN; :claim; ROLLBACK;
\echo '### plain: the gated claim finds nothing (every round trip calls it)'
BEGIN; SELECT count(*) FROM venturi_claim_gated('default', ARRAY['bench_noop'], 1000, 30000000, 'w', 25, 'ch'); ROLLBACK;
BEGIN; SELECT count(*) FROM venturi_claim_gated('default', ARRAY['bench_noop'], 1000, 30000000, 'w', 25, 'ch'); ROLLBACK;

\echo '### slots: 1,000 keys, Limit 2'
SELECT pg_temp.jobs('bench_flow_slot', 1000, true, true);
VACUUM ANALYZE venturi_job;
BEGIN; SELECT count(*) FROM venturi_claim_gated('default', ARRAY['bench_flow_slot'], 1000, 30000000, 'w', 25, 'ch'); ROLLBACK;
BEGIN; SELECT count(*) FROM venturi_claim_gated('default', ARRAY['bench_flow_slot'], 1000, 30000000, 'w', 25, 'ch'); ROLLBACK;
BEGIN; SELECT count(*) FROM venturi_claim_gated('default', ARRAY['bench_flow_slot'], 1000, 30000000, 'w', 25, 'ch'); ROLLBACK;
\echo '### slots: a claim of 10 returns'
BEGIN; SELECT count(*) AS returned_for_max_10 FROM venturi_claim_gated('default', ARRAY['bench_flow_slot'], 10, 30000000, 'w', 25, 'ch'); ROLLBACK;

\echo '### kind-limit: Concurrency 2000, one partition'
SELECT pg_temp.jobs('bench_flow_limit', 0, false, true);
VACUUM ANALYZE venturi_job;
BEGIN; SELECT count(*) FROM venturi_claim_gated('default', ARRAY['bench_flow_limit'], 1000, 30000000, 'w', 25, 'ch'); ROLLBACK;
BEGIN; SELECT count(*) FROM venturi_claim_gated('default', ARRAY['bench_flow_limit'], 1000, 30000000, 'w', 25, 'ch'); ROLLBACK;
BEGIN; SELECT count(*) FROM venturi_claim_gated('default', ARRAY['bench_flow_limit'], 1000, 30000000, 'w', 25, 'ch'); ROLLBACK;

\echo '### queue-limit: plain jobs, queue concurrency 2000'
SELECT pg_temp.jobs('bench_noop', 0, false, false);
INSERT INTO venturi_queue (name, concurrency) VALUES ('default', 2000);
VACUUM ANALYZE venturi_job;
BEGIN; SELECT count(*) FROM venturi_claim_gated('default', ARRAY['bench_noop'], 1000, 30000000, 'w', 25, 'ch'); ROLLBACK;
BEGIN; SELECT count(*) FROM venturi_claim_gated('default', ARRAY['bench_noop'], 1000, 30000000, 'w', 25, 'ch'); ROLLBACK;
BEGIN; SELECT count(*) FROM venturi_claim_gated('default', ARRAY['bench_noop'], 1000, 30000000, 'w', 25, 'ch'); ROLLBACK;

\echo '### partitions: 100, no limits'
SELECT pg_temp.jobs('bench_flow_part', 100, false, true);
VACUUM ANALYZE venturi_job;
BEGIN; SELECT count(*) FROM venturi_claim_gated('default', ARRAY['bench_flow_part'], 1000, 30000000, 'w', 25, 'ch'); ROLLBACK;
BEGIN; SELECT count(*) FROM venturi_claim_gated('default', ARRAY['bench_flow_part'], 1000, 30000000, 'w', 25, 'ch'); ROLLBACK;
BEGIN; SELECT count(*) FROM venturi_claim_gated('default', ARRAY['bench_flow_part'], 1000, 30000000, 'w', 25, 'ch'); ROLLBACK;

\echo '### rate: 100 partitions, 1000/s each'
SELECT pg_temp.jobs('bench_flow_rate', 100, false, true);
VACUUM ANALYZE venturi_job;
BEGIN; SELECT count(*) FROM venturi_claim_gated('default', ARRAY['bench_flow_rate'], 1000, 30000000, 'w', 25, 'ch'); ROLLBACK;
BEGIN; SELECT count(*) FROM venturi_claim_gated('default', ARRAY['bench_flow_rate'], 1000, 30000000, 'w', 25, 'ch'); ROLLBACK;
BEGIN; SELECT count(*) FROM venturi_claim_gated('default', ARRAY['bench_flow_rate'], 1000, 30000000, 'w', 25, 'ch'); ROLLBACK;

TRUNCATE venturi_job, venturi_gate, venturi_queue;

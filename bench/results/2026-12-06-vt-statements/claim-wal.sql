-- The WAL of one 1,000-row plain claim, as Claim sends it (pg_walinspect), on a database
-- that bench migrated (schema venturi_bench). Random UUIDs spread the rows over more
-- pages than ULIDs do: the full-page images are larger than in scenario 4.
SET search_path = venturi_bench;
TRUNCATE venturi_job;
INSERT INTO venturi_job (id, kind, queue, state, payload, run_at)
SELECT gen_random_uuid(), 'bench_noop', 'default', 'available', '{"n":1}', now() FROM generate_series(1, 20000);
VACUUM ANALYZE venturi_job;
CHECKPOINT;
SELECT pg_current_wal_insert_lsn() AS a \gset
UPDATE venturi_job j SET state = 'running', runs = j.runs + 1, lease_token = nextval('venturi_lease_token_seq'),
    lease_expires_at = now() + interval '30 seconds', worker_id = 'w', attempted_at = now(), max_failures = 25
WHERE ctid = ANY(ARRAY(SELECT ctid FROM venturi_job p WHERE p.state = 'available' AND p.part IS NULL AND p.queue = 'default'
   AND p.kind = ANY('{bench_noop}') ORDER BY p.priority DESC, p.run_at, p.id LIMIT 1000 FOR UPDATE SKIP LOCKED));
SELECT pg_current_wal_insert_lsn() AS b \gset
SELECT "resource_manager/record_type" AS rec, count, round(record_size::numeric/1000) AS rec_b_per_row, round(fpi_size::numeric/1000) AS fpi_b_per_row
FROM public.pg_get_wal_stats(:'a'::pg_lsn, :'b'::pg_lsn, true) WHERE count > 0 ORDER BY count DESC;

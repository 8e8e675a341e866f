-- One drain of 100,000 plain no-op jobs through layout :tbl (see hot_claim.sql for the
-- variables); prints WAL bytes, time, WAL records and full-page images per job.
SET search_path = proto;
TRUNCATE j0, j1, lease_l, lease_u, wclaims, cbatch; INSERT INTO wclaims (worker) VALUES ('w1');
INSERT INTO :tbl (id, kind, queue, state, payload, run_at) SELECT gen_random_uuid(), 'noop', 'default', 'available', jsonb_build_object('n', g), now() - interval '1 hour' + g * interval '1 ms' FROM generate_series(1, 100000) g;
VACUUM ANALYZE :tbl;
CHECKPOINT;
SELECT pg_current_wal_lsn() AS lsn0, clock_timestamp() AS t0, wal_fpi AS fpi0, wal_records AS rec0 FROM pg_stat_wal \gset
CALL drain(:'tbl', :hot, :lease);
SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), :'lsn0') / 100000 AS wal_per_job, round(extract(epoch from clock_timestamp() - :'t0'::timestamptz) * 1e6 / 100000, 1) AS us_per_job,
       round((w.wal_records - :rec0) / 100000.0, 2) AS records_per_job, round((w.wal_fpi - :fpi0) / 100000.0, 3) AS fpi_per_job,
       (SELECT count(*) FROM :tbl WHERE state = 'completed') AS completed,
       (SELECT n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = :'tbl') AS hot, (SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = :'tbl') AS upd,
       pg_size_pretty(pg_relation_size(:'tbl')) AS heap
FROM pg_stat_wal w;

-- venturi schema, version 2: vacuum that keeps pace with a sustained load.
--
-- Pruning now deletes finished jobs as fast as they pass their retention (thousands per
-- second under load), and every job's life leaves dead tuples behind. Autovacuum's default
-- cost throttling (2ms of sleep per 200 pages) cannot keep up with that on this table, so
-- dead tuples pile up between runs and every index scan wades through them. The job table
-- is kept small by pruning, so an unthrottled vacuum of it is short. Inserts also trigger
-- a vacuum (PostgreSQL 13+), keeping the visibility map current for index-only scans.
--
-- Rolling deploy: storage parameters only, no change to columns, indexes or queries;
-- workers of version 1 keep working beside workers of version 2.
ALTER TABLE venturi_job SET (
    autovacuum_vacuum_cost_delay = 0,
    autovacuum_vacuum_insert_scale_factor = 0.02,
    autovacuum_vacuum_insert_threshold = 1000
);

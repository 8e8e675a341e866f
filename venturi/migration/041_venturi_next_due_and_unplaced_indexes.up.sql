-- venturi schema, version 41: two lookups that read the whole job table find their rows by
-- index.
--
-- Every claim batch asks when the next scheduled job (or a wait's timeout) of the worker's
-- kinds in its queue is due (NextDue). It read venturi_job_scheduled_due_idx in run_at
-- order and tested each entry's queue and kind: beside 1,000,000 scheduled jobs of another
-- kind (or queue) and none of its own, every claim walked all of them, 95,000 buffers and
-- 243 ms a claim, and a worker's drain of plain jobs fell from 55,399 to 2,168 jobs/s
-- (bench/FINDINGS.md section 32). These indexes lead with the queue and the kind, and
-- NextDue probes them once per kind: an index descent each, whatever else is scheduled.
--
-- PlaceUnplaced (once a minute) looks for available gated jobs without a place (vt), which
-- only an older worker leaves (migration 23's header): beside 1,000,000 blocked workflow
-- jobs its plan read the table, 113,000 buffers and 311 ms a call. A partial index holds
-- exactly those jobs, so it is empty but for an older worker's leftovers.
--
-- Rolling deploy: older workers' NextDue keeps its plan on the older indexes, which stay
-- (the promotion reads them in due order). The migration takes a SHARE lock on venturi_job
-- while it builds the three indexes (a scan of the table): enqueues, claims and finishes wait
-- for it meanwhile (about a second per million rows here).

CREATE INDEX venturi_job_scheduled_kind_idx ON venturi_job (queue, kind, run_at) WHERE state = 'scheduled';
CREATE INDEX venturi_job_waiting_kind_idx ON venturi_job (queue, kind, run_at) WHERE state = 'waiting';
CREATE INDEX venturi_job_unplaced_idx ON venturi_job (id) WHERE state = 'available' AND part IS NOT NULL AND vt IS NULL;

-- name: SetLocalStatsSettings :exec
-- The stats sample's transaction: every later statement bounded by ms, and planned without
-- JIT (the sample's counts over a large table are priced past jit_above_cost, and
-- PostgreSQL compiled them on every sample: ~150 ms of a core each, at 1M jobs).
SELECT set_config('statement_timeout', @ms::text, true),
       set_config('jit', 'off', true);

-- name: SetLocalIdleTimeout :exec
-- Ends the transaction (and its session) on the server once it has been idle between
-- statements for ms: a worker cut off by a half-open network must not keep the locks of a
-- transaction it can no longer finish. Also what SetLocalIndexScans sets, and that this
-- transaction's claims write the started events themselves (WriteStartedEvents;
-- venturi_event_write checks venturi.claim_started_events): the claim's transaction starts
-- with this one statement.
SELECT set_config('idle_in_transaction_session_timeout', @ms::text, true),
       set_config('enable_seqscan', 'off', true),
       set_config('jit', 'off', true),
       set_config('venturi.claim_started_events', 'on', true);

-- name: SetLocalIndexScans :exec
-- For the rest of the transaction (a pipeline's implicit one included), plans reach rows
-- by index rather than by scanning whole tables. The statements of the claim, finish,
-- lease-extension, release and maintenance paths take a batch of jobs that an index finds;
-- PostgreSQL caches their plans per connection, and a plan made while venturi_job was
-- (nearly) empty, in a fresh schema's first seconds, scanned the whole table for every
-- batch however large the table grew, until autovacuum's first ANALYZE replaced it: a
-- worker fell 56,000 jobs behind in the first 10 s of a 10,000 jobs/s load
-- (bench/FINDINGS.md section 14). And without JIT: a plan that kept a table scan would be
-- priced past jit_above_cost by the disabled scan and compiled on every call (0.4-0.9 s:
-- section 21); these statements read a batch of rows and never gain from it.
SELECT set_config('enable_seqscan', 'off', true),
       set_config('jit', 'off', true);

-- name: BoundLocalIdleTimeout :exec
-- Bounds how long the rest of the transaction may sit idle between statements to ms,
-- unless a shorter bound is set already (the setting reads as an interval: '0', '1s',
-- '1500ms', '5min'; 0 is none). Run.CompleteTx sends it in the caller's transaction with
-- the run's result: from then on that transaction holds the job's row, which no other
-- worker can rescue while it is held, so a caller cut off by a half-open network before
-- its COMMIT must not keep it until the network heals.
SELECT set_config('idle_in_transaction_session_timeout', (CASE
    WHEN cur.ms = 0 THEN @ms::bigint ELSE least(cur.ms, @ms::bigint) END)::text, true)
FROM (SELECT (extract(epoch FROM current_setting('idle_in_transaction_session_timeout')::interval) * 1000)::bigint AS ms) cur;

-- name: TransactionIsolation :one
SELECT current_setting('transaction_isolation')::text AS isolation;

-- name: SetLocalFinishChannel :exec
-- A finish's transaction (a pipeline's implicit one included) names the jobs' wake-up
-- channel ('' for none): the ends of workflow members it writes then settle their
-- workflows at once when no other transaction holds them (venturi_workflow_note), and the
-- kinds of the jobs they release are told on channel.
SELECT set_config('venturi.finish_channel', 'on:' || @channel::text, true);

-- name: SetLocalFinish :exec
-- A worker's plain finish pipeline, first: SetLocalIndexScans and SetLocalFinishChannel
-- in one statement, and that FinishRuns writes the inbox rows of the workflow members it
-- moves (venturi_workflow_delete skips them while venturi.finish_inbox is on).
SELECT set_config('enable_seqscan', 'off', true),
       set_config('jit', 'off', true),
       set_config('venturi.finish_channel', 'on:' || @channel::text, true),
       set_config('venturi.finish_inbox', 'on', true);

-- venturi schema, version 35: a batch enqueue from SQL takes its dedup keys' locks in one
-- order.
--
-- venturi_enqueue_many took each dedup key's lock as it reached the job, in the order the
-- batch listed them: two batches naming two keys in opposite orders waited on each other
-- until PostgreSQL failed one with a deadlock (40P01; found by the chaos suite's SQL
-- producer). It now takes every key's lock first, ordered by kind, then key (bytewise),
-- the order Queue.EnqueueMany uses too.
--
-- Rolling deploy: the function's arguments and results are unchanged. Older Go workers'
-- EnqueueMany takes its keys in the batch's order: beside this version's batches, such a
-- batch can still deadlock (and fail, retryable, with nothing written) until it is
-- upgraded.

CREATE OR REPLACE FUNCTION venturi_enqueue_many(jobs jsonb)
 RETURNS TABLE(ord integer, id uuid, action text)
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_job    jsonb;
    v_n      bigint;
    v_call   text;
    v_field  text;
    v_run_at timestamptz;
    v_delay  interval;
    v_r      record;
BEGIN
    IF jobs IS NULL OR jsonb_typeof(jobs) <> 'array' THEN
        PERFORM venturi_api_refuse('venturi_enqueue_many', 'jobs', '22023', 'must be a JSON array of objects',
            format('got %s', COALESCE('a JSON ' || jsonb_typeof(jobs), 'NULL')));
    END IF;
    -- The dedup keys' locks, all taken first in one order (kind, then key, bytewise: as
    -- Queue.EnqueueMany takes them), so that two batches naming the same keys in opposite
    -- orders, or a batch beside a Go batch, queue behind each other instead of deadlocking.
    -- venturi_enqueue_one takes each again (a lock held is taken at once).
    PERFORM pg_advisory_xact_lock(hashtextextended(current_schema() || '.' || k.kind || '/' || k.key, 0))
    FROM (SELECT DISTINCT x.job ->> 'kind' AS kind, NULLIF(x.job ->> 'dedup_key', '') AS key
          FROM jsonb_array_elements(jobs) AS x(job)
          WHERE jsonb_typeof(x.job) = 'object' AND jsonb_typeof(x.job -> 'kind') = 'string'
            AND jsonb_typeof(x.job -> 'dedup_key') = 'string') k
    WHERE k.key IS NOT NULL
    ORDER BY k.kind COLLATE "C", k.key COLLATE "C";
    FOR v_job, v_n IN SELECT x.job, x.n FROM jsonb_array_elements(jobs) WITH ORDINALITY AS x(job, n) LOOP
        v_call := format('venturi_enqueue_many: jobs[%s]', v_n - 1);
        IF jsonb_typeof(v_job) <> 'object' THEN
            PERFORM venturi_api_refuse(v_call, 'job', '22023', 'must be a JSON object', format('got a JSON %s', jsonb_typeof(v_job)));
        END IF;
        SELECT k INTO v_field FROM jsonb_object_keys(v_job) AS k
        WHERE k <> ALL (ARRAY['kind', 'payload', 'queue', 'priority', 'run_at', 'delay', 'dedup_key', 'meta', 'events',
                              'partition', 'slot_key', 'slot_limit', 'slot_policy'])
        LIMIT 1;
        IF v_field IS NOT NULL THEN
            PERFORM venturi_api_refuse(v_call, v_field, '22023', 'is not a field of a job', NULL);
        END IF;
        SELECT k INTO v_field FROM unnest(ARRAY['kind', 'queue', 'run_at', 'dedup_key', 'partition', 'slot_key', 'slot_policy']) AS k
        WHERE jsonb_typeof(v_job -> k) NOT IN ('string', 'null')
        LIMIT 1;
        IF v_field IS NOT NULL THEN
            PERFORM venturi_api_refuse(v_call, v_field, '22023', 'must be a JSON string', format('got a JSON %s', jsonb_typeof(v_job -> v_field)));
        END IF;
        SELECT k INTO v_field FROM unnest(ARRAY['priority', 'slot_limit']) AS k
        WHERE jsonb_typeof(v_job -> k) NOT IN ('number', 'null')
           OR (jsonb_typeof(v_job -> k) = 'number' AND ((v_job ->> k)::numeric <> trunc((v_job ->> k)::numeric)
                                                         OR abs((v_job ->> k)::numeric) > 2147483647))
        LIMIT 1;
        IF v_field IS NOT NULL THEN
            PERFORM venturi_api_refuse(v_call, v_field, '22023', 'must be a whole JSON number', format('got %s', v_job -> v_field));
        END IF;
        IF jsonb_typeof(v_job -> 'events') NOT IN ('boolean', 'null') THEN
            PERFORM venturi_api_refuse(v_call, 'events', '22023', 'must be a JSON boolean', format('got %s', v_job -> 'events'));
        END IF;
        v_run_at := NULL;
        IF jsonb_typeof(v_job -> 'run_at') = 'string' THEN
            BEGIN
                v_run_at := (v_job ->> 'run_at')::timestamptz;
            EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow THEN
                PERFORM venturi_api_refuse(v_call, 'run_at', '22007', 'is not a time', format('got %s', v_job -> 'run_at'));
            END;
        END IF;
        v_delay := NULL;
        IF jsonb_typeof(v_job -> 'delay') = 'number' AND abs((v_job ->> 'delay')::numeric) > 1e10 THEN
            PERFORM venturi_api_refuse(v_call, 'delay', '22003', 'is out of range (at most 1e10 seconds)',
                format('got %s', v_job -> 'delay'));
        END IF;
        IF jsonb_typeof(v_job -> 'delay') IN ('number', 'string') THEN
            BEGIN
                v_delay := CASE jsonb_typeof(v_job -> 'delay')
                    WHEN 'number' THEN make_interval(secs => (v_job ->> 'delay')::double precision)
                    ELSE (v_job ->> 'delay')::interval END;
            EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR interval_field_overflow
                           OR numeric_value_out_of_range THEN
                PERFORM venturi_api_refuse(v_call, 'delay', '22007', 'is not an interval', format('got %s', v_job -> 'delay'));
            END;
        ELSIF jsonb_typeof(v_job -> 'delay') <> 'null' THEN
            PERFORM venturi_api_refuse(v_call, 'delay', '22023', 'must be an interval as text or seconds as a number',
                format('got %s', v_job -> 'delay'));
        END IF;
        SELECT e.id, e.action INTO v_r
        FROM venturi_enqueue_one(v_call, v_job ->> 'kind', COALESCE(v_job -> 'payload', '{}'::jsonb),
                                 COALESCE(v_job ->> 'queue', 'default'), COALESCE((v_job ->> 'priority')::numeric::integer, 0),
                                 v_run_at, v_delay, v_job ->> 'dedup_key', NULLIF(v_job -> 'meta', 'null'::jsonb),
                                 COALESCE((v_job ->> 'events')::boolean, false), v_job ->> 'partition',
                                 v_job ->> 'slot_key', (v_job ->> 'slot_limit')::numeric::integer, v_job ->> 'slot_policy') e;
        ord := v_n - 1;
        id := v_r.id;
        action := v_r.action;
        RETURN NEXT;
    END LOOP;
END
$function$;

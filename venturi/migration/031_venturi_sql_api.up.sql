-- venturi schema, version 31: the SQL API, version 1 (venturi_sql_api_version() = 1).
-- Enqueue, cancel, signal and read jobs from SQL: any client, a trigger (a transactional
-- outbox), a producer in another language. The functions below are the API; the README's
-- "Enqueue from SQL" documents their arguments, results and errors.
--
--   venturi_enqueue(kind, payload, queue, priority, run_at, delay, dedup_key, meta, events,
--                   partition, slot_key, slot_limit, slot_policy) -> (id, action)
--   venturi_enqueue_many(jobs jsonb) -> (ord, id, action) per job
--   venturi_cancel(id, reason) -> text; venturi_cancel_by_key(kind, dedup_key, reason)
--   venturi_signal(id, name, payload, delivery_id) -> text
--   venturi_job_status(id) -> one row: state, runs, the last entry, ...
--   venturi_sql_api_version() -> 1
--
-- An enqueue from SQL validates what a Go enqueue validates (kind, queue, sizes, the
-- partition and slot, metadata), refuses with a SQLSTATE of class 22 (55000 for a dedup
-- key outside READ COMMITTED), a message naming the field and the field in the error's
-- COLUMN, and writes nothing. It writes the row a Go enqueue writes (gated by its
-- partition, slot or its kind's limits: the insert trigger gives it its virtual time) and
-- sends the same wake-up NOTIFY (debounced per session; none when the session or the
-- transaction sets venturi.notify = off), in the caller's transaction.
--
-- Dedup: under the Go path's advisory lock on (kind, key), a collision with a pending job
-- applies the kind's merge as its workers recorded it in venturi_kind, here, as MergeInto
-- applies it: merge = 'replace' (a type without a merge method, or with a MergeRule that
-- replaces) or 'keep' (a MergeRule that keeps), with its due-time rule (merge_due 0
-- earliest, 1 keep, 2 debounce; merge_delay, merge_max_wait). A kind whose
-- merge is Go code (merge = 'go'), or that no worker of this version registered (merge
-- NULL), cannot be decided in SQL: the enqueue is stored in venturi_deferred_merge, and a
-- process that knows the type (a worker that registered the kind, woken on
-- venturi_merge_channel(), or a Go enqueue of the same key) applies it through the Go
-- merge, in order, under the key's lock. While a key has deferred enqueues, every enqueue
-- of it (SQL or Go) goes behind them. Supervised singleton kinds (venturi_kind.singleton)
-- are refused, as Queue.Enqueue refuses them.
--
-- The API's functions run with the search_path this migration ran with (SET search_path
-- FROM CURRENT, venturi's schema), so a trigger in another schema calls them qualified and
-- they, and the triggers their writes fire, find venturi's tables. The helpers they call
-- (venturi_enqueue_one, venturi_wake, the channels) run in the caller's search_path,
-- theirs: a SET clause costs some 30 microseconds a call.
--
-- Rolling deploy: additive (a table, columns with defaults, new functions; nothing older
-- is redefined). Workers of the previous version keep working: they do not read the new
-- columns, their registrations leave merge NULL (collisions from SQL are then deferred,
-- which is always safe), and they do not apply deferred enqueues (a worker of this
-- version, or a Go enqueue of the key from this version, does). A Go enqueue of the
-- previous version does not look for deferred enqueues: while both versions enqueue one
-- key, one of its enqueues may be applied before a deferred one that preceded it.

-- What a dedup collision from SQL does for the kind, as the workers that register it
-- record it (see above); and whether the kind is a supervised singleton.
ALTER TABLE venturi_kind
    ADD COLUMN merge          text     CHECK (merge IN ('replace', 'keep', 'go')),
    ADD COLUMN merge_due      smallint NOT NULL DEFAULT 0 CHECK (merge_due BETWEEN 0 AND 2),
    ADD COLUMN merge_delay    interval NOT NULL DEFAULT '0',
    ADD COLUMN merge_max_wait interval NOT NULL DEFAULT '0',
    ADD COLUMN singleton      boolean  NOT NULL DEFAULT false;

-- Enqueues from SQL that collided with a pending job of a kind whose merge only Go can
-- decide, waiting, in seq order per key, for a process that knows the type. Normally
-- empty. id is the enqueue's ID: its job's, if the merge inserts it.
CREATE TABLE venturi_deferred_merge (
    seq         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id          uuid        NOT NULL,
    kind        text        NOT NULL,
    dedup_key   text        NOT NULL,
    queue       text        NOT NULL,
    priority    smallint    NOT NULL,
    payload     jsonb       NOT NULL,
    -- The due time asked for (run_at and delay); NULL: due when the merge is applied.
    run_at      timestamptz,
    -- The partition or slot key named (not the '' of a kind with limits).
    part        text,
    slot_key    text,
    slot_limit  integer,
    slot_policy smallint,
    events      boolean     NOT NULL,
    meta        jsonb,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX venturi_deferred_merge_key_idx ON venturi_deferred_merge (kind, dedup_key, seq);

-- The version of the SQL API this schema provides.
CREATE FUNCTION venturi_sql_api_version() RETURNS integer LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT 1 $$;

-- A new ULID as a uuid: the database clock's milliseconds, then 80 random bits. Within a
-- session the IDs increase (same millisecond: the last one's random bits plus one), as
-- ulid.Make's do within a process, so that jobs enqueued one after another are claimed in
-- that order.
CREATE FUNCTION venturi_ulid_make() RETURNS uuid LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_ms   bigint := floor(extract(epoch FROM clock_timestamp()) * 1000);
    v_last text   := current_setting('venturi.ulid_last', true);
    v_hex  text;
    v_hi   bigint; -- the random bits' top 20
    v_lo   bigint; -- and their other 60, below 2^59 when drawn: room to count up
BEGIN
    IF v_last <> '' AND split_part(v_last, ':', 1)::bigint >= v_ms THEN
        v_ms := split_part(v_last, ':', 1)::bigint;
        v_hi := split_part(v_last, ':', 2)::bigint;
        v_lo := split_part(v_last, ':', 3)::bigint + 1;
    ELSE
        v_hex := replace(gen_random_uuid()::text, '-', ''); -- 122 random bits (version 4)
        v_hi := ('x' || substr(v_hex, 1, 5))::bit(20)::bigint;
        v_lo := ('x' || substr(v_hex, 18, 15))::bit(60)::bigint & 576460752303423487;
    END IF;
    PERFORM set_config('venturi.ulid_last', v_ms || ':' || v_hi || ':' || v_lo, false);
    RETURN (lpad(to_hex(v_ms), 12, '0') || lpad(to_hex(v_hi), 5, '0') || lpad(to_hex(v_lo), 15, '0'))::uuid;
END
$$;

-- A ULID (stored as a uuid) in its text form, as Go's ulid.ULID.String and the dashboard
-- and CLI print it: 26 characters of Crockford's base32.
CREATE FUNCTION venturi_ulid_text(id uuid) RETURNS text LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT string_agg(substr('0123456789ABCDEFGHJKMNPQRSTVWXYZ', substring(b FROM i * 5 + 1 FOR 5)::integer + 1, 1), '' ORDER BY i)
    FROM (SELECT B'00' || ('x' || replace(id::text, '-', ''))::bit(128) AS b) s, generate_series(0, 25) AS i
$$;

-- The workers' wake-up channel, named as the Go side names it after a pool's search_path
-- (queue.go, notifyChannel): 'venturi_insert.' and the schema, cut to 63 bytes. Called with
-- venturi's schema first on the search_path, as the API's functions call it.
CREATE FUNCTION venturi_wake_channel() RETURNS text LANGUAGE plpgsql STABLE AS $$
DECLARE
    v text := 'venturi_insert.' || current_schema();
BEGIN
    WHILE octet_length(v) > 63 LOOP
        v := left(v, -1);
    END LOOP;
    RETURN v;
END
$$;

-- The channel on which an enqueue from SQL that waits for a Go merge wakes the workers
-- (with venturi's schema first on the search_path).
CREATE FUNCTION venturi_merge_channel() RETURNS text LANGUAGE sql STABLE
AS $$ SELECT 'venturi_merge_' || md5(current_schema()) $$;

-- Wakes the workers of kind: a job due now (p_due) or later was committed. Debounced per
-- session and payload, as a Go Queue debounces per process (QueueConfig.NotifyEvery, 2ms):
-- a NOTIFY serializes the commits that send one, cluster-wide, and the workers it wakes
-- keep fetching while they find work. A session or transaction that sets venturi.notify
-- to off sends none (QueueConfig.NoNotify): workers find its jobs by polling.
CREATE FUNCTION venturi_wake(p_kind text, p_due boolean) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_payload text   := CASE WHEN p_due THEN p_kind ELSE '@' || p_kind END;
    v_now     bigint := floor(extract(epoch FROM clock_timestamp()) * 1000000);
    v_last    text   := current_setting('venturi.wake_last', true);
    v_cut     integer;
BEGIN
    IF current_setting('venturi.notify', true) IN ('off', 'false') THEN
        RETURN;
    END IF;
    IF v_last <> '' THEN
        v_cut := position(':' IN v_last);
        IF substr(v_last, v_cut + 1) = v_payload AND v_now - left(v_last, v_cut - 1)::bigint < 2000 THEN
            RETURN;
        END IF;
    END IF;
    PERFORM set_config('venturi.wake_last', v_now || ':' || v_payload, false);
    PERFORM pg_notify(venturi_wake_channel(), v_payload);
END
$$;

-- Refuses an argument of a call of the SQL API: SQLSTATE p_code, a message naming the
-- call and the field, the field in the error's COLUMN.
CREATE FUNCTION venturi_api_refuse(p_call text, p_field text, p_code text, p_message text, p_detail text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF p_detail IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = p_code, MESSAGE = p_call || ': ' || p_field || ': ' || p_message,
            COLUMN = p_field, HINT = 'See "Enqueue from SQL" in venturi''s README.';
    END IF;
    RAISE EXCEPTION USING ERRCODE = p_code, MESSAGE = p_call || ': ' || p_field || ': ' || p_message,
        DETAIL = p_detail, COLUMN = p_field, HINT = 'See "Enqueue from SQL" in venturi''s README.';
END
$$;

-- Cuts a text to at most p_max bytes, at a character boundary.
CREATE FUNCTION venturi_text_cut(p_text text, p_max integer) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_n integer := least(length(p_text), p_max);
BEGIN
    WHILE octet_length(left(p_text, v_n)) > p_max LOOP
        v_n := v_n - 1;
    END LOOP;
    RETURN left(p_text, v_n);
END
$$;

-- One enqueue: validates, then inserts, merges (Keep, Replace) or defers, and wakes the
-- workers. p_call names the call in errors ('venturi_enqueue', or a job of
-- venturi_enqueue_many). Returns the ID of the job that holds the task (for 'deferred':
-- the pending job the task collided with, or the task's own ID when it waits behind other
-- deferred enqueues of its key) and the action: inserted, replaced, kept or deferred.
CREATE FUNCTION venturi_enqueue_one(
    p_call text, p_kind text, p_payload jsonb, p_queue text, p_priority integer,
    p_run_at timestamptz, p_delay interval, p_dedup_key text, p_meta jsonb, p_events boolean,
    p_partition text, p_slot_key text, p_slot_limit integer, p_slot_policy text,
    OUT id uuid, OUT action text)
LANGUAGE plpgsql AS $$
DECLARE
    v_key       text     := NULLIF(p_dedup_key, '');
    v_meta      jsonb    := NULLIF(p_meta, '{}'::jsonb);
    v_partition text     := NULLIF(p_partition, '');
    v_slot_key  text     := NULLIF(p_slot_key, '');
    v_slot_lim  integer;
    v_slot_pol  smallint;
    v_part      text;    -- the partition, else the slot key (NULL: none named)
    v_gate      text;    -- the row's part: v_part, or '' for a kind with limits
    v_limited   boolean  := false;
    v_merge     text;
    v_due       smallint := 0;
    v_delay     interval := '0';
    v_max_wait  interval := '0';
    v_singleton boolean  := false;
    v_at        timestamptz;
    v_due_now   boolean;
    v_id        uuid;
    v_replace   boolean;
    v_new_at    timestamptz;
    v_burst     timestamptz;
    v_queue     text;
    v_priority  smallint;
    v_new_part  text;
    v_available boolean;
    v_cand      uuid;    -- the pending job with the key (NULL: none)
    c           record;  -- its columns
BEGIN
    IF p_kind IS NULL THEN
        PERFORM venturi_api_refuse(p_call, 'kind', '22004', 'must not be NULL', NULL);
    ELSIF p_kind = '' THEN
        PERFORM venturi_api_refuse(p_call, 'kind', '22023', 'must not be empty', NULL);
    ELSIF octet_length(p_kind) > 128 THEN
        PERFORM venturi_api_refuse(p_call, 'kind', '22001', 'is longer than 128 bytes',
            format('%s bytes', octet_length(p_kind)));
    END IF;
    IF p_payload IS NULL THEN
        PERFORM venturi_api_refuse(p_call, 'payload', '22004', 'must not be NULL (a JSON value; ''{}'' for none)', NULL);
    ELSIF octet_length(p_payload::text) > 1048576 THEN
        PERFORM venturi_api_refuse(p_call, 'payload', '22001', 'is larger than 1048576 bytes (MaxPayloadBytes)',
            format('%s bytes as text', octet_length(p_payload::text)));
    END IF;
    IF p_queue IS NULL THEN
        PERFORM venturi_api_refuse(p_call, 'queue', '22004', 'must not be NULL', NULL);
    ELSIF p_queue = '' THEN
        PERFORM venturi_api_refuse(p_call, 'queue', '22023', 'must not be empty', NULL);
    ELSIF octet_length(p_queue) > 128 THEN
        PERFORM venturi_api_refuse(p_call, 'queue', '22001', 'is longer than 128 bytes',
            format('%s bytes', octet_length(p_queue)));
    END IF;
    IF p_priority IS NULL THEN
        PERFORM venturi_api_refuse(p_call, 'priority', '22004', 'must not be NULL', NULL);
    ELSIF p_priority NOT BETWEEN -1000 AND 1000 THEN
        PERFORM venturi_api_refuse(p_call, 'priority', '22003', 'must be between -1000 and 1000',
            format('got %s', p_priority));
    END IF;
    IF NOT isfinite(p_run_at) THEN
        PERFORM venturi_api_refuse(p_call, 'run_at', '22023', 'must be a finite time', format('got %s', p_run_at));
    END IF;
    IF p_delay < interval '0' THEN
        PERFORM venturi_api_refuse(p_call, 'delay', '22023', 'must not be negative (run_at names a time in the past)',
            format('got %s', p_delay));
    END IF;
    IF octet_length(v_key) > 512 THEN
        PERFORM venturi_api_refuse(p_call, 'dedup_key', '22001', 'is longer than 512 bytes',
            format('%s bytes', octet_length(v_key)));
    END IF;
    IF v_meta IS NOT NULL THEN
        IF jsonb_typeof(v_meta) <> 'object' THEN
            PERFORM venturi_api_refuse(p_call, 'meta', '22023', 'must be a JSON object of strings',
                format('got a JSON %s', jsonb_typeof(v_meta)));
        ELSIF EXISTS (SELECT 1 FROM jsonb_each(v_meta) e WHERE jsonb_typeof(e.value) <> 'string') THEN
            PERFORM venturi_api_refuse(p_call, 'meta', '22023', 'must be a JSON object of strings',
                (SELECT format('%s is a JSON %s', to_jsonb(e.key), jsonb_typeof(e.value))
                 FROM jsonb_each(v_meta) e WHERE jsonb_typeof(e.value) <> 'string' LIMIT 1));
        ELSIF octet_length(v_meta::text) > 8192 THEN
            PERFORM venturi_api_refuse(p_call, 'meta', '22001', 'is larger than 8192 bytes (MaxMetaBytes)',
                format('%s bytes as text', octet_length(v_meta::text)));
        END IF;
    END IF;
    IF octet_length(v_partition) > 256 THEN
        PERFORM venturi_api_refuse(p_call, 'partition', '22001', 'is longer than 256 bytes',
            format('%s bytes', octet_length(v_partition)));
    ELSIF position(chr(31) IN v_partition) > 0 THEN
        PERFORM venturi_api_refuse(p_call, 'partition', '22023', 'must not contain U+001F', NULL);
    END IF;
    IF v_slot_key IS NULL THEN
        IF p_slot_limit IS NOT NULL THEN
            PERFORM venturi_api_refuse(p_call, 'slot_limit', '22023', 'needs a slot_key', NULL);
        ELSIF p_slot_policy IS NOT NULL THEN
            PERFORM venturi_api_refuse(p_call, 'slot_policy', '22023', 'needs a slot_key', NULL);
        END IF;
    ELSE
        IF octet_length(v_slot_key) > 256 THEN
            PERFORM venturi_api_refuse(p_call, 'slot_key', '22001', 'is longer than 256 bytes',
                format('%s bytes', octet_length(v_slot_key)));
        ELSIF position(chr(31) IN v_slot_key) > 0 THEN
            PERFORM venturi_api_refuse(p_call, 'slot_key', '22023', 'must not contain U+001F', NULL);
        ELSIF v_slot_key LIKE 'venturi.singleton:%' THEN
            PERFORM venturi_api_refuse(p_call, 'slot_key', '22023', 'is reserved for supervised singletons',
                format('got %s', v_slot_key));
        END IF;
        IF p_slot_limit < 0 THEN
            PERFORM venturi_api_refuse(p_call, 'slot_limit', '22023', 'must not be negative', format('got %s', p_slot_limit));
        END IF;
        v_slot_lim := greatest(COALESCE(p_slot_limit, 1), 1);
        v_slot_pol := CASE COALESCE(p_slot_policy, 'queue') WHEN 'queue' THEN 0 WHEN 'replace' THEN 1 WHEN 'drop_if_running' THEN 2 END;
        IF v_slot_pol IS NULL THEN
            PERFORM venturi_api_refuse(p_call, 'slot_policy', '22023', 'must be queue, replace or drop_if_running',
                format('got %s', p_slot_policy));
        END IF;
    END IF;

    SELECT k.limited, k.merge, k.merge_due, k.merge_delay, k.merge_max_wait, k.singleton
    INTO v_limited, v_merge, v_due, v_delay, v_max_wait, v_singleton
    FROM venturi_kind k WHERE k.kind = p_kind;
    IF v_singleton THEN
        PERFORM venturi_api_refuse(p_call, 'kind', '22023', 'is a supervised singleton: its workers keep its one job',
            format('kind %s', p_kind));
    END IF;
    v_part := COALESCE(v_partition, v_slot_key);
    v_gate := COALESCE(v_part, CASE WHEN v_limited THEN '' END);
    v_at := COALESCE(p_run_at, now()) + COALESCE(p_delay, interval '0');
    v_due_now := p_run_at IS NULL AND COALESCE(p_delay, interval '0') = interval '0';
    v_id := venturi_ulid_make();

    IF v_key IS NOT NULL THEN
        IF current_setting('transaction_isolation') <> 'read committed' THEN
            PERFORM venturi_api_refuse(p_call, 'dedup_key', '55000', 'needs a READ COMMITTED transaction',
                format('the transaction is %s', current_setting('transaction_isolation')));
        END IF;
        -- The Go path's lock (DedupLock): enqueues of one (kind, key) are serialized, and
        -- each statement below takes a snapshot after it.
        PERFORM pg_advisory_xact_lock(hashtextextended(current_schema() || '.' || p_kind || '/' || v_key, 0));
        SELECT j.id, j.state, j.run_at, j.queue, j.priority, j.part, j.runs, j.burst_at, j.burst_run, j.created_at
        INTO c
        FROM venturi_job j
        WHERE j.kind = p_kind AND j.dedup_key = v_key AND j.state IN ('scheduled', 'available')
        ORDER BY j.id DESC
        LIMIT 1
        FOR UPDATE;
        v_cand := c.id;
        IF (v_cand IS NOT NULL AND COALESCE(v_merge, 'go') = 'go')
           OR EXISTS (SELECT 1 FROM venturi_deferred_merge d WHERE d.kind = p_kind AND d.dedup_key = v_key) THEN
            INSERT INTO venturi_deferred_merge (id, kind, dedup_key, queue, priority, payload, run_at, part,
                                                slot_key, slot_limit, slot_policy, events, meta)
            VALUES (v_id, p_kind, v_key, p_queue, p_priority, p_payload, CASE WHEN NOT v_due_now THEN v_at END, v_part,
                    v_slot_key, v_slot_lim, v_slot_pol, COALESCE(p_events, false), v_meta);
            PERFORM pg_notify(venturi_merge_channel(), p_kind);
            id := COALESCE(v_cand, v_id);
            action := 'deferred';
            RETURN;
        END IF;
    END IF;

    IF v_cand IS NULL THEN
        INSERT INTO venturi_job (id, kind, queue, state, priority, dedup_key, payload, run_at, part,
                                 slot_key, slot_limit, slot_policy, events, meta)
        VALUES (v_id, p_kind, p_queue, CASE WHEN v_at <= now() THEN 'available' ELSE 'scheduled' END::venturi_job_state,
                p_priority, v_key, p_payload, v_at, v_gate, v_slot_key, v_slot_lim, v_slot_pol,
                COALESCE(p_events, false), v_meta);
        PERFORM venturi_wake(p_kind, v_due_now);
        id := v_id;
        action := 'inserted';
        RETURN;
    END IF;

    -- Keep or Replace, with the kind's due-time rule, as MergeInto applies them
    -- (internal/dbsqlc/queries/dedup.sql).
    v_replace := v_merge = 'replace';
    v_burst := CASE WHEN c.burst_run = c.runs THEN c.burst_at WHEN c.runs = 0 THEN c.created_at ELSE now() END;
    v_new_at := CASE v_due
        WHEN 1 THEN c.run_at
        WHEN 2 THEN CASE WHEN v_max_wait > interval '0' THEN least(now() + v_delay, v_burst + v_max_wait)
                         ELSE now() + v_delay END
        ELSE least(c.run_at, v_at) END;
    v_queue := CASE WHEN v_replace THEN p_queue ELSE c.queue END;
    v_priority := CASE WHEN v_replace THEN p_priority ELSE c.priority END;
    v_new_part := CASE WHEN v_replace THEN v_gate ELSE c.part END;
    UPDATE venturi_job j SET
        payload     = CASE WHEN v_replace THEN p_payload ELSE j.payload END,
        priority    = v_priority,
        carry       = CASE WHEN v_replace THEN NULL ELSE j.carry END,
        queue       = v_queue,
        part        = v_new_part,
        slot_key    = CASE WHEN v_replace THEN v_slot_key ELSE j.slot_key END,
        slot_limit  = CASE WHEN v_replace THEN v_slot_lim ELSE j.slot_limit END,
        slot_policy = CASE WHEN v_replace THEN v_slot_pol ELSE j.slot_policy END,
        run_at      = v_new_at,
        state       = CASE WHEN v_new_at <= now() THEN 'available' ELSE 'scheduled' END::venturi_job_state,
        -- A gated job that becomes due, or that moves to another queue, partition or
        -- priority, takes its place behind its partition's pending jobs.
        vt          = CASE
            WHEN v_new_at > now() THEN j.vt
            WHEN j.state = 'available' AND j.vt IS NOT NULL AND j.queue = v_queue AND j.priority = v_priority
                 AND j.part IS NOT DISTINCT FROM v_new_part THEN j.vt
            ELSE venturi_job_place(v_queue, v_new_part, v_priority) END,
        burst_at    = CASE WHEN v_due = 2 THEN v_burst ELSE j.burst_at END,
        burst_run   = CASE WHEN v_due = 2 THEN j.runs ELSE j.burst_run END,
        events      = j.events OR COALESCE(p_events, false),
        journal     = j.journal || jsonb_build_array(jsonb_build_object(
            'event', 'merged', 'note', 'merged enqueue ' || venturi_ulid_text(v_id),
            'merge', CASE WHEN v_replace THEN 'replace' ELSE 'keep' END,
            'due', CASE v_due WHEN 1 THEN 'keep' WHEN 2 THEN 'debounce' ELSE 'earliest' END,
            'at', now(), 'due_before', c.run_at, 'due_after', v_new_at))
    WHERE j.id = c.id
    RETURNING j.state = 'available' INTO v_available;
    IF v_replace OR v_due <> 1 THEN
        PERFORM venturi_wake(p_kind, v_available);
    END IF;
    id := c.id;
    action := CASE WHEN v_replace THEN 'replaced' ELSE 'kept' END;
END
$$;

-- Enqueues one job in the caller's transaction. Only kind is required; see the README,
-- "Enqueue from SQL".
CREATE FUNCTION venturi_enqueue(
    kind text, payload jsonb DEFAULT '{}', queue text DEFAULT 'default', priority integer DEFAULT 0,
    run_at timestamptz DEFAULT NULL, delay interval DEFAULT NULL, dedup_key text DEFAULT NULL,
    meta jsonb DEFAULT NULL, events boolean DEFAULT false, partition text DEFAULT NULL,
    slot_key text DEFAULT NULL, slot_limit integer DEFAULT NULL, slot_policy text DEFAULT NULL,
    OUT id uuid, OUT action text)
LANGUAGE sql SET search_path FROM CURRENT AS $$
    SELECT e.id, e.action
    FROM venturi_enqueue_one('venturi_enqueue', $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) e
$$;

-- Enqueues the jobs of a JSON array, in order, in the caller's transaction: each element
-- an object with venturi_enqueue's arguments as fields (kind required; run_at a time as
-- text, delay an interval as text or seconds as a number). One row per job: its position
-- (ord, from 0), the job's ID and the action. A refused job refuses them all.
CREATE FUNCTION venturi_enqueue_many(jobs jsonb) RETURNS TABLE (ord integer, id uuid, action text)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
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
$$;

-- Cancels job id, as Queue.Cancel does: a pending, blocked or waiting job ends cancelled
-- at once ('ended'); a running one is asked to stop ('requested'; its workers are told at
-- the commit); 'already' when it was cancelled or asked before; 'finished' for a
-- completed or dead job; 'not_found'. The reason is journaled (at most 1024 bytes).
CREATE FUNCTION venturi_cancel(id uuid, reason text DEFAULT NULL) RETURNS text
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_state venturi_job_state;
    v_note  text := venturi_text_cut(COALESCE(NULLIF(reason, ''), 'cancelled'), 1024);
BEGIN
    IF venturi_cancel.id IS NULL THEN
        PERFORM venturi_api_refuse('venturi_cancel', 'id', '22004', 'must not be NULL', NULL);
    END IF;
    SELECT j.state INTO v_state FROM venturi_job j WHERE j.id = venturi_cancel.id FOR UPDATE;
    IF NOT FOUND THEN
        -- Finished (in the history, read in a snapshot newer than any wait for the lock,
        -- which may have been for its move there), or unknown.
        SELECT h.state INTO v_state FROM venturi_job_history h WHERE h.id = venturi_cancel.id;
        IF NOT FOUND THEN
            RETURN 'not_found';
        END IF;
        RETURN CASE WHEN v_state = 'cancelled' THEN 'already' ELSE 'finished' END;
    END IF;
    IF v_state IN ('blocked', 'scheduled', 'available', 'waiting') THEN
        UPDATE venturi_job j SET state = 'cancelled', finished_at = now(),
            journal = j.journal || jsonb_build_array(jsonb_build_object('event', 'cancelled', 'note', v_note, 'at', now()))
        WHERE j.id = venturi_cancel.id;
        RETURN 'ended';
    ELSIF v_state = 'running' THEN
        UPDATE venturi_job j SET stop_requested_at = now(), stop_event = 'cancelled', stop_note = v_note
        WHERE j.id = venturi_cancel.id AND j.stop_event IS NULL;
        IF NOT FOUND THEN
            RETURN 'already';
        END IF;
        PERFORM pg_notify(venturi_wake_channel(), chr(31) || 'stop:cancelled:' || venturi_cancel.id::text);
        RETURN 'requested';
    ELSIF v_state = 'cancelled' THEN
        RETURN 'already';
    END IF;
    RETURN 'finished';
END
$$;

-- Cancels every pending, waiting or running job of kind with the dedup key, as
-- Queue.CancelByKey does: one row per job, with venturi_cancel's result.
CREATE FUNCTION venturi_cancel_by_key(kind text, dedup_key text, reason text DEFAULT NULL)
RETURNS TABLE (id uuid, result text)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_id uuid;
BEGIN
    FOR v_id IN
        SELECT t.id FROM venturi_job t
        WHERE t.kind = venturi_cancel_by_key.kind AND t.dedup_key = venturi_cancel_by_key.dedup_key
          AND t.state IN ('scheduled', 'available', 'running', 'waiting')
        ORDER BY t.id
    LOOP
        result := venturi_cancel(v_id, reason);
        IF result IN ('ended', 'requested', 'already') THEN
            id := v_id;
            RETURN NEXT;
        END IF;
    END LOOP;
END
$$;

-- Sends job id a signal, as Queue.Signal does: stored until a run of the job reads it; a
-- job waiting for name is woken. Returns 'woke', 'stored', 'duplicate' (the delivery ID
-- was delivered before: nothing changed), 'finished' (the job has ended: not delivered)
-- or 'not_found'. A NULL or empty delivery ID makes every send distinct.
CREATE FUNCTION venturi_signal(id uuid, name text, payload jsonb DEFAULT NULL, delivery_id text DEFAULT NULL)
RETURNS text LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_id       uuid  := venturi_signal.id;
    v_name     text  := venturi_signal.name;
    v_payload  jsonb := COALESCE(venturi_signal.payload, 'null'::jsonb);
    v_delivery text  := NULLIF(venturi_signal.delivery_id, '');
    v_state    venturi_job_state;
    v_kind     text;
    v_seq      bigint;
BEGIN
    IF v_id IS NULL THEN
        PERFORM venturi_api_refuse('venturi_signal', 'id', '22004', 'must not be NULL', NULL);
    END IF;
    IF v_name IS NULL OR v_name = '' THEN
        PERFORM venturi_api_refuse('venturi_signal', 'name', '22023', 'must not be empty', NULL);
    ELSIF octet_length(v_name) > 128 THEN
        PERFORM venturi_api_refuse('venturi_signal', 'name', '22001', 'is longer than 128 bytes',
            format('%s bytes', octet_length(v_name)));
    END IF;
    IF octet_length(v_delivery) > 256 THEN
        PERFORM venturi_api_refuse('venturi_signal', 'delivery_id', '22001', 'is longer than 256 bytes',
            format('%s bytes', octet_length(v_delivery)));
    END IF;
    IF octet_length(v_payload::text) > 1048576 THEN
        PERFORM venturi_api_refuse('venturi_signal', 'payload', '22001', 'is larger than 1048576 bytes (MaxPayloadBytes)',
            format('%s bytes as text', octet_length(v_payload::text)));
    END IF;
    SELECT j.state, j.kind INTO v_state, v_kind FROM venturi_job j WHERE j.id = v_id FOR UPDATE;
    IF NOT FOUND THEN
        -- Finished (in the history, read in a snapshot newer than any wait for the lock),
        -- or unknown.
        PERFORM 1 FROM venturi_job_history h WHERE h.id = v_id;
        RETURN CASE WHEN FOUND THEN 'finished' ELSE 'not_found' END;
    END IF;
    IF v_state IN ('completed', 'dead', 'cancelled') THEN
        RETURN 'finished';
    END IF;
    INSERT INTO venturi_signal AS s (job_id, name, payload, delivery_id)
    VALUES (v_id, v_name, v_payload, COALESCE(v_delivery, venturi_ulid_text(venturi_ulid_make())))
    ON CONFLICT ON CONSTRAINT venturi_signal_job_id_delivery_id_key DO NOTHING
    RETURNING s.seq INTO v_seq;
    IF v_seq IS NULL THEN
        RETURN 'duplicate';
    END IF;
    UPDATE venturi_job j SET state = 'available', run_at = now(), vt = venturi_job_place(j.queue, j.part, j.priority)
    WHERE j.id = v_id AND j.state = 'waiting' AND v_name = ANY (j.wait_signals);
    IF NOT FOUND THEN
        RETURN 'stored';
    END IF;
    PERFORM pg_notify(venturi_wake_channel(), v_kind);
    RETURN 'woke';
END
$$;

-- One job, pending or finished, read in one snapshot of venturi_job and the history
-- (venturi_job_all): no row for an unknown ID. last_event and last_note are the newest
-- journal entry's; journal holds the recent entries (Queue.Journal pages through older
-- ones); deferred_merges counts the enqueues from SQL of its kind and key that wait for a
-- Go merge.
CREATE FUNCTION venturi_job_status(id uuid)
RETURNS TABLE (ulid text, kind text, queue text, state text, priority integer, dedup_key text, payload jsonb,
               meta jsonb, run_at timestamptz, created_at timestamptz, attempted_at timestamptz,
               finished_at timestamptz, runs integer, failures integer, stop_requested boolean,
               last_event text, last_note text, journal_len bigint, journal jsonb, deferred_merges integer)
LANGUAGE sql STABLE SET search_path FROM CURRENT AS $$
    SELECT venturi_ulid_text(j.id), j.kind, j.queue, j.state::text, j.priority::integer, j.dedup_key, j.payload,
           j.meta, j.run_at, j.created_at, j.attempted_at, j.finished_at, j.runs, j.failures,
           j.stop_requested_at IS NOT NULL, j.journal -> -1 ->> 'event', j.journal -> -1 ->> 'note',
           j.journal_moved + jsonb_array_length(j.journal), j.journal,
           (SELECT count(*)::integer FROM venturi_deferred_merge d WHERE d.kind = j.kind AND d.dedup_key = j.dedup_key)
    FROM venturi_job_all j
    WHERE j.id = $1
$$;

-- venturi schema, version 32: the SQL API's wake-up is debounced across sessions.
--
-- venturi_wake (what venturi_enqueue and venturi_enqueue_many call after a write) debounced
-- its NOTIFY per session: eight sessions enqueueing one job per transaction notified in
-- nearly every transaction (7,655 of 13,041), and PostgreSQL serializes notifying commits
-- (a transaction that notified holds the notification queue's lock through its commit), so
-- eight SQL producers enqueued 2,263 jobs/s where Go's Enqueue, debounced per process, did
-- 7,389. Now, as Go's Queue does per process, the first transaction of a kind in each 2 ms
-- notifies and the others leave the wake-up to it: it takes a try-lock
-- (pg_try_advisory_xact_lock, never a wait) on the kind and the 2 ms it falls in; one that
-- finds it held skips. As with Go's debounce, a job whose wake-up was left to a transaction
-- that commits later is claimed when that one commits, or by the workers' next fetch.
--
-- Rolling deploy: the function's arguments and the payloads it sends are unchanged; older
-- workers receive the same notifications, fewer of them.

CREATE OR REPLACE FUNCTION venturi_wake(p_kind text, p_due boolean)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
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
    IF NOT pg_try_advisory_xact_lock(hashtextextended(current_schema() || '.venturi_wake/' || v_payload || '/' || (v_now / 2000)::text, 0)) THEN
        RETURN;
    END IF;
    PERFORM set_config('venturi.wake_last', v_now || ':' || v_payload, false);
    PERFORM pg_notify(venturi_wake_channel(), v_payload);
END
$function$;

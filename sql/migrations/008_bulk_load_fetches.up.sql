-- bookmarks application schema, version 8: bookmarks inserted from SQL get their fetch.
--
-- A bookmark that reaches the table without the API (an operator's psql \copy or
-- INSERT ... SELECT from another system, a data migration) is given, in the inserting
-- transaction, the jobs the API would have enqueued for it: its FetchBookmark and a
-- RebuildTagIndex of its tags, through venturi's SQL API (venturi_enqueue_many, schema 31).
-- The job exists if and only if the row commits: a rolled-back load enqueues nothing.
--
-- Which rows: those inserted with fetch_job_id NULL, import_id NULL and fetch_status
-- 'pending'. The API and the import worker enqueue in Go and insert their rows with the
-- job's ID (an import's workflow fetches its bookmarks itself: import_id set), so they
-- are left alone and never enqueued twice; a row loaded as already fetched or failed is a
-- result, not a request.
--
-- One statement trigger per INSERT, reading the statement's rows from its transition
-- table: a 5,000-row \copy makes one venturi_enqueue_many call and one UPDATE that points
-- the rows at their jobs (the worker fetches a bookmark only for the job fetch_job_id
-- names), not 5,000 trigger calls. An INSERT with no such row (every API insert) costs one
-- scan of its own rows.
--
-- A URL the fetcher could not take refuses the whole statement (SQLSTATE 23514, the first
-- bad row named, a count of the others): nothing is loaded without its fetch.
-- bookmark_url_problem(url) says what is wrong with a URL (NULL: nothing), to find or
-- filter such rows before loading. Each fetch's dedup key holds a lock until commit, so a
-- transaction can enqueue only as many as PostgreSQL's lock table holds (a few thousand on
-- a default server): beyond, the statement fails (SQLSTATE 53200) and says to load in
-- batches. bookmarks-worker/README.md, "Bulk loads from SQL", shows both.
--
-- Rolling deploy: the migration adds functions and a trigger and rewrites nothing. Older
-- API processes insert with fetch_job_id set and older workers with the job's ID or an
-- import_id, so the trigger skips their rows as it skips the new ones'. The jobs it
-- enqueues are the ones the Go code enqueues (same kinds, queue, keys, payloads), so any
-- worker that serves the kinds runs them. A tag-index rebuild that collides with a pending
-- one waits in venturi_deferred_merge for a worker that merges it in Go (venturi schema 31
-- or later); until one runs it waits, and nothing is lost.

-- bookmark_url_host is the host a URL's fetches are polite to, as Go's tasks.FetchHost
-- computes it for the URLs bookmark_url_problem accepts: the authority's host name without
-- the port, one trailing dot or an IPv6 literal's brackets, its ASCII letters lower-cased
-- (FetchHost lower-cases the others too; the API stores hosts lower-cased, so load them so).
-- NULL when the URL has no such authority.
CREATE FUNCTION bookmark_url_host(url text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    m text[];
BEGIN
    m := regexp_match(url, '^[A-Za-z]+://(?:\[([0-9A-Fa-f:.]+)\]|([^/?#@:\[\]]*))(?::[0-9]*)?(?:[/?#]|$)');
    RETURN regexp_replace(lower(COALESCE(m[1], m[2]) COLLATE "C"), '\.$', '');
END
$$;

-- bookmark_url_problem says why a bookmark's URL cannot be loaded from SQL, or returns NULL
-- when it can: what POST /bookmarks refuses (an absolute http or https URL with a host, no
-- credentials, a port from 1 to 65535, no whitespace or control characters), and what would
-- make the host its fetches are polite to differ from the one Go computes (a
-- percent-encoded host, an IPv6 zone, a host over 250 bytes). The worker's fetcher still
-- judges the address (a refused address or a non-canonical IPv4 host ends the bookmark
-- failed, as it does for the API's bookmarks).
CREATE FUNCTION bookmark_url_problem(url text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SET search_path FROM CURRENT AS $$
DECLARE
    m text[];
BEGIN
    IF url IS NULL OR url = '' THEN
        RETURN 'is required';
    ELSIF octet_length(url) > 2048 THEN
        RETURN 'must be at most 2048 bytes';
    ELSIF url ~ '[[:space:]\x01-\x1f\x7f-\x9f]' THEN
        RETURN 'must not contain whitespace or control characters';
    END IF;
    m := regexp_match(url, '^[Hh][Tt][Tt][Pp][Ss]?://([^/?#]*)');
    IF m IS NULL THEN
        RETURN 'must be an absolute http or https URL';
    ELSIF strpos(m[1], '@') > 0 THEN
        RETURN 'must not contain credentials';
    END IF;
    m := regexp_match(m[1], '^(?:\[[0-9A-Fa-f:.]+\]|(?:[-A-Za-z0-9._~!$&''()*+,;=]|[^\x01-\x7f])*)(?::([0-9]*))?$');
    IF m IS NULL THEN
        RETURN 'must have a host of letters, digits and -._~!$&''()*+,;= (or an IPv6 address in brackets), and a port of digits';
    ELSIF m[1] <> '' AND NOT (m[1] ~ '^0*[1-9][0-9]{0,4}$' AND ltrim(m[1], '0')::integer <= 65535) THEN
        RETURN 'must have a port from 1 to 65535';
    ELSIF bookmark_url_host(url) = '' THEN
        RETURN 'must have a host';
    ELSIF octet_length(bookmark_url_host(url)) > 250 THEN
        RETURN 'must have a host of at most 250 bytes';
    END IF;
    RETURN NULL;
END
$$;

-- bookmark_enqueue_fetches is the statement trigger below: for the rows of an INSERT that
-- came without a job (see the header), a FetchBookmark each, as the API enqueues it
-- (tasks.FetchBookmark: kind fetch_bookmark, queue default, dedup key bookmark/<id>, the
-- host's partition and slot, events on, meta {"bookmark": <id>}), the row's fetch_job_id
-- set to its job, and one RebuildTagIndex of their tags, as the API's (debounced 2s, a
-- rebuild of all tags past 100 tags or a tag over 50 bytes). Every row is checked before
-- anything is enqueued.
CREATE FUNCTION bookmark_enqueue_fetches() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_bad     record;
    v_ids     uuid[];   -- the rows to serve, in ID order
    v_jobs    jsonb;    -- their fetches, for venturi_enqueue_many
    v_job_ids uuid[];   -- the job of each
    v_tags    text[];
BEGIN
    IF NOT EXISTS (SELECT 1 FROM inserted b
                   WHERE b.fetch_job_id IS NULL AND b.import_id IS NULL AND b.fetch_status = 'pending') THEN
        RETURN NULL;
    END IF;
    SELECT b.id, b.url, p.problem, count(*) OVER () AS n INTO v_bad
    FROM inserted b, LATERAL (SELECT bookmark_url_problem(b.url) AS problem) p
    WHERE b.fetch_job_id IS NULL AND b.import_id IS NULL AND b.fetch_status = 'pending' AND p.problem IS NOT NULL
    ORDER BY b.id
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation',
            MESSAGE = format('bookmark %s: url %s: %s', venturi_ulid_text(v_bad.id), left(v_bad.url, 200), v_bad.problem),
            DETAIL = format('%s row(s) of this statement have a URL that cannot be fetched; nothing was inserted.', v_bad.n),
            HINT = 'bookmark_url_problem(url) names the problem of each URL (NULL: none); load the rows it accepts.',
            SCHEMA = TG_TABLE_SCHEMA, TABLE = TG_TABLE_NAME, COLUMN = 'url';
    END IF;

    -- In bookmark ID order: the jobs' order, and the order of their keys' locks.
    SELECT array_agg(b.id ORDER BY b.id),
           jsonb_agg(jsonb_build_object(
               'kind', 'fetch_bookmark',
               'payload', jsonb_build_object('bookmark_id', venturi_ulid_text(b.id), 'url', b.url),
               'dedup_key', 'bookmark/' || venturi_ulid_text(b.id),
               'meta', jsonb_build_object('bookmark', venturi_ulid_text(b.id)),
               'events', true,
               'partition', bookmark_url_host(b.url),
               'slot_key', 'host:' || bookmark_url_host(b.url), 'slot_limit', 2, 'slot_policy', 'queue') ORDER BY b.id)
    INTO v_ids, v_jobs
    FROM inserted b
    WHERE b.fetch_job_id IS NULL AND b.import_id IS NULL AND b.fetch_status = 'pending';
    BEGIN
        SELECT array_agg(e.id ORDER BY e.ord) INTO v_job_ids FROM venturi_enqueue_many(v_jobs) e;
    EXCEPTION WHEN out_of_memory THEN
        -- PostgreSQL's lock table is full: each fetch's dedup key is locked until commit.
        RAISE EXCEPTION USING ERRCODE = 'out_of_memory',
            MESSAGE = format('bookmark bulk load: enqueueing the fetches of %s rows in one transaction needs more locks than PostgreSQL''s lock table holds',
                             cardinality(v_ids)),
            DETAIL = 'Each fetch''s dedup key is locked until the transaction ends; nothing was inserted.',
            HINT = 'Load fewer rows per transaction (see "Bulk loads from SQL" in bookmarks-worker/README.md), or raise max_locks_per_transaction.',
            SCHEMA = TG_TABLE_SCHEMA, TABLE = TG_TABLE_NAME;
    END;
    -- Each row is pointed at the job that fetches it: the job inserted, or the pending job
    -- of its key that the enqueue merged into.
    UPDATE bookmark b SET fetch_job_id = x.job_id
    FROM unnest(v_ids, v_job_ids) AS x(id, job_id)
    WHERE b.id = x.id;

    SELECT array_agg(DISTINCT t COLLATE "C" ORDER BY t COLLATE "C") INTO v_tags
    FROM inserted b, unnest(b.tags) AS t
    WHERE b.fetch_job_id IS NULL AND b.import_id IS NULL AND b.fetch_status = 'pending' AND t <> '';
    IF v_tags IS NOT NULL THEN
        PERFORM venturi_enqueue('rebuild_tag_index',
            CASE WHEN cardinality(v_tags) > 100 OR EXISTS (SELECT 1 FROM unnest(v_tags) t WHERE octet_length(t) > 50)
                 THEN jsonb_build_object('all', true, 'requests', 1, 'quiet_ms', 2000)
                 ELSE jsonb_build_object('tags', to_jsonb(v_tags), 'requests', 1, 'quiet_ms', 2000) END,
            dedup_key => 'tag-index', delay => interval '2 seconds');
    END IF;
    RETURN NULL;
END
$$;

-- A bulk load may leave the ID to the database: a ULID made now, as the API makes them (the
-- API and the worker always give one).
ALTER TABLE bookmark ALTER COLUMN id SET DEFAULT venturi_ulid_make();

CREATE TRIGGER bookmark_enqueue_fetches AFTER INSERT ON bookmark
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION bookmark_enqueue_fetches();

-- name: GetImportForRun :one
-- An import, its workflow (NULL for an import made before workflows) and, when it waits for
-- a confirmation, how long the wait has left and how long it was (on the database's clock;
-- both zero when it needs none).
SELECT i.id, i.status, i.tags, i.total, i.workflow_id,
       (c.import_id IS NOT NULL)::bool AS confirm_required,
       coalesce((extract(epoch FROM c.expires_at - now()) * 1000000)::bigint, 0)::bigint AS confirm_left_us,
       coalesce((extract(epoch FROM c.expires_at - i.created_at) * 1000000)::bigint, 0)::bigint AS confirm_timeout_us
FROM bookmark_import i LEFT JOIN bookmark_import_confirmation c ON c.import_id = i.id
WHERE i.id = @id;

-- name: SetImportConfirmed :exec
UPDATE bookmark_import_confirmation SET confirmed_at = coalesce(confirmed_at, now()) WHERE import_id = @import_id;

-- name: SetImportCancelled :exec
-- Marks an import cancelled, unless it completed (a completion wins over a late cancel).
UPDATE bookmark_import SET status = 'cancelled', finished_at = coalesce(finished_at, now())
WHERE id = @id AND status <> 'done';

-- name: ImportPage :many
SELECT position, url, title FROM bookmark_import_item
WHERE import_id = @import_id AND position >= @from_position
ORDER BY position
LIMIT @max_rows;

-- name: InsertImportedBookmark :exec
INSERT INTO bookmark (id, url, title, tags, import_id, fetch_job_id)
VALUES (@id, @url, @title, @tags::text[], @import_id, @fetch_job_id);

-- name: SetImportProgress :exec
-- A cancelled import stays cancelled (the API marks it so when it asks a running page to
-- stop); only its completion, which wins over a late cancel, makes it done.
UPDATE bookmark_import
SET status = CASE WHEN status = 'cancelled' AND @status::text <> 'done' THEN 'cancelled' ELSE @status::text END,
    imported = @imported, skipped = @skipped,
    finished_at = CASE WHEN @status::text = 'done' THEN now() WHEN status = 'cancelled' THEN finished_at END
WHERE id = @id;

-- name: ImportedBookmarksToFetch :many
-- The bookmarks an import created that have no fetch job yet, for its workflow's fetch
-- node: every one, unless a refetch got to it first.
SELECT id, url FROM bookmark
WHERE import_id = @import_id AND fetch_job_id IS NULL
ORDER BY id
LIMIT @max_rows;

-- name: SetImportedFetchJobs :execrows
-- Points each bookmark (ids) at the fetch job spawned for it (job_ids, in the same order),
-- unless a refetch got there first.
UPDATE bookmark b SET fetch_job_id = (@job_ids::uuid[])[x.ord], updated_at = now()
FROM unnest(@ids::uuid[]) WITH ORDINALITY AS x(id, ord)
WHERE b.id = x.id AND b.fetch_job_id IS NULL;

-- name: UpsertImportSummary :exec
-- The import's summary, written by its workflow's summary node (a retry of it writes it
-- again).
INSERT INTO bookmark_import_summary (import_id, fetches, fetched, titles_found, failed, failures, gave_up, superseded, tag_index)
VALUES (@import_id, @fetches, @fetched, @titles_found, @failed, (@failures::text)::jsonb, @gave_up, @superseded, @tag_index)
ON CONFLICT (import_id) DO UPDATE
SET fetches = excluded.fetches, fetched = excluded.fetched, titles_found = excluded.titles_found,
    failed = excluded.failed, failures = excluded.failures, gave_up = excluded.gave_up,
    superseded = excluded.superseded, tag_index = excluded.tag_index, summarized_at = now();

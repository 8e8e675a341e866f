-- name: GetImportForRun :one
-- An import and, when it waits for a confirmation, how long the wait has left and how long
-- it was (on the database's clock; both zero when it needs none).
SELECT i.id, i.status, i.tags, i.total,
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

-- name: GetImportForRun :one
SELECT id, status, tags, total FROM bookmark_import WHERE id = @id;

-- name: ImportPage :many
SELECT position, url, title FROM bookmark_import_item
WHERE import_id = @import_id AND position >= @from_position
ORDER BY position
LIMIT @max_rows;

-- name: InsertImportedBookmark :exec
INSERT INTO bookmark (id, url, title, tags, import_id, fetch_job_id)
VALUES (@id, @url, @title, @tags::text[], @import_id, @fetch_job_id);

-- name: SetImportProgress :exec
UPDATE bookmark_import
SET status = @status, imported = @imported, skipped = @skipped,
    finished_at = CASE WHEN @status = 'done' THEN now() END
WHERE id = @id;

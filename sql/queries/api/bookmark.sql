-- name: InsertBookmark :one
-- Returns the row as written, which is what POST /bookmarks answers with (no read back).
INSERT INTO bookmark (id, url, title, tags, fetch_job_id)
VALUES (@id, @url, @title, @tags::text[], @fetch_job_id)
RETURNING *;

-- name: GetBookmark :one
SELECT * FROM bookmark WHERE id = @id;

-- name: LockBookmark :one
SELECT id, url, tags FROM bookmark WHERE id = @id FOR UPDATE;

-- name: ListBookmarks :many
-- Newest first, keyset-paginated by ID; optionally only the bookmarks with a tag.
SELECT id, url, title, tags, fetch_status, page_title, created_at
FROM bookmark
WHERE (sqlc.narg('before')::uuid IS NULL OR id < sqlc.narg('before')::uuid)
  AND (sqlc.narg('tag')::text IS NULL OR tags @> ARRAY[sqlc.narg('tag')::text])
ORDER BY id DESC
LIMIT @max_rows;

-- name: SetFetchPending :exec
UPDATE bookmark
SET fetch_status = 'pending', fetch_job_id = @fetch_job_id, fetch_error = '', updated_at = now()
WHERE id = @id;

-- name: DeleteBookmark :one
DELETE FROM bookmark WHERE id = @id RETURNING tags;

-- name: InsertImport :one
-- Returns the row as written: POST /imports answers with it when the import cannot be
-- read back after the commit.
INSERT INTO bookmark_import (id, job_id, workflow_id, status, tags, total)
VALUES (@id, @job_id, @workflow_id, @status, @tags::text[], @total)
RETURNING *;

-- name: InsertImportConfirmation :one
-- The confirmation a large import waits for: the digest of its link's token, and the end
-- of the wait, on the database's clock.
INSERT INTO bookmark_import_confirmation (import_id, token_hash, expires_at)
VALUES (@import_id, @token_hash, now() + interval '1 microsecond' * @timeout_us::bigint)
RETURNING expires_at;

-- name: InsertImportItems :execrows
INSERT INTO bookmark_import_item (import_id, position, url, title)
SELECT @import_id::uuid, (x.ord - 1)::integer, x.url, coalesce((@titles::text[])[x.ord], '')
FROM unnest(@urls::text[]) WITH ORDINALITY AS x(url, ord);

-- name: GetImport :one
SELECT * FROM bookmark_import WHERE id = @id;

-- name: GetImportSummary :one
-- What an import's fetches came to, once its workflow's summary node has written it.
SELECT * FROM bookmark_import_summary WHERE import_id = @import_id;

-- name: GetImportConfirmation :one
-- An import's confirmation; open is false once the wait has expired.
SELECT c.import_id, c.token_hash, c.expires_at, c.used_at, c.confirmed_at, (c.expires_at > now())::bool AS open, i.job_id
FROM bookmark_import_confirmation c JOIN bookmark_import i ON i.id = c.import_id
WHERE c.import_id = @import_id;

-- name: UseImportConfirmationLink :execrows
-- Spends the confirmation link of an import: once, and before it expires. The caller has
-- compared the token's digest already.
UPDATE bookmark_import_confirmation SET used_at = now()
WHERE import_id = @import_id AND used_at IS NULL AND expires_at > now();

-- name: RestoreImportConfirmationLink :exec
-- Gives a spent link back when its confirmation could not be sent (a database error).
UPDATE bookmark_import_confirmation SET used_at = NULL WHERE import_id = @import_id;

-- name: SetImportCancelled :exec
-- Marks an import cancelled, unless it completed (a completion wins over a late cancel).
UPDATE bookmark_import SET status = 'cancelled', finished_at = coalesce(finished_at, now())
WHERE id = @id AND status <> 'done';

-- name: ListTagIndex :many
-- Most used first, then by name; keyset-paginated by (count, tag) after the previous page's last row.
SELECT tag, bookmark_count, rebuilt_at
FROM tag_index
WHERE sqlc.narg('after_count')::integer IS NULL
   OR bookmark_count < sqlc.narg('after_count')::integer
   OR (bookmark_count = sqlc.narg('after_count')::integer AND tag > sqlc.narg('after_tag')::text)
ORDER BY bookmark_count DESC, tag
LIMIT @max_rows;

-- name: InsertBookmark :exec
INSERT INTO bookmark (id, url, title, tags, fetch_job_id)
VALUES (@id, @url, @title, @tags::text[], @fetch_job_id);

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

-- name: InsertImport :exec
INSERT INTO bookmark_import (id, job_id, tags, total) VALUES (@id, @job_id, @tags::text[], @total);

-- name: InsertImportItems :execrows
INSERT INTO bookmark_import_item (import_id, position, url, title)
SELECT @import_id::uuid, (x.ord - 1)::integer, x.url, coalesce((@titles::text[])[x.ord], '')
FROM unnest(@urls::text[]) WITH ORDINALITY AS x(url, ord);

-- name: GetImport :one
SELECT * FROM bookmark_import WHERE id = @id;

-- name: ListTagIndex :many
-- Most used first, then by name; keyset-paginated by (count, tag) after the previous page's last row.
SELECT tag, bookmark_count, rebuilt_at
FROM tag_index
WHERE sqlc.narg('after_count')::integer IS NULL
   OR bookmark_count < sqlc.narg('after_count')::integer
   OR (bookmark_count = sqlc.narg('after_count')::integer AND tag > sqlc.narg('after_tag')::text)
ORDER BY bookmark_count DESC, tag
LIMIT @max_rows;

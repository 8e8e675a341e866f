-- name: GetBookmarkForFetch :one
SELECT id, url, fetch_job_id FROM bookmark WHERE id = @id;

-- name: StoreFetchResult :execrows
-- Only the bookmark's current fetch job may write its result.
UPDATE bookmark
SET fetch_status = 'fetched', fetch_error = '', fetch_attempts = fetch_attempts + 1,
    page_title = @page_title, content = @content, http_status = @http_status,
    content_type = @content_type, final_url = @final_url, content_bytes = @content_bytes,
    fetched_at = now(), updated_at = now()
WHERE id = @id AND fetch_job_id = @fetch_job_id;

-- name: RecordFetchFailure :execrows
-- A failed attempt; final marks the fetch failed for good (a verdict on the page, or the
-- last attempt).
UPDATE bookmark
SET fetch_status = CASE WHEN @final::boolean THEN 'failed' ELSE fetch_status END,
    fetch_error = @fetch_error, fetch_attempts = fetch_attempts + 1,
    http_status = sqlc.narg('http_status'), updated_at = now()
WHERE id = @id AND fetch_job_id = @fetch_job_id;

-- name: LinkCheckPage :many
-- The link checker's page: the bookmarks after the cursor in ID order, each with whether
-- its page is stale: fetched (or failed) more than stale_after_s seconds ago, on the database's
-- clock. A bookmark whose fetch is pending is never stale.
SELECT id, url,
       (fetch_status <> 'pending' AND COALESCE(fetched_at, updated_at) < now() - make_interval(secs => sqlc.arg(stale_after_s)::double precision))::boolean AS stale
FROM bookmark
WHERE id > @after::uuid
ORDER BY id
LIMIT @max_rows;

-- name: MarkRefetchPending :execrows
-- Points a stale bookmark at its new fetch job, unless its fetch became pending meanwhile.
UPDATE bookmark
SET fetch_status = 'pending', fetch_job_id = @fetch_job_id, fetch_error = '', updated_at = now()
WHERE id = @id AND fetch_status <> 'pending';

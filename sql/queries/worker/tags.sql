-- name: UpsertTagCounts :exec
-- Recounts the given tags; tags no bookmark uses any more leave the index.
WITH counts AS (
    SELECT t.tag, count(b.id)::integer AS n
    FROM unnest(@tags::text[]) AS t(tag)
    LEFT JOIN bookmark b ON b.tags @> ARRAY[t.tag]
    GROUP BY t.tag
), gone AS (
    DELETE FROM tag_index ti USING counts c WHERE ti.tag = c.tag AND c.n = 0
)
INSERT INTO tag_index (tag, bookmark_count, rebuilt_at)
SELECT tag, n, now() FROM counts WHERE n > 0
ON CONFLICT (tag) DO UPDATE SET bookmark_count = excluded.bookmark_count, rebuilt_at = excluded.rebuilt_at;

-- name: DeleteAllTagCounts :exec
DELETE FROM tag_index;

-- name: InsertAllTagCounts :exec
INSERT INTO tag_index (tag, bookmark_count, rebuilt_at)
SELECT t.tag, count(*)::integer, now()
FROM bookmark b, unnest(b.tags) AS t(tag)
GROUP BY t.tag;

-- name: SetQueuePaused :exec
INSERT INTO venturi_queue (name, paused) VALUES (@name::text, @paused::bool)
ON CONFLICT (name) DO UPDATE SET paused = EXCLUDED.paused, updated_at = now();

-- name: SetQueueConcurrency :exec
INSERT INTO venturi_queue (name, concurrency) VALUES (@name::text, @concurrency::int)
ON CONFLICT (name) DO UPDATE SET concurrency = EXCLUDED.concurrency, updated_at = now();

-- name: ListQueues :many
-- Every queue that has jobs or settings, with its settings and job counts.
WITH names AS (
    SELECT name FROM venturi_queue
    UNION
    SELECT DISTINCT queue FROM venturi_job WHERE state IN ('available', 'running', 'scheduled')
)
SELECT n.name::text AS name, COALESCE(q.paused, false)::bool AS paused,
       COALESCE(q.concurrency, 0)::int AS concurrency,
       (SELECT count(*) FROM venturi_job j WHERE j.queue = n.name AND j.state = 'available')::bigint AS available,
       (SELECT count(*) FROM venturi_job j WHERE j.queue = n.name AND j.state = 'running')::bigint AS running,
       (SELECT count(*) FROM venturi_job j WHERE j.queue = n.name AND j.state = 'scheduled')::bigint AS scheduled
FROM names n LEFT JOIN venturi_queue q ON q.name = n.name
ORDER BY n.name;

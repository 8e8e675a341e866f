-- name: AwaitJob :one
-- Registers a waiter's channel on a job that has not ended; it returns no row when the job
-- has ended (or does not exist).
UPDATE venturi_job SET await_channel = @channel::text
WHERE id = @id AND state IN ('blocked', 'scheduled', 'available', 'running', 'waiting')
RETURNING id;

-- name: EndedJobs :many
-- Which of the given jobs have ended or are gone: the awaiters' poll, one statement for
-- all the waiters of a process.
SELECT w.id::uuid AS id
FROM unnest(@ids::uuid[]) AS w(id)
LEFT JOIN venturi_job j ON j.id = w.id
WHERE j.id IS NULL OR j.state IN ('completed', 'dead', 'cancelled');

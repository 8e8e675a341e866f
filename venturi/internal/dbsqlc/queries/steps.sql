-- name: StepResult :one
SELECT result FROM venturi_step WHERE job_id = @job_id AND name = @name::text;

-- name: SaveStep :execrows
-- Memoizes a step's result for a run that still holds its job (its token matches); a lost
-- run saves nothing. An earlier memo of the name is kept.
-- The job's row is key-share locked until the memo commits. A rescue (FOR UPDATE SKIP
-- LOCKED) passes the row by meanwhile, and a cancel or a delete waits for it, so a run that
-- saved a memo still held its job when the memo committed, and a run that lost its job
-- saves nothing (the lock re-reads the row's token). The lock does not conflict with the
-- lease extension or a stop request (no-key updates), so an open StepTx holds up neither.
INSERT INTO venturi_step (job_id, name, result, run, token)
SELECT j.id, @name::text, (@result::text)::jsonb, j.runs, j.lease_token
FROM venturi_job j
WHERE j.id = @job_id AND j.lease_token = @token
FOR KEY SHARE OF j
ON CONFLICT (job_id, name) DO NOTHING;

-- name: JobSteps :many
SELECT name, result, run, at FROM venturi_step WHERE job_id = @job_id ORDER BY at, name;

-- name: SaveCarry :execrows
-- A running job's checkpoint (Run.Checkpoint), fenced by the run's token: no row when the
-- run lost its job.
UPDATE venturi_job SET carry = NULLIF(@carry::text, '')::jsonb
WHERE id = @id AND lease_token = @token;

-- venturi schema, version 26: the job state blocked, for a workflow's jobs that wait for
-- what they need (migration 27). A state of its own, in no claim index and no partial
-- index but its own, so that jobs waiting in workflows cost the claim nothing.
--
-- A migration of its own because a value added to an enum cannot be used in the
-- transaction that adds it.
--
-- Rolling deploy: nothing uses the value until migration 27 and the code that writes it.
ALTER TYPE venturi_job_state ADD VALUE IF NOT EXISTS 'blocked';

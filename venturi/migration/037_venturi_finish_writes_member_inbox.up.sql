-- venturi schema, version 37: a worker's finish records its workflow members' ends in one
-- insert.
--
-- A run's finish that moved a workflow member to the history had its end recorded in
-- venturi_workflow_inbox by venturi_workflow_delete, a trigger fired per deleted row: an
-- executor for its single-row insert, PL/pgSQL, and a read of the history row the same
-- statement had just written, to learn the end (bench/FINDINGS.md section 28). FinishRuns
-- now writes those rows itself, one insert for the statement, when the finish's
-- transaction sets venturi.finish_inbox (SetLocalFinish, queries/session.sql); the trigger
-- skips the delete of a running job while it is on.
--
-- Rolling deploy: an older worker's finish does not set the setting, and the trigger
-- records its members' ends as before. A worker of this version against schema 36 (before
-- Migrate applied this migration) records each such end twice, which a settle counts once
-- (an end seen twice counts once).

DROP TRIGGER venturi_workflow_delete ON venturi_job;
CREATE TRIGGER venturi_workflow_delete AFTER DELETE ON venturi_job
    FOR EACH ROW
    WHEN (old.workflow_id IS NOT NULL
          AND NOT (old.state = 'running'
                   AND current_setting('venturi.finish_inbox', true) IS NOT DISTINCT FROM 'on'))
    EXECUTE FUNCTION venturi_workflow_note();

-- bookmarks application schema, version 7: an import is a venturi workflow, and ends with a
-- summary.
--
-- POST /imports enqueues one workflow per import (tasks.NewImportWorkflow) in the
-- transaction that stores the import: the node "import" creates the bookmarks page by page,
-- "fetch" spawns one fetch per bookmark created once the import has ended (however it
-- ended), "reindex" recounts the import's tags once every fetch has ended, and "summary"
-- reads the fetches' outputs and writes the row of bookmark_import_summary below.
-- bookmark_import.workflow_id names the workflow. It is NULL for the imports created before
-- this version: their job still enqueues the fetches page by page and asks for the tag
-- recount at its end, as it did, and they get no summary.
--
-- The summary is the app's, kept here: venturi prunes a finished workflow with its outputs
-- (its retention), and the import's record stays.
--
-- Rolling deploy: adding a nullable column rewrites nothing, and older processes, which do
-- not name it, keep working. Deploy the workers before the API: an older worker runs the
-- workflow's import node the old way (its fetches enqueued page by page, which the fetch
-- node then finds already made), but it has no handler for the fetch and summary nodes,
-- which wait for a newer worker.

ALTER TABLE bookmark_import ADD COLUMN workflow_id uuid;

-- What an import's fetches came to, written once by the workflow's summary node (again by
-- a retry of it). fetched + failed + gave_up + superseded = fetches.
CREATE TABLE bookmark_import_summary (
    import_id     uuid        PRIMARY KEY REFERENCES bookmark_import ON DELETE CASCADE,
    fetches       integer     NOT NULL CHECK (fetches >= 0),       -- the fetches the import made
    fetched       integer     NOT NULL CHECK (fetched >= 0),       -- pages fetched and stored
    titles_found  integer     NOT NULL CHECK (titles_found BETWEEN 0 AND fetched), -- of those, pages with a title
    failed        integer     NOT NULL CHECK (failed >= 0),        -- a verdict on the page: 404, not HTML, a refused address...
    failures      jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(failures) = 'object'), -- failed, by reason code
    gave_up       integer     NOT NULL CHECK (gave_up >= 0),       -- ended without a result: the host kept failing, or cancelled
    superseded    integer     NOT NULL CHECK (superseded >= 0),    -- a refetch or a delete of the bookmark took over
    tag_index     text        NOT NULL CHECK (tag_index IN ('rebuilt', 'failed')),
    summarized_at timestamptz NOT NULL DEFAULT now(),
    CHECK (fetched + failed + gave_up + superseded = fetches)
);

-- The fetch node reads an import's bookmarks by import_id (bookmarks made by hand have
-- none). Built in the migration's transaction: it holds writes to bookmark while it builds.
CREATE INDEX bookmark_import_id_idx ON bookmark (import_id) WHERE import_id IS NOT NULL;

-- bookmarks application schema, version 1. venturi's own tables come from venturi's
-- migrations, which `migrate` applies first.

-- A bookmark and the result of its latest fetch.
CREATE TABLE bookmark (
    id             uuid        PRIMARY KEY,                  -- a ULID's 16 bytes
    url            text        NOT NULL CHECK (length(url) <= 2048),
    title          text        NOT NULL DEFAULT '',          -- given by the user
    tags           text[]      NOT NULL DEFAULT '{}',
    import_id      uuid,                                     -- set when an import created it
    fetch_status   text        NOT NULL DEFAULT 'pending'
                   CHECK (fetch_status IN ('pending', 'fetched', 'failed')),
    fetch_job_id   uuid,                                     -- the venturi job of the latest fetch
    fetch_error    text        NOT NULL DEFAULT '',          -- last error; on failed, why it gave up
    fetch_attempts integer     NOT NULL DEFAULT 0,
    page_title     text        NOT NULL DEFAULT '',
    content        text        NOT NULL DEFAULT '',          -- the page's text, capped by the worker
    http_status    integer,
    content_type   text        NOT NULL DEFAULT '',
    final_url      text        NOT NULL DEFAULT '',
    content_bytes  bigint,
    fetched_at     timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX bookmark_tags_idx ON bookmark USING gin (tags);

-- An uploaded bookmarks export, imported page by page by the import_bookmarks task.
CREATE TABLE bookmark_import (
    id          uuid        PRIMARY KEY,
    job_id      uuid        NOT NULL,
    status      text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'running', 'done')),
    tags        text[]      NOT NULL DEFAULT '{}',           -- added to every imported bookmark
    total       integer     NOT NULL,
    imported    integer     NOT NULL DEFAULT 0,
    skipped     integer     NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);

CREATE TABLE bookmark_import_item (
    import_id uuid    NOT NULL REFERENCES bookmark_import ON DELETE CASCADE,
    position  integer NOT NULL,
    url       text    NOT NULL,
    title     text    NOT NULL DEFAULT '',
    PRIMARY KEY (import_id, position)
);

-- Bookmark counts per tag, maintained by the rebuild_tag_index task.
CREATE TABLE tag_index (
    tag            text        PRIMARY KEY,
    bookmark_count integer     NOT NULL,
    rebuilt_at     timestamptz NOT NULL DEFAULT now()
);

-- bookmarks application schema, version 4: imports can be cancelled, and a large import waits
-- for a confirmation.
--
-- An import of more items than the API's BOOKMARKS_IMPORT_CONFIRM_ABOVE starts in status
-- awaiting_confirmation, with a row below: its job waits (venturi's WaitForSignal) until
-- it is confirmed, or until expires_at, when it ends cancelled. DELETE /imports/{id} (or
-- that timeout) leaves it cancelled.
ALTER TABLE bookmark_import DROP CONSTRAINT bookmark_import_status_check;
ALTER TABLE bookmark_import ADD CONSTRAINT bookmark_import_status_check
    CHECK (status IN ('awaiting_confirmation', 'pending', 'running', 'done', 'cancelled'));

-- The confirmation an import waits for. The confirmation link the API returned when it
-- created the import carries a secret token; only its SHA-256 digest is kept here, never
-- the token. The link confirms once (used_at), and not after expires_at, which is also
-- when the import's job stops waiting (the worker reads it: one deadline, on the
-- database's clock).
CREATE TABLE bookmark_import_confirmation (
    import_id    uuid        PRIMARY KEY REFERENCES bookmark_import ON DELETE CASCADE,
    token_hash   bytea       NOT NULL CHECK (length(token_hash) = 32),  -- SHA-256 of the link's token
    expires_at   timestamptz NOT NULL,
    used_at      timestamptz,                                          -- the link was used (once only)
    confirmed_at timestamptz                                           -- the worker read the confirmation
);

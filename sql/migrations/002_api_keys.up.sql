-- bookmarks application schema, version 2: API keys, and an index for paging the tag index.

-- An API key (`bookmarks-api keys create`). The key itself is shown once and never stored:
-- only its SHA-256 digest is. A key reads bmk_<id>_<secret>: the ID (a ULID, not secret)
-- finds the row, and the digest of the whole key is compared in constant time.
CREATE TABLE api_key (
    id          uuid        PRIMARY KEY,                     -- a ULID's 16 bytes, the key's <id>
    name        text        NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    key_hash    bytea       NOT NULL CHECK (length(key_hash) = 32),  -- SHA-256 of the whole key
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz                                  -- set by `keys revoke`; a revoked key is refused
);

-- Names identify keys among the active ones (`keys create --replace` rotates by name).
CREATE UNIQUE INDEX api_key_active_name_idx ON api_key (name) WHERE revoked_at IS NULL;

-- GET /tags pages through the index in this order (most used first).
CREATE INDEX tag_index_page_idx ON tag_index (bookmark_count DESC, tag);

-- bookmarks application schema, version 6: creates take an Idempotency-Key.
--
-- POST /bookmarks and POST /imports accept an Idempotency-Key header. The create's own
-- transaction records here which API key sent which idempotency key, for which endpoint,
-- a fingerprint of the request (the SHA-256 of the request as validated) and the ID of what
-- it created. A retry with the same key and the same request is answered with that
-- resource instead of creating another; the same key with another request is refused. The
-- primary key is what makes a concurrent duplicate safe: its insert waits for the first
-- create's transaction and then finds the row. The key's ID is stored, never the key.
--
-- A row expires 24 hours after the create (expires_at, on the database's clock). An expired
-- row is replaced when its key is used again, and each create that carries an
-- Idempotency-Key deletes a few expired rows (bookmarks-api, DeleteExpiredIdempotencyKeys),
-- so the table holds about a day of keyed creates.
--
-- Rolling deploy: older API processes keep working. They never read or write the table and
-- ignore the header, so a retry that reaches one of them creates again, as before; the
-- worker does not use the table. Creating it locks nothing that exists.
CREATE TABLE idempotency_key (
    api_key_id   uuid        NOT NULL REFERENCES api_key ON DELETE CASCADE,
    idem_key     text        NOT NULL CHECK (length(idem_key) BETWEEN 1 AND 255),
    endpoint     text        NOT NULL CHECK (endpoint IN ('POST /bookmarks', 'POST /imports')),
    request_hash bytea       NOT NULL CHECK (length(request_hash) = 32),
    resource_id  uuid        NOT NULL,                        -- the bookmark or import it created
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (api_key_id, idem_key)
);

-- The bounded clean-up deletes the oldest expired rows first.
CREATE INDEX idempotency_key_expires_idx ON idempotency_key (expires_at);

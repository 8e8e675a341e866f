-- name: ClaimIdempotencyKey :execrows
-- Records an idempotency key in a create's transaction: 1 when the key is this create's
-- (a new key, or one whose row had expired, which is replaced), 0 when a live row holds it
-- (GetIdempotencyKey says for what). A create with a key that another create's open
-- transaction has claimed waits here until that transaction ends.
INSERT INTO idempotency_key (api_key_id, idem_key, endpoint, request_hash, resource_id, expires_at)
VALUES (@api_key_id, @idem_key, @endpoint, @request_hash, @resource_id,
        now() + interval '1 microsecond' * @ttl_us::bigint)
ON CONFLICT (api_key_id, idem_key) DO UPDATE
SET endpoint = excluded.endpoint, request_hash = excluded.request_hash, resource_id = excluded.resource_id,
    created_at = now(), expires_at = excluded.expires_at
WHERE idempotency_key.expires_at <= now();

-- name: GetIdempotencyKey :one
-- A live idempotency key: the endpoint, the request's fingerprint and what it created.
SELECT endpoint, request_hash, resource_id FROM idempotency_key
WHERE api_key_id = @api_key_id AND idem_key = @idem_key AND expires_at > now();

-- name: DeleteExpiredIdempotencyKeys :execrows
-- Deletes at most @max_rows expired idempotency keys, the oldest first; rows another
-- transaction holds are left for the next call.
DELETE FROM idempotency_key
WHERE (api_key_id, idem_key) IN (
    SELECT e.api_key_id, e.idem_key FROM idempotency_key e
    WHERE e.expires_at <= now()
    ORDER BY e.expires_at
    LIMIT @max_rows
    FOR UPDATE SKIP LOCKED);

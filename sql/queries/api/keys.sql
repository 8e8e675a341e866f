-- name: InsertAPIKey :exec
INSERT INTO api_key (id, name, key_hash, ops) VALUES (@id, @name, @key_hash, sqlc.narg(ops));

-- name: RevokeActiveAPIKeysByName :many
-- Revokes the active keys named @name (a rotation), returning their IDs.
UPDATE api_key SET revoked_at = now() WHERE name = @name AND revoked_at IS NULL RETURNING id;

-- name: GetActiveAPIKey :one
SELECT id, name, key_hash, ops FROM api_key WHERE id = @id AND revoked_at IS NULL;

-- name: ListAPIKeys :many
SELECT id, name, created_at, revoked_at, ops FROM api_key ORDER BY id;

-- name: RevokeAPIKey :one
-- Revokes a key; revoking a revoked key keeps its first revocation time.
UPDATE api_key SET revoked_at = coalesce(revoked_at, now()) WHERE id = @id RETURNING id, name, revoked_at;

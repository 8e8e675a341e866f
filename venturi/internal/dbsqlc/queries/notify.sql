-- name: Notify :exec
SELECT pg_notify(@channel::text, @payload::text);

-- name: NotifyMany :exec
SELECT pg_notify(@channel::text, p.payload) FROM (SELECT unnest(@payloads::text[]) AS payload) p;

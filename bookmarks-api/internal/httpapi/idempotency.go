package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/bookmarks/bookmarks-api/internal/store"
)

// Idempotent creates.
//
// POST /bookmarks and POST /imports take an Idempotency-Key header: a client that retries a
// create whose answer it did not get (a timeout, a dropped connection) sends the same key
// again and gets what the first request created instead of a second bookmark or import.
// The key is scoped to the API key that sent it (the table idempotency_key stores the API
// key's ID, never the key) and to the request: its fingerprint is the SHA-256 of the
// endpoint and the request as validated (the normalised URL, title and tags; an import's
// normalised items, tags and page size), so a retry may re-encode the JSON. The same key
// with another request is 422.
//
// The create claims its key in its own transaction, before it writes anything else, with
// an INSERT on the table's primary key: a concurrent duplicate waits there for the first
// transaction and, once it commits, finds the row and answers as a retry; if it rolls back,
// the duplicate creates. A retry is answered 200 (not 201: it created nothing) with the
// header Idempotent-Replayed: true and the resource as it is now (GET's view): a bookmark
// with its current fetch state, an import with its progress (never the confirmation link,
// which only the first answer shows; confirm with the API key instead). It ignores ?wait=.
//
// A key expires IdempotencyKeyTTL after its create; then it may be used again, for any
// request. Expired rows are deleted by the creates that carry a key, at most
// expiredKeysPerCreate per create (DeleteExpiredIdempotencyKeys), so the table holds about
// a day of keyed creates without a job to clean it.

// HeaderIdempotencyKey is the request header of an idempotent create.
const HeaderIdempotencyKey = "Idempotency-Key"

// HeaderIdempotentReplayed marks the answer to a retry (a replay): "true".
const HeaderIdempotentReplayed = "Idempotent-Replayed"

// MaxIdempotencyKeyLen is the longest Idempotency-Key accepted, in bytes.
const MaxIdempotencyKeyLen = 255

// IdempotencyKeyTTL is how long an idempotency key answers retries after its create.
const IdempotencyKeyTTL = 24 * time.Hour

// expiredKeysPerCreate bounds the expired idempotency keys one keyed create deletes: more
// than one, so the deletions outpace the inserts once rows expire.
const expiredKeysPerCreate = 10

// Endpoints recorded with an idempotency key (the column endpoint).
const (
	endpointCreateBookmark = "POST /bookmarks"
	endpointCreateImport   = "POST /imports"
)

// idempotencyKeyOf reads a request's Idempotency-Key: "" when there is none; a 400 naming
// the header when it is empty, longer than MaxIdempotencyKeyLen, not printable ASCII, or
// sent more than once.
func idempotencyKeyOf(c echo.Context) (string, error) {
	vs := c.Request().Header.Values(HeaderIdempotencyKey)
	if len(vs) == 0 {
		return "", nil
	}
	bad := &badRequest{field: HeaderIdempotencyKey,
		msg: "the Idempotency-Key header must be 1 to 255 printable ASCII characters, sent once"}
	if len(vs) > 1 || vs[0] == "" || len(vs[0]) > MaxIdempotencyKeyLen {
		return "", bad
	}
	for i := 0; i < len(vs[0]); i++ {
		if b := vs[0][i]; b < 0x20 || b > 0x7e {
			return "", bad
		}
	}
	return vs[0], nil
}

// idempotency is a create's Idempotency-Key, ready to be claimed: zero when the request
// carries none.
type idempotency struct {
	key      string
	apiKey   ulid.ULID
	endpoint string
	hash     [sha256.Size]byte
}

// newIdempotency fingerprints a validated request (req: a value whose JSON encoding is the
// request's normal form) for key; an empty key makes a zero idempotency.
func newIdempotency(c echo.Context, key, endpoint string, req any) (idempotency, error) {
	if key == "" {
		return idempotency{}, nil
	}
	apiKey, ok := keyID(c)
	if !ok {
		return idempotency{}, errors.New("idempotency key without an authenticated API key (requireKey must run first)")
	}
	body, err := json.Marshal(req)
	if err != nil {
		return idempotency{}, err
	}
	return idempotency{key: key, apiKey: apiKey, endpoint: endpoint,
		hash: sha256.Sum256(append([]byte(endpoint+"\n"), body...))}, nil
}

// errKeyClaimed is a create whose idempotency key a committed create holds: its
// transaction rolls back and the request is answered as a retry.
var errKeyClaimed = errors.New("idempotency key already used")

// errIdempotencyMismatch is an idempotency key reused with another request: 422.
var errIdempotencyMismatch = errors.New("this Idempotency-Key was already used with a different request " +
	"(another body or endpoint) by this API key; send a new key for a new request")

// errReplayGone is a retry whose bookmark has been deleted since its create: 409.
var errReplayGone = &conflict{"the resource this Idempotency-Key created has since been deleted; send a new key to create another"}

// errKeyBusy is a retry whose key's row could not be found after its claim failed (it
// expired in between): 409, and the client retries.
var errKeyBusy = &conflict{"this Idempotency-Key is in use by another request; retry"}

// claim records the key in the create's transaction tx, for the resource the create makes.
// It deletes a few expired keys first (the table's clean-up). errKeyClaimed when a live
// row holds the key: the caller rolls back and answers with replay.
func (a *API) claim(ctx context.Context, tx pgx.Tx, k idempotency, resource ulid.ULID) error {
	if k.key == "" {
		return nil
	}
	if _, err := a.q.DeleteExpiredIdempotencyKeys(ctx, tx, expiredKeysPerCreate); err != nil {
		return err
	}
	n, err := a.q.ClaimIdempotencyKey(ctx, tx, store.ClaimIdempotencyKeyParams{ApiKeyID: uuidOf(k.apiKey), IdemKey: k.key,
		Endpoint: k.endpoint, RequestHash: k.hash[:], ResourceID: uuidOf(resource), TtlUs: IdempotencyKeyTTL.Microseconds()})
	if err != nil {
		return err
	}
	if n == 0 {
		return errKeyClaimed
	}
	return nil
}

// replay answers a retry: the resource the key's create made, 200 with
// Idempotent-Replayed: true, or errIdempotencyMismatch when the request differs.
func (a *API) replay(c echo.Context, k idempotency) error {
	ctx := c.Request().Context()
	row, err := a.q.GetIdempotencyKey(ctx, a.pool, store.GetIdempotencyKeyParams{ApiKeyID: uuidOf(k.apiKey), IdemKey: k.key})
	if errors.Is(err, pgx.ErrNoRows) {
		return errKeyBusy
	}
	if err != nil {
		return err
	}
	if row.Endpoint != k.endpoint || string(row.RequestHash) != string(k.hash[:]) {
		return errIdempotencyMismatch
	}
	c.Response().Header().Set(HeaderIdempotentReplayed, "true")
	id := ulid.ULID(row.ResourceID.Bytes)
	if k.endpoint == endpointCreateImport {
		err = a.respondImport(c, http.StatusOK, id)
	} else {
		err = a.respondBookmark(c, http.StatusOK, id)
	}
	if errors.Is(err, errNotFound) {
		c.Response().Header().Del(HeaderIdempotentReplayed)
		return errReplayGone
	}
	return err
}

package httpapi

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/bookmarks/bookmarks-api/internal/store"
	"github.com/venturi-dev/bookmarks/shared/tasks"
	"github.com/venturi-dev/venturi"
)

// Confirmation of large imports.
//
// An import of more than Config.ImportConfirmAbove items waits for a confirmation before it
// imports anything: POST /imports/{id}/confirm with an API key, or the confirmation link
// that the response of POST /imports carries. Both send the import's job the signal
// tasks.SignalConfirmImport; its worker waits for it (venturi.WaitForSignal) until the
// confirmation's expires_at and cancels the import when none came.
//
// The link is POST {PublicURL}/imports/{id}/confirm/{token}, a bearer capability: whoever
// holds it can confirm that one import, once, until it expires, without an API key. The
// token is bmc_ and 32 random bytes in unpadded base64url; the database keeps only its
// SHA-256 digest (table bookmark_import_confirmation), which the API compares in constant
// time, and the token is never logged (the request log shows the route, not the path).
//
// Why the API makes the link and not a venturi hook (Run.CreateHook): a hook is created by
// a run of the job, inside the worker, so its token exists only once the worker has run the
// import, while the link must be in the answer to POST /imports. The API would have to
// wait for the worker (slow, and unbounded while the imports queue is busy) or hand the
// token out later through another call. The API creates the import, its job and the
// link's digest in one transaction instead, and the link sends the same signal as the
// authenticated call.

// confirmPrefix starts every confirmation token, so that a leaked one is recognisable.
const confirmPrefix = "bmc_"

// confirmTokenLen is a token's length: the prefix and 32 bytes in unpadded base64url.
const confirmTokenLen = len(confirmPrefix) + 43

var confirmEncoding = base64.RawURLEncoding.Strict()

// Confirmation defaults.
const (
	// DefaultImportConfirmAbove: imports of more items wait for a confirmation.
	DefaultImportConfirmAbove = 1000
	// NoImportConfirmation as Config.ImportConfirmAbove: no import waits.
	NoImportConfirmation = -1
	// DefaultImportConfirmTimeout is how long an import waits for its confirmation (and
	// its link stays valid) before it is cancelled.
	DefaultImportConfirmTimeout = 24 * time.Hour
)

// newConfirmToken returns a fresh token and its digest.
func newConfirmToken() (string, [sha256.Size]byte) {
	var secret [32]byte
	_, _ = rand.Read(secret[:]) // crypto/rand.Read never fails
	token := confirmPrefix + confirmEncoding.EncodeToString(secret[:])
	return token, sha256.Sum256([]byte(token))
}

// confirmTokenDigest returns a token's digest; ok is false for what cannot be a token.
func confirmTokenDigest(token string) (digest [sha256.Size]byte, ok bool) {
	if len(token) != confirmTokenLen || !strings.HasPrefix(token, confirmPrefix) {
		return digest, false
	}
	if b, err := confirmEncoding.DecodeString(token[len(confirmPrefix):]); err != nil || len(b) != 32 {
		return digest, false
	}
	return sha256.Sum256([]byte(token)), true
}

// confirmLinkRoute is the confirmation link's route, served without an API key.
const confirmLinkRoute = "/imports/:id/confirm/:token"

// confirmLink is the link of an import's token: absolute under PublicURL, else a path.
func (a *API) confirmLink(id ulid.ULID, token string) string {
	return a.cfg.PublicURL + "/imports/" + id.String() + "/confirm/" + token
}

// Confirmation is an import's confirmation, shown for imports that need one.
type Confirmation struct {
	// ExpiresAt ends the wait: an import not confirmed by then is cancelled, and its link
	// stops working.
	ExpiresAt time.Time `json:"expires_at"`
	// ConfirmedAt is when the import read its confirmation and began.
	ConfirmedAt *time.Time `json:"confirmed_at,omitempty"`
	// URL is the confirmation link: only in the answer to POST /imports, never stored.
	URL string `json:"url,omitempty"`
}

// errLinkInvalid is a confirmation link that confirms nothing: unknown, malformed,
// expired, used, or of an import that has ended. The cases are not told apart.
var errLinkInvalid = errors.New("confirmation link invalid")

// conflict is a request that the resource's state refuses: 409.
type conflict struct{ msg string }

func (e *conflict) Error() string { return e.msg }

var (
	errImportEnded       = &conflict{"the import has already ended"}
	errNoConfirmation    = &conflict{"this import does not wait for a confirmation"}
	errConfirmationEnded = &conflict{"the import's confirmation window has closed"}
)

// confirmImport is POST /imports/{id}/confirm: it confirms an import that waits for its
// confirmation, with the signal tasks.SignalConfirmImport. Confirming again is a no-op
// (one delivery ID per import), so a retry is safe. 202 with the import; 404 unknown
// import; 409 when the import needs no confirmation, its window has closed, or it ended.
func (a *API) confirmImport(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	if _, err := a.q.GetImport(ctx, a.pool, uuidOf(id)); errors.Is(err, pgx.ErrNoRows) {
		return errNotFound
	} else if err != nil {
		return err
	}
	conf, err := a.q.GetImportConfirmation(ctx, a.pool, uuidOf(id))
	if errors.Is(err, pgx.ErrNoRows) {
		return errNoConfirmation
	}
	if err != nil {
		return err
	}
	if !conf.Open && conf.ConfirmedAt == nil {
		return errConfirmationEnded
	}
	by := tasks.ImportConfirmation{Via: "api_key"}
	if k, ok := keyID(c); ok {
		by.KeyID = k.String()
	}
	if err := a.sendConfirmation(ctx, ulid.ULID(conf.JobID.Bytes), by); err != nil {
		return err
	}
	return a.respondImport(c, http.StatusAccepted, id)
}

// ConfirmedByLink is the answer to a confirmation link: nothing about the import but
// that it is confirmed (the link's holder needs no API key, and learns no more).
type ConfirmedByLink struct {
	ImportID  string `json:"import_id"`
	Confirmed bool   `json:"confirmed"`
}

// confirmImportByLink is POST /imports/{id}/confirm/{token}, the confirmation link,
// served without an API key: the token is the credential. It is spent before the signal
// is sent, so two requests with one link cannot both confirm; if the signal cannot be sent
// for a reason other than the import's end (a database error), the link is given back.
// Every refusal is the same 404.
func (a *API) confirmImportByLink(c echo.Context) error {
	id, err := ulid.ParseStrict(c.Param("id"))
	if err != nil {
		return errLinkInvalid
	}
	digest, ok := confirmTokenDigest(c.Param("token"))
	if !ok {
		return errLinkInvalid
	}
	ctx := c.Request().Context()
	conf, err := a.q.GetImportConfirmation(ctx, a.pool, uuidOf(id))
	if errors.Is(err, pgx.ErrNoRows) {
		return errLinkInvalid
	}
	if err != nil {
		return err
	}
	if subtle.ConstantTimeCompare(conf.TokenHash, digest[:]) != 1 {
		return errLinkInvalid
	}
	n, err := a.q.UseImportConfirmationLink(ctx, a.pool, uuidOf(id))
	if err != nil {
		return err
	}
	if n == 0 { // used or expired
		return errLinkInvalid
	}
	err = a.sendConfirmation(ctx, ulid.ULID(conf.JobID.Bytes), tasks.ImportConfirmation{Via: "link"})
	var ended *conflict
	switch {
	case errors.As(err, &ended):
		return errLinkInvalid
	case err != nil:
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if rerr := a.q.RestoreImportConfirmationLink(rctx, a.pool, uuidOf(id)); rerr != nil {
			a.log.ErrorContext(ctx, "confirmation link spent but not sent: it cannot be used again", "import_id", id.String(),
				"err", rerr)
		}
		return err
	}
	return c.JSON(http.StatusAccepted, ConfirmedByLink{ImportID: id.String(), Confirmed: true})
}

// sendConfirmation sends an import's job its confirmation. A job that has ended (or was
// pruned, which only ended jobs are) is errImportEnded.
func (a *API) sendConfirmation(ctx context.Context, job ulid.ULID, by tasks.ImportConfirmation) error {
	_, err := a.queue.Signal(ctx, job, tasks.SignalConfirmImport, by, tasks.ConfirmDeliveryID)
	if errors.Is(err, venturi.ErrJobFinished) || errors.Is(err, venturi.ErrNotFound) {
		return errImportEnded
	}
	return err
}

// toConfirmation is an import's confirmation as the API shows it.
func toConfirmation(r *store.GetImportConfirmationRow) *Confirmation {
	return &Confirmation{ExpiresAt: r.ExpiresAt, ConfirmedAt: r.ConfirmedAt}
}

package venturi

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// ErrHookInvalid is returned for a hook token that resumes nothing: unknown, expired,
// disposed, or already used (single-use hooks). The cases are not told apart, so a token
// cannot be probed.
var ErrHookInvalid = errors.New("venturi: hook token is invalid, expired or used")

// hookPrefix starts every hook token, so that tokens are recognizable in logs and by
// secret scanners.
const hookPrefix = "vhk_"

// CreateHook creates a hook for this run's job: a secret bearer token that resumes the job
// by sending it the signal name ([Queue.ResumeHook]). Hand the token to whoever may resume
// the job (in a link, say), then return [WaitForSignal] with the same name. Only the
// token's SHA-256 is stored. The hook expires after ttl (use the wait's timeout); it can
// be used once unless reusable, and disposed of with [Queue.DisposeHook].
func (r *Run[C]) CreateHook(ctx context.Context, name string, ttl time.Duration, reusable bool) (string, error) {
	if err := validSignal(name, ""); err != nil {
		return "", err
	}
	if ttl <= 0 {
		return "", errors.New("venturi: CreateHook needs a positive ttl")
	}
	if r.hooks == nil {
		return "", errors.New("venturi: CreateHook outside a worker's run")
	}
	var secret [32]byte
	if _, err := rand.Read(secret[:]); err != nil {
		return "", err
	}
	token := hookPrefix + base64.RawURLEncoding.EncodeToString(secret[:])
	sum := sha256.Sum256([]byte(token))
	err := r.hooks(ctx, dbsqlc.CreateHookParams{TokenHash: sum[:], JobID: uuidOf(r.id), Name: name,
		Reusable: reusable, TtlUs: delayOf(ttl)})
	if err != nil {
		return "", err
	}
	return token, nil
}

// hookCreator stores a hook (see Run.CreateHook).
type hookCreator func(ctx context.Context, p dbsqlc.CreateHookParams) error

// ResumeHook resumes the job of a hook token: it sends the hook's signal with payload, as
// [Queue.Signal] does, and returns the job's ID. A single-use hook is used up; a repeated
// call returns [ErrHookInvalid].
func (q *Queue) ResumeHook(ctx context.Context, token string, payload any) (ulid.ULID, SignalResult, error) {
	body, err := encodeJSON(payload)
	if err != nil {
		return ulid.ULID{}, SignalResult{}, err
	}
	sum, ok := hookHash(token)
	if !ok {
		return ulid.ULID{}, SignalResult{}, ErrHookInvalid
	}
	var (
		id  ulid.ULID
		res SignalResult
	)
	err = pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
		h, err := q.q.UseHook(ctx, tx, sum)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrHookInvalid
		}
		if err != nil {
			return err
		}
		id = ulidOf(h.JobID)
		delivery := "hook:" + hex.EncodeToString(sum[:8])
		if h.Reusable {
			delivery += ":" + ulid.Make().String()
		}
		res, err = q.signalTx(ctx, tx, id, h.Name, body, delivery)
		if errors.Is(err, ErrNotFound) || errors.Is(err, ErrJobFinished) {
			return ErrHookInvalid // the same answer for every token that resumes nothing
		}
		return err
	})
	if err != nil {
		return ulid.ULID{}, SignalResult{}, err
	}
	return id, res, nil
}

// DisposeHook disposes of a hook: its token resumes nothing any more. It returns
// [ErrHookInvalid] for a token that was unknown or already disposed of.
func (q *Queue) DisposeHook(ctx context.Context, token string) error {
	sum, ok := hookHash(token)
	if !ok {
		return ErrHookInvalid
	}
	n, err := q.q.DisposeHook(ctx, q.pool, sum)
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrHookInvalid
	}
	return nil
}

// hookHash returns the stored form of a token; ok is false for what cannot be a token.
func hookHash(token string) ([]byte, bool) {
	if !strings.HasPrefix(token, hookPrefix) || len(token) > 128 {
		return nil, false
	}
	sum := sha256.Sum256([]byte(token))
	return sum[:], true
}

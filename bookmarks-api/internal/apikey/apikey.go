// Package apikey creates, lists, revokes and checks the API's keys.
//
// A key reads bmk_<id>_<secret>: the fixed prefix (so that a leaked key is recognisable,
// by people and by secret scanners), the key's ID (a 26-character ULID, not secret: it
// finds the row and names the key in logs and in `keys list`) and the secret, 32 random
// bytes from crypto/rand in unpadded base64url (43 characters). The key is printed once
// when it is created; the database keeps only the SHA-256 digest of the whole key.
//
// Why SHA-256 and not a password hash (bcrypt, scrypt, argon2): a slow KDF protects
// low-entropy secrets that people choose, whose digests an attacker with the table could
// guess offline. A 256-bit random secret cannot be guessed, fast hash or not, so a slow
// hash would add nothing but CPU per request (and a way to exhaust it with bad keys).
// [Store.Authenticate] looks the row up by the ID and compares the digests in constant time
// (crypto/subtle), so the response time says nothing about how much of a guess matched.
package apikey

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/bookmarks/bookmarks-api/internal/store"
)

// Prefix starts every key.
const Prefix = "bmk_"

// MaxNameLen is the longest key name, in characters.
const MaxNameLen = 100

const (
	idLen     = 26 // a ULID's text form
	secretLen = 43 // 32 bytes in unpadded base64url
	keyLen    = len(Prefix) + idLen + 1 + secretLen
)

var secretEncoding = base64.RawURLEncoding.Strict()

// Errors of the Store's operations.
var (
	// ErrNotFound is an unknown key ID.
	ErrNotFound = errors.New("no such API key")
	// ErrNameTaken is a name an active key already has (revoke it, or create with replace).
	ErrNameTaken = errors.New("an active API key already has this name")
)

// Key describes a stored key (never the key itself).
type Key struct {
	ID        ulid.ULID
	Name      string
	CreatedAt time.Time
	RevokedAt *time.Time // nil while the key is active
	// Ops is the key's role on the operations dashboard (/ops).
	Ops Ops
}

// Ops is a key's role on the operations dashboard that the API mounts at /ops.
type Ops string

// Roles on the dashboard.
const (
	// OpsNone: the key cannot open the dashboard (the default).
	OpsNone Ops = ""
	// OpsRead: the key sees every page of the dashboard and changes nothing.
	OpsRead Ops = "read"
	// OpsWrite: the key may also act: retry, cancel and delete jobs, pause queues and set
	// their limits, pause cron schedules, reset circuit breakers.
	OpsWrite Ops = "write"
)

// ParseOps reads a role as `keys create --ops` takes it: read, write, or none (or empty).
func ParseOps(s string) (Ops, error) {
	switch s {
	case "", "none":
		return OpsNone, nil
	case "read":
		return OpsRead, nil
	case "write":
		return OpsWrite, nil
	}
	return OpsNone, fmt.Errorf("--ops %q: want read, write or none", s)
}

// String names the role: read, write, or - for none.
func (o Ops) String() string {
	if o == OpsNone {
		return "-"
	}
	return string(o)
}

func (o Ops) text() pgtype.Text { return pgtype.Text{String: string(o), Valid: o != OpsNone} }

// Generate returns a new key with its ID and the digest to store.
func Generate() (id ulid.ULID, key string, digest [sha256.Size]byte) {
	id = ulid.Make()
	var secret [32]byte
	_, _ = rand.Read(secret[:]) // crypto/rand.Read never fails (it panics if the system has no randomness)
	key = Prefix + id.String() + "_" + secretEncoding.EncodeToString(secret[:])
	return id, key, Digest(key)
}

// Digest is the SHA-256 digest of a key, as stored.
func Digest(key string) [sha256.Size]byte { return sha256.Sum256([]byte(key)) }

// Parse checks a key's form and returns its ID; ok is false for anything that is not
// bmk_<ULID>_<43 base64url characters encoding 32 bytes>.
func Parse(key string) (id ulid.ULID, ok bool) {
	if len(key) != keyLen || !strings.HasPrefix(key, Prefix) || key[len(Prefix)+idLen] != '_' {
		return ulid.ULID{}, false
	}
	id, err := ulid.ParseStrict(key[len(Prefix) : len(Prefix)+idLen])
	if err != nil {
		return ulid.ULID{}, false
	}
	if b, err := secretEncoding.DecodeString(key[len(Prefix)+idLen+1:]); err != nil || len(b) != 32 {
		return ulid.ULID{}, false
	}
	return id, true
}

// CheckName trims a key name and validates it: 1 to MaxNameLen characters of valid text
// without control characters. It returns the name, or a message saying what is wrong.
func CheckName(name string) (string, string) {
	name = strings.TrimSpace(name)
	switch {
	case name == "":
		return "", "a key needs a name (--name)"
	case !utf8.ValidString(name) || strings.IndexFunc(name, unicode.IsControl) >= 0:
		return "", "the name must be text without control characters"
	case utf8.RuneCountInString(name) > MaxNameLen:
		return "", fmt.Sprintf("the name must be at most %d characters", MaxNameLen)
	}
	return name, ""
}

// Store keeps the keys in the application's database (table api_key).
type Store struct {
	pool *pgxpool.Pool
	q    *store.Queries
}

// NewStore returns a Store on pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool, q: store.New()} }

// Created is the result of [Store.Create].
type Created struct {
	// Key is the key itself: show it once, it cannot be recovered.
	Key string
	// ID is the key's ID.
	ID ulid.ULID
	// Name is the key's (trimmed) name.
	Name string
	// Revoked lists the keys a replace revoked.
	Revoked []ulid.ULID
}

// Create stores a new key named name, without a dashboard role. Names are unique among
// active keys: with replace false an active key with the same name is ErrNameTaken; with
// replace true that key is revoked in the same transaction (a rotation).
func (s *Store) Create(ctx context.Context, name string, replace bool) (Created, error) {
	return s.CreateOps(ctx, name, replace, OpsNone)
}

// CreateOps is Create for a key with the role ops on the operations dashboard.
func (s *Store) CreateOps(ctx context.Context, name string, replace bool, ops Ops) (Created, error) {
	if _, err := ParseOps(string(ops)); err != nil {
		return Created{}, err
	}
	name, msg := CheckName(name)
	if msg != "" {
		return Created{}, errors.New(msg)
	}
	id, key, digest := Generate()
	out := Created{Key: key, ID: id, Name: name}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if replace {
			ids, err := s.q.RevokeActiveAPIKeysByName(ctx, tx, name)
			if err != nil {
				return err
			}
			for _, r := range ids {
				out.Revoked = append(out.Revoked, ulid.ULID(r.Bytes))
			}
		}
		return s.q.InsertAPIKey(ctx, tx, store.InsertAPIKeyParams{ID: uuidOf(id), Name: name, KeyHash: digest[:], Ops: ops.text()})
	})
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" && pe.ConstraintName == "api_key_active_name_idx" {
		return Created{}, ErrNameTaken
	}
	if err != nil {
		return Created{}, err
	}
	return out, nil
}

// List returns every key, active and revoked, oldest first.
func (s *Store) List(ctx context.Context) ([]Key, error) {
	rows, err := s.q.ListAPIKeys(ctx, s.pool)
	if err != nil {
		return nil, err
	}
	out := make([]Key, 0, len(rows))
	for _, r := range rows {
		out = append(out, Key{ID: ulid.ULID(r.ID.Bytes), Name: r.Name, CreatedAt: r.CreatedAt, RevokedAt: r.RevokedAt, Ops: Ops(r.Ops.String)})
	}
	return out, nil
}

// Revoke revokes a key, named by its ID or given whole (a leaked key can be revoked as
// found). Revoking a revoked key changes nothing and is not an error.
func (s *Store) Revoke(ctx context.Context, idOrKey string) (Key, error) {
	idOrKey = strings.TrimSpace(idOrKey)
	id, ok := Parse(idOrKey)
	if !ok {
		var err error
		if id, err = ulid.ParseStrict(idOrKey); err != nil {
			return Key{}, fmt.Errorf("%q is neither a key ID (26 characters, as `keys list` shows) nor a key", shorten(idOrKey))
		}
	}
	r, err := s.q.RevokeAPIKey(ctx, s.pool, uuidOf(id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Key{}, ErrNotFound
	}
	if err != nil {
		return Key{}, err
	}
	return Key{ID: id, Name: r.Name, RevokedAt: r.RevokedAt}, nil
}

// Authenticate checks a key presented by a client. ok is false for a malformed, unknown,
// revoked or wrong key, without saying which; err is set only when the database could not
// answer.
func (s *Store) Authenticate(ctx context.Context, key string) (id ulid.ULID, ok bool, err error) {
	k, ok, err := s.Lookup(ctx, key)
	return k.ID, ok, err
}

// Lookup is Authenticate returning the key's name and dashboard role (not its creation
// time) as well.
func (s *Store) Lookup(ctx context.Context, key string) (Key, bool, error) {
	id, ok := Parse(key)
	if !ok {
		return Key{}, false, nil
	}
	row, err := s.q.GetActiveAPIKey(ctx, s.pool, uuidOf(id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Key{}, false, nil
	}
	if err != nil {
		return Key{}, false, err
	}
	digest := Digest(key)
	if subtle.ConstantTimeCompare(row.KeyHash, digest[:]) != 1 {
		return Key{}, false, nil
	}
	return Key{ID: id, Name: row.Name, Ops: Ops(row.Ops.String)}, true, nil
}

// shorten keeps an echoed argument short (it may be a mistyped key).
func shorten(s string) string {
	if len(s) > 12 {
		return s[:12] + "…"
	}
	return s
}

func uuidOf(id ulid.ULID) pgtype.UUID { return pgtype.UUID{Bytes: id, Valid: true} }

package apikey

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/bookmarks/sql/dbtest"
	"github.com/venturi-dev/bookmarks/sql/migrations"
)

func setup(t *testing.T) *Store {
	t.Helper()
	pool := dbtest.Pool(t, "bmkey", 3)
	if _, err := migrations.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return NewStore(pool)
}

var keyForm = regexp.MustCompile(`^bmk_[0-9A-HJKMNP-TV-Z]{26}_[A-Za-z0-9_-]{43}$`)

func TestGenerateAndParse(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 100 {
		id, key, digest := Generate()
		if !keyForm.MatchString(key) || seen[key] {
			t.Fatalf("key %q: malformed or repeated", key)
		}
		seen[key] = true
		if got, ok := Parse(key); !ok || got != id {
			t.Fatalf("Parse(%q) = %v, %v; want %v", key, got, ok, id)
		}
		if Digest(key) != digest {
			t.Fatal("the digest returned is not the key's")
		}
	}
	_, key, _ := Generate()
	for _, bad := range []string{
		"", "bmk_", key[:len(key)-1], key + "A", "xyz_" + key[4:], strings.Replace(key, "_", "-", 1),
		key[:30] + "-" + key[31:],                             // the separator
		key[:4] + "8" + key[5:],                               // a ULID past its range (first character at most 7)
		key[:4] + "I" + key[5:],                               // not Crockford base32
		key[:len(key)-1] + "B",                                // a secret whose padding bits are not zero (not canonical)
		key[:40] + "+/" + key[42:],                            // standard base64, not base64url
		key[:4] + strings.ToLower(key[4:30]) + key[30:] + "x", // too long
	} {
		if _, ok := Parse(bad); ok {
			t.Errorf("Parse(%q) accepted it", bad)
		}
	}
}

func TestCheckName(t *testing.T) {
	t.Parallel()
	if n, msg := CheckName("  laptop  "); n != "laptop" || msg != "" {
		t.Fatalf("CheckName = %q %q", n, msg)
	}
	for _, bad := range []string{"", "   ", "a\nb", "a\x00", "\xff", strings.Repeat("é", MaxNameLen+1)} {
		if _, msg := CheckName(bad); msg == "" {
			t.Errorf("CheckName(%q) accepted it", bad)
		}
	}
	if _, msg := CheckName(strings.Repeat("é", MaxNameLen)); msg != "" {
		t.Fatalf("a name of %d characters: %s", MaxNameLen, msg)
	}
}

func TestStoreLifecycle(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()

	a, err := s.Create(ctx, "ci", false)
	if err != nil || !keyForm.MatchString(a.Key) || a.Name != "ci" || len(a.Revoked) != 0 {
		t.Fatalf("Create = %+v, %v", a, err)
	}
	if id, ok, err := s.Authenticate(ctx, a.Key); err != nil || !ok || id != a.ID {
		t.Fatalf("Authenticate(new key) = %v %v %v", id, ok, err)
	}
	// Only the digest is stored.
	var stored []byte
	if err := s.pool.QueryRow(ctx, "SELECT key_hash FROM api_key WHERE id = $1", uuidOf(a.ID)).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if d := Digest(a.Key); string(stored) != string(d[:]) || strings.Contains(string(stored), a.Key[31:]) {
		t.Fatal("the stored value is not the key's SHA-256 digest")
	}
	// Names are unique among active keys; replace rotates.
	if _, err := s.Create(ctx, " ci ", false); !errors.Is(err, ErrNameTaken) {
		t.Fatalf("a second active key named ci: %v, want ErrNameTaken", err)
	}
	b, err := s.Create(ctx, "ci", true)
	if err != nil || len(b.Revoked) != 1 || b.Revoked[0] != a.ID {
		t.Fatalf("Create with replace = %+v, %v; want a's revocation", b, err)
	}
	if _, ok, _ := s.Authenticate(ctx, a.Key); ok {
		t.Fatal("the replaced key still authenticates")
	}
	if _, ok, _ := s.Authenticate(ctx, b.Key); !ok {
		t.Fatal("the new key does not authenticate")
	}
	// Wrong secret with a real ID, unknown ID, garbage: refused, without an error.
	wrong := WrongSecret(b.Key)
	_, unknown, _ := Generate()
	for _, k := range []string{wrong, unknown, "", "Bearer " + b.Key, b.Key[:20]} {
		if _, ok, err := s.Authenticate(ctx, k); ok || err != nil {
			t.Fatalf("Authenticate(%q) = %v, %v", k, ok, err)
		}
	}
	// List shows both, oldest first, the first revoked.
	list, err := s.List(ctx)
	if err != nil || len(list) != 2 || list[0].ID != a.ID || list[0].RevokedAt == nil || list[1].RevokedAt != nil {
		t.Fatalf("List = %+v, %v", list, err)
	}
	// Revoke by ID and by the whole key; twice is fine; unknown is ErrNotFound.
	if k, err := s.Revoke(ctx, b.ID.String()); err != nil || k.RevokedAt == nil || k.Name != "ci" {
		t.Fatalf("Revoke(id) = %+v, %v", k, err)
	}
	if _, err := s.Revoke(ctx, b.Key); err != nil {
		t.Fatalf("Revoke(key) of a revoked key: %v", err)
	}
	if _, ok, _ := s.Authenticate(ctx, b.Key); ok {
		t.Fatal("a revoked key authenticates")
	}
	if _, err := s.Revoke(ctx, ulid.Make().String()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Revoke(unknown) = %v", err)
	}
	if _, err := s.Revoke(ctx, "nonsense"); err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("Revoke(nonsense) = %v, want a usage error", err)
	}
	// A revoked name is free again.
	if _, err := s.Create(ctx, "ci", false); err != nil {
		t.Fatalf("re-creating a revoked name: %v", err)
	}
	if _, err := s.Create(ctx, "", false); err == nil {
		t.Fatal("an empty name was accepted")
	}
}

func TestAuthenticateReportsDatabaseFailure(t *testing.T) {
	t.Parallel()
	s := setup(t)
	k, err := s.Create(context.Background(), "x", false)
	if err != nil {
		t.Fatal(err)
	}
	s.pool.Close()
	if _, ok, err := s.Authenticate(context.Background(), k.Key); ok || err == nil {
		t.Fatalf("Authenticate with the database gone = %v, %v; want an error, not a refusal", ok, err)
	}
}

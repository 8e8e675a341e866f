package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/bookmarks/bookmarks-api/internal/apikey"
	"github.com/venturi-dev/bookmarks/sql/dbtest"
	"github.com/venturi-dev/bookmarks/sql/migrations"
)

// TestKeysCommand runs `bookmarks-api keys` as a user would (minus the process).
func TestKeysCommand(t *testing.T) {
	ctx := context.Background()
	url := dbtest.SchemaURL(t, "bmcli")
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := migrations.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DATABASE_URL", url)
	run := func(args ...string) (string, string, error) {
		var out, errOut bytes.Buffer
		err := runKeys(ctx, args, &out, &errOut)
		return out.String(), errOut.String(), err
	}

	out, msg, err := run("create", "--name", "laptop")
	key := strings.TrimSpace(out)
	id, ok := apikey.Parse(key)
	if err != nil || !ok || strings.Count(out, "\n") != 1 {
		t.Fatalf("create: stdout %q (want the key alone), %v", out, err)
	}
	if !strings.Contains(msg, id.String()) || !strings.Contains(msg, "only this once") {
		t.Fatalf("create: stderr %q", msg)
	}
	if _, ok, err := apikey.NewStore(pool).Authenticate(ctx, key); !ok || err != nil {
		t.Fatalf("the printed key does not authenticate: %v %v", ok, err)
	}
	if _, _, err := run("create", "--name", "laptop"); err == nil || !strings.Contains(err.Error(), "--replace") {
		t.Fatalf("a second laptop key: %v, want a hint at --replace", err)
	}
	out, msg, err = run("create", "--name=laptop", "--replace")
	if err != nil || !strings.Contains(msg, "revoked key "+id.String()) {
		t.Fatalf("create --replace: %q %q %v", out, msg, err)
	}
	newKey := strings.TrimSpace(out)

	out, _, err = run("list")
	if err != nil || !strings.HasPrefix(out, "ID") || strings.Count(out, "laptop") != 2 || strings.Contains(out, key) || strings.Contains(out, newKey) {
		t.Fatalf("list: %q %v (two laptop keys, no key shown)", out, err)
	}
	out, msg, err = run("create", "--name", "oncall", "--ops", "write")
	if err != nil || !strings.Contains(msg, "/ops") {
		t.Fatalf("create --ops write: %q %q %v", out, msg, err)
	}
	if k, ok, err := apikey.NewStore(pool).Lookup(ctx, strings.TrimSpace(out)); !ok || err != nil || k.Ops != apikey.OpsWrite || k.Name != "oncall" {
		t.Fatalf("the ops key: %+v %v %v", k, ok, err)
	}
	if out, _, err := run("list"); err != nil || !strings.Contains(out, "OPS") || !strings.Contains(out, "write") {
		t.Fatalf("list shows no dashboard role: %q %v", out, err)
	}
	out, _, err = run("revoke", newKey)
	if err != nil || !strings.Contains(out, "revoked key") {
		t.Fatalf("revoke: %q %v", out, err)
	}
	if _, ok, _ := apikey.NewStore(pool).Authenticate(ctx, newKey); ok {
		t.Fatal("a revoked key authenticates")
	}

	for _, args := range [][]string{
		{}, {"rotate"}, {"create"}, {"create", "--name", ""}, {"create", "--name", "a", "extra"}, {"list", "x"},
		{"revoke"}, {"revoke", "a", "b"}, {"revoke", "nonsense"}, {"revoke", apikey.Prefix + strings.Repeat("0", 26)},
		{"create", "--bogus"}, {"create", "--name", "x", "--ops", "admin"},
	} {
		if _, _, err := run(args...); err == nil {
			t.Errorf("keys %q: no error", args)
		}
	}
	t.Setenv("DATABASE_URL", "")
	if _, _, err := run("list"); err == nil || !strings.Contains(err.Error(), "DATABASE_URL") {
		t.Fatalf("without DATABASE_URL: %v", err)
	}
}

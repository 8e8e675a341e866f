// Package testdb gives venturi's tests a migrated, private schema in a real PostgreSQL.
//
// The server comes from TEST_DATABASE_URL (or DATABASE_URL). `make test` sets it, starting
// a throwaway cluster with scripts/pg.sh when needed. A missing database fails the test:
// it never skips, so a green run always means the tests ran.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrNoURL is LookupURL's error when neither TEST_DATABASE_URL nor DATABASE_URL is set.
var ErrNoURL = errors.New("TEST_DATABASE_URL is not set: point it at a PostgreSQL database in which the tests may create and drop schemas, e.g. TEST_DATABASE_URL=postgres://user:pass@localhost:5432/venturi_test (in the venturi repository, `make test` starts one)")

// LookupURL returns TEST_DATABASE_URL, or DATABASE_URL when it is unset, or ErrNoURL.
func LookupURL() (string, error) {
	for _, k := range []string{"TEST_DATABASE_URL", "DATABASE_URL"} {
		if u := os.Getenv(k); u != "" {
			return u, nil
		}
	}
	return "", ErrNoURL
}

// URL returns the test database URL or fails the test.
func URL(tb testing.TB) string {
	tb.Helper()
	u, err := LookupURL()
	if err != nil {
		tb.Fatal(err.Error())
	}
	return u
}

// schemaName returns a fresh schema name with a random suffix.
func schemaName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "vt_" + hex.EncodeToString(b[:])
}

// Schema creates an empty schema named after a random suffix and drops it when the test
// ends. It returns the schema's name.
func Schema(tb testing.TB) string {
	tb.Helper()
	ctx := context.Background()
	admin := adminPool(tb)
	name := schemaName()
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		tb.Fatalf("create schema: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = admin.Exec(ctx, "DROP SCHEMA "+name+" CASCADE")
	})
	return name
}

var admins struct {
	mu    sync.Mutex
	pools map[string]*pgxpool.Pool
}

// adminPool returns the pool that creates and drops schemas, one per database URL for
// the whole test binary: a connection costs the server more than the statement, and
// parallel tests would otherwise open two for every schema. It stays open until the
// process exits.
func adminPool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	url := URL(tb)
	admins.mu.Lock()
	defer admins.mu.Unlock()
	if p := admins.pools[url]; p != nil {
		return p
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		tb.Fatalf("parse TEST_DATABASE_URL: %v", err)
	}
	cfg.MaxConns = 4
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	if admins.pools == nil {
		admins.pools = map[string]*pgxpool.Pool{}
	}
	admins.pools[url] = p
	return p
}

// Pool returns a pool whose search_path is a fresh schema. The pool closes when the test
// ends. maxConns 0 keeps pgxpool's default.
func Pool(tb testing.TB, schema string, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(URL(tb))
	if err != nil {
		tb.Fatalf("parse TEST_DATABASE_URL: %v", err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// Open is Schema and Pool for callers without a testing.TB, such as examples: it creates
// an empty schema named after a random suffix and returns a pool whose search_path is
// that schema, with a function that closes the pool and drops the schema. A missing URL
// is ErrNoURL. maxConns 0 keeps pgxpool's default.
func Open(ctx context.Context, maxConns int32) (*pgxpool.Pool, func(), error) {
	url, err := LookupURL()
	if err != nil {
		return nil, nil, err
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, nil, fmt.Errorf("parse database URL: %w", err)
	}
	name := schemaName()
	cfg.ConnConfig.RuntimeParams["search_path"] = name
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("connect: %w", err)
	}
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("create schema: %w", err)
	}
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = pool.Exec(ctx, "DROP SCHEMA "+name+" CASCADE")
		pool.Close()
	}
	return pool, drop, nil
}

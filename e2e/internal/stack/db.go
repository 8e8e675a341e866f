// Package stack runs the bookmarks system for the e2e suite and the API overload driver
// (e2e/overload): a PostgreSQL (testcontainers when a Docker engine answers, otherwise the
// project's scripts/pg.sh server named by TEST_DATABASE_URL; OpenDatabaseAt for a given
// URL), and the real bookmarks-api and bookmarks-worker binaries as processes.
package stack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/modules/postgres"

	"github.com/venturi-dev/bookmarks/sql/migrations"
)

// Database is a migrated, private schema for one suite run.
type Database struct {
	URL     string // DATABASE_URL for the binaries; its search_path is the schema
	Pool    *pgxpool.Pool
	Source  string // "testcontainers" or "TEST_DATABASE_URL"
	cleanup []func()
}

// dockerAvailable reports whether a Docker engine answers within a few seconds.
func dockerAvailable() bool {
	if os.Getenv("E2E_NO_DOCKER") != "" {
		return false
	}
	if _, err := exec.LookPath("docker"); err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, "docker", "info").Run() == nil
}

// OpenDatabase finds a PostgreSQL and migrates a fresh schema in it. Without Docker and
// without TEST_DATABASE_URL it fails: the suite never skips, so green means it ran.
func OpenDatabase(ctx context.Context) (*Database, error) {
	db := &Database{}
	base := ""
	if dockerAvailable() {
		ctr, err := postgres.Run(ctx, "docker.io/postgres:17-alpine",
			postgres.WithDatabase("bookmarks"), postgres.WithUsername("postgres"), postgres.WithPassword("postgres"),
			postgres.BasicWaitStrategies())
		if ctr != nil {
			db.cleanup = append(db.cleanup, func() { _ = testcontainers.TerminateContainer(ctr) })
		}
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("testcontainers postgres: %w", err)
		}
		if base, err = ctr.ConnectionString(ctx, "sslmode=disable"); err != nil {
			db.Close()
			return nil, err
		}
		db.Source = "testcontainers"
	} else {
		for _, k := range []string{"TEST_DATABASE_URL", "DATABASE_URL"} {
			if base = os.Getenv(k); base != "" {
				break
			}
		}
		if base == "" {
			return nil, errors.New("no Docker engine and no TEST_DATABASE_URL: run `make test/e2e` from the repository root " +
				"(it starts PostgreSQL with scripts/pg.sh), or `scripts/pg.sh with -- make test/e2e`")
		}
		db.Source = "TEST_DATABASE_URL"
	}
	if err := db.openSchema(ctx, base); err != nil {
		return nil, err
	}
	return db, nil
}

// OpenDatabaseAt migrates a fresh schema in the PostgreSQL at base (a scripts/pg.sh URL),
// without looking for Docker: for drivers that run against a cluster they were given.
func OpenDatabaseAt(ctx context.Context, base string) (*Database, error) {
	db := &Database{Source: "DATABASE_URL"}
	if err := db.openSchema(ctx, base); err != nil {
		return nil, err
	}
	return db, nil
}

// openSchema creates a private schema in the database at base, points db.URL and db.Pool
// at it and migrates it. On error it closes db.
func (db *Database) openSchema(ctx context.Context, base string) error {
	admin, err := pgxpool.New(ctx, base)
	if err != nil {
		db.Close()
		return err
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "e2e_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		admin.Close()
		db.Close()
		return err
	}
	db.cleanup = append(db.cleanup, func() {
		_, _ = admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		admin.Close()
	})
	u, err := url.Parse(base)
	if err != nil {
		db.Close()
		return err
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	db.URL = u.String()
	if db.Pool, err = pgxpool.New(ctx, db.URL); err != nil {
		db.Close()
		return err
	}
	db.cleanup = append(db.cleanup, db.Pool.Close)
	if _, err := migrations.Migrate(ctx, db.Pool); err != nil {
		db.Close()
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// Close drops the schema and stops what OpenDatabase started.
func (db *Database) Close() {
	for i := len(db.cleanup) - 1; i >= 0; i-- {
		db.cleanup[i]()
	}
	db.cleanup = nil
}

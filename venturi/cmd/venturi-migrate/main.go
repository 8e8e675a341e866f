// Command venturi-migrate applies venturi's migrations to the database named by
// DATABASE_URL (or the -database flag). The schema is the connection's search_path.
//
//	DATABASE_URL=postgres://... go run github.com/venturi-dev/venturi/cmd/venturi-migrate
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi"
)

func main() {
	url := flag.String("database", os.Getenv("DATABASE_URL"), "PostgreSQL connection URL (default $DATABASE_URL)")
	flag.Parse()
	if err := run(*url); err != nil {
		fmt.Fprintln(os.Stderr, "venturi-migrate:", err)
		os.Exit(1)
	}
}

func run(url string) error {
	if url == "" {
		return fmt.Errorf("no database: set DATABASE_URL or pass -database")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	applied, err := venturi.Migrate(ctx, pool)
	if err != nil {
		return err
	}
	fmt.Printf("venturi: applied %d migration(s) %v\n", len(applied), applied)
	return nil
}

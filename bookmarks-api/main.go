// Command bookmarks-api serves the bookmarks HTTP API.
//
//	bookmarks-api           serve (DATABASE_URL, BOOKMARKS_API_ADDR, ...: see server.FromEnv)
//	bookmarks-api migrate   apply venturi's and the application's migrations to DATABASE_URL
//	bookmarks-api keys create --name NAME [--replace] | list | revoke ID|KEY
//	                        manage the API keys in DATABASE_URL (create prints the key once)
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/bookmarks/bookmarks-api/server"
	"github.com/venturi-dev/bookmarks/sql/migrations"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("service", "bookmarks-api")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch cmd := firstArg(); cmd {
	case "", "serve":
		var cfg server.Config
		if cfg, err = server.FromEnv(); err == nil {
			err = server.Run(ctx, cfg, log)
		}
	case "migrate":
		err = migrate(ctx)
	case "keys":
		// A command-line tool: plain messages on stderr, not JSON logs.
		if err := runKeys(ctx, os.Args[2:], os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "bookmarks-api:", err)
			os.Exit(1)
		}
		return
	default:
		err = fmt.Errorf("unknown command %q (want serve, migrate or keys)", cmd)
	}
	if err != nil {
		log.Error("bookmarks-api failed", "err", err)
		os.Exit(1)
	}
}

func firstArg() string {
	if len(os.Args) > 1 {
		return os.Args[1]
	}
	return ""
}

func migrate(ctx context.Context) error {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		return fmt.Errorf("DATABASE_URL is not set")
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	res, err := migrations.Migrate(ctx, pool)
	if err != nil {
		return err
	}
	fmt.Printf("migrate: venturi applied %v, bookmarks applied %v\n", res.Venturi, res.App)
	return nil
}

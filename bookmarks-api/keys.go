package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/bookmarks/bookmarks-api/internal/apikey"
)

const keysUsage = `usage: bookmarks-api keys COMMAND (DATABASE_URL names the app's database)

  keys create --name NAME [--replace] [--ops read|write]
                                        create a key and print it once on stdout
                                        (--replace revokes the active key of that name: a rotation;
                                        --ops lets it open the dashboard at /ops: read sees it,
                                        write may also act there)
  keys list                             list the keys: ID, name, dashboard role, created, revoked
  keys revoke ID|KEY                    revoke a key, named by its ID (as listed) or given whole
`

// runKeys runs `bookmarks-api keys ...`: args are the words after "keys". The key that
// create prints is the only thing written to stdout, so `KEY=$(bookmarks-api keys create
// --name x)` works; what it says about the key goes to stderr.
func runKeys(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, keysUsage)
		return errors.New("keys: name a command (create, list or revoke)")
	}
	cmd, args := args[0], args[1:]
	var (
		name    string
		replace bool
		ops     string
	)
	fs := flag.NewFlagSet("keys "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, keysUsage) }
	switch cmd {
	case "create":
		fs.StringVar(&name, "name", "", "the key's name (who or what uses it)")
		fs.BoolVar(&replace, "replace", false, "revoke the active key with the same name")
		fs.StringVar(&ops, "ops", "", "the key's role on the operations dashboard at /ops: read or write (default: none)")
	case "list", "revoke":
	case "help", "-h", "--help":
		fmt.Fprint(stdout, keysUsage)
		return nil
	default:
		fmt.Fprint(stderr, keysUsage)
		return fmt.Errorf("keys: unknown command %q (want create, list or revoke)", cmd)
	}
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("keys %s: %w", cmd, err)
	}
	switch {
	case cmd == "revoke" && fs.NArg() != 1:
		return errors.New("keys revoke: name one key by its ID (see keys list) or give the key")
	case cmd != "revoke" && fs.NArg() != 0:
		return fmt.Errorf("keys %s: unexpected argument %q", cmd, fs.Arg(0))
	}
	var role apikey.Ops
	if cmd == "create" {
		if _, msg := apikey.CheckName(name); msg != "" {
			return errors.New("keys create: " + msg)
		}
		var err error
		if role, err = apikey.ParseOps(ops); err != nil {
			return fmt.Errorf("keys create: %w", err)
		}
	}
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		return errors.New("DATABASE_URL is not set")
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	defer pool.Close()
	keys := apikey.NewStore(pool)

	switch cmd {
	case "create":
		k, err := keys.CreateOps(ctx, name, replace, role)
		if errors.Is(err, apikey.ErrNameTaken) {
			return fmt.Errorf("keys create: an active key is already named %q (revoke it, or pass --replace to rotate it)", name)
		}
		if err != nil {
			return fmt.Errorf("keys create: %w", err)
		}
		fmt.Fprintln(stdout, k.Key)
		for _, id := range k.Revoked {
			fmt.Fprintf(stderr, "revoked key %s (replaced)\n", id)
		}
		fmt.Fprintf(stderr, "created key %s named %q; it is shown only this once: store it now\n", k.ID, k.Name)
		if role != apikey.OpsNone {
			fmt.Fprintf(stderr, "it opens the dashboard at /ops (%s): sign in with any user name and the key as the password\n", role)
		}
	case "list":
		list, err := keys.List(ctx)
		if err != nil {
			return fmt.Errorf("keys list: %w", err)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tOPS\tCREATED\tREVOKED")
		for _, k := range list {
			revoked := "-"
			if k.RevokedAt != nil {
				revoked = k.RevokedAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, k.Ops, k.CreatedAt.UTC().Format(time.RFC3339), revoked)
		}
		return tw.Flush()
	case "revoke":
		k, err := keys.Revoke(ctx, fs.Arg(0))
		if err != nil {
			return fmt.Errorf("keys revoke: %w", err)
		}
		fmt.Fprintf(stdout, "revoked key %s named %q at %s\n", k.ID, k.Name, k.RevokedAt.UTC().Format(time.RFC3339))
	}
	return nil
}

// Command venturi operates a venturi queue from a terminal: migrations, jobs (list, show,
// retry, cancel, delete, each over the filter grammar of the dashboard), workflows and
// batches (list, show, cancel, retry), queues, cron schedules, circuit breakers, the audit
// log, stats and a live view (top).
//
// It connects to the database named by DATABASE_URL; the schema is the URL's search_path
// (as for every venturi pool), or the --schema flag. `venturi help` lists the commands.
//
//	go install github.com/venturi-dev/venturi/cmd/venturi@latest
//	DATABASE_URL='postgres://...?search_path=app' venturi jobs list state:dead
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // the command failed (or, for migrate status, found pending migrations)
	exitUsage = 2 // bad flags or arguments
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	a := &app{
		stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv,
		stdinTTY: isTerminal(os.Stdin), stdoutTTY: isTerminal(os.Stdout),
	}
	code := a.run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

// app is one invocation: its streams, its environment and, once a command needs it, its
// connection.
type app struct {
	stdin               io.Reader
	stdout, stderr      io.Writer
	getenv              func(string) string
	stdinTTY, stdoutTTY bool

	pool      *pgxpool.Pool
	q         *venturi.Queue
	passwords []string // DATABASE_URL's password, as written and decoded: redacted from every error printed
}

// command is a node of the command tree: a group (subs) or a leaf (setup).
type command struct {
	name    string
	args    string // the positional arguments, for the usage line
	summary string
	detail  string // more help, printed under the usage line
	subs    []*command
	// setup defines the leaf's flags on fs and returns the function that runs it with
	// the positional arguments. It runs for help too, so it must not act.
	setup func(a *app, fs *flag.FlagSet) func(ctx context.Context, args []string) error
}

// usageError is a mistake in the command line: exit 2, with the command's usage.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// exitCode ends a command with a code and no further message (its output said it all).
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// run runs the command line args and returns the process's exit code.
func (a *app) run(ctx context.Context, args []string) int {
	defer func() {
		if a.pool != nil {
			a.pool.Close()
		}
	}()
	root := commands()
	if len(args) == 0 {
		a.printGroup(a.stderr, nil, root)
		return exitUsage
	}
	if args[0] == "help" || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		return a.help(args[1:])
	}
	path, cmd, rest := lookup(root, args)
	if cmd == nil {
		parent := root
		if len(path) > 0 {
			parent = path[len(path)-1].subs
		}
		a.errorf("%s: unknown command %q", joinPath(path), rest[0])
		a.printGroup(a.stderr, path, parent)
		return exitUsage
	}
	if cmd.setup == nil { // a group without its subcommand
		if len(rest) > 0 && isHelpFlag(rest[0]) {
			a.printGroup(a.stdout, path, cmd.subs)
			return exitOK
		}
		a.errorf("%s: which one? %s", joinPath(path), subNames(cmd.subs))
		a.printGroup(a.stderr, path, cmd.subs)
		return exitUsage
	}
	fs := newFlagSet(joinPath(path))
	runFn := cmd.setup(a, fs)
	pos, err := parseInterspersed(fs, rest)
	if errors.Is(err, flag.ErrHelp) {
		a.printLeaf(a.stdout, path, fs, true)
		return exitOK
	}
	if err == nil {
		err = runFn(ctx, pos)
	}
	return a.exit(path, fs, err)
}

// exit reports err on stderr and returns the exit code it means.
func (a *app) exit(path []*command, fs *flag.FlagSet, err error) int {
	var ue *usageError
	var code exitCode
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &code):
		return int(code)
	case errors.As(err, &ue):
		a.errorf("%s: %s", joinPath(path), ue.msg)
		a.printLeaf(a.stderr, path, fs, false)
		return exitUsage
	case errors.Is(err, context.Canceled):
		a.errorf("venturi: interrupted")
		return exitError
	default:
		a.errorf("%s: %v", joinPath(path), err)
		return exitError
	}
}

// errorf prints a message on stderr, with the database password redacted.
func (a *app) errorf(format string, args ...any) {
	fmt.Fprintln(a.stderr, a.redact(fmt.Sprintf(format, args...)))
}

// redact removes DATABASE_URL's password from s.
func (a *app) redact(s string) string {
	for _, p := range a.passwords {
		if p != "" {
			s = strings.ReplaceAll(s, p, "xxxxx")
		}
	}
	return s
}

// urlPasswords returns the password of a URL as written (percent-encoded) and decoded;
// none for a key=value connection string (pgx redacts it from its own errors).
func urlPasswords(raw string) []string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return nil
	}
	pw, ok := u.User.Password()
	if !ok {
		return nil
	}
	_, written, _ := strings.Cut(u.User.String(), ":")
	return []string{written, pw}
}

// lookup walks args down the command tree. It returns the commands it walked, the
// command it stopped at (nil for an unknown name) and the arguments left.
func lookup(root []*command, args []string) (path []*command, cmd *command, rest []string) {
	subs := root
	for i, arg := range args {
		var next *command
		for _, c := range subs {
			if c.name == arg {
				next = c
			}
		}
		if next == nil {
			if cmd != nil && (cmd.setup != nil || isHelpFlag(arg)) {
				return path, cmd, args[i:]
			}
			return path, nil, args[i:]
		}
		path, cmd, subs = append(path, next), next, next.subs
		if next.setup != nil {
			return path, cmd, args[i+1:]
		}
	}
	return path, cmd, nil
}

func isHelpFlag(s string) bool { return s == "-h" || s == "--help" || s == "-help" }

// newFlagSet returns a flag set that reports its errors to the caller only.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseInterspersed parses flags anywhere among the positional arguments (`jobs list
// state:dead --limit 5`); "--" ends the flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, &usageError{msg: err.Error()}
		}
		rest := fs.Args()
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// connect opens the pool and the Queue on first use: from DATABASE_URL, with search_path
// set to schema when it is not empty.
func (a *app) connect(ctx context.Context, schema string) (*venturi.Queue, error) {
	if a.q != nil {
		return a.q, nil
	}
	dbURL := a.getenv("DATABASE_URL")
	if dbURL == "" {
		return nil, errors.New("DATABASE_URL is not set: export DATABASE_URL=postgres://user@host:5432/db?search_path=SCHEMA (the schema may also be given with --schema)")
	}
	a.passwords = urlPasswords(dbURL)
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	a.passwords = append(a.passwords, cfg.ConnConfig.Password)
	if schema != "" {
		cfg.ConnConfig.RuntimeParams["search_path"] = schema
	}
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "venturi-cli"
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	a.pool = pool
	a.q = venturi.NewQueue(pool, venturi.QueueConfig{})
	return a.q, nil
}

// schemaName names the schema the pool works in, for headers.
func (a *app) schemaName() string {
	if a.pool == nil {
		return ""
	}
	if s := a.pool.Config().ConnConfig.RuntimeParams["search_path"]; s != "" {
		return s
	}
	return "(default search_path)"
}

// conn holds the flags every command that connects has.
type conn struct {
	schema string
	json   bool
}

// connFlags defines --schema, and --json when the command prints something to read.
func connFlags(fs *flag.FlagSet, withJSON bool) *conn {
	c := &conn{}
	fs.StringVar(&c.schema, "schema", "", "the schema of venturi's tables (default: DATABASE_URL's search_path)")
	if withJSON {
		fs.BoolVar(&c.json, "json", false, "print JSON (the Go API's values) instead of text")
	}
	return c
}

// readCommand returns the body of a command that checks its arguments (before it
// connects), reads a value with them and prints it: as JSON with --json, else as text.
func readCommand[T any](a *app, c *conn, check func(args []string) error,
	read func(ctx context.Context, q *venturi.Queue, args []string) (T, error),
	text func(w io.Writer, v T) error,
) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		if err := check(args); err != nil {
			return err
		}
		q, err := a.connect(ctx, c.schema)
		if err != nil {
			return err
		}
		v, err := read(ctx, q, args)
		if err != nil {
			return err
		}
		if c.json {
			return writeJSON(a.stdout, v)
		}
		return text(a.stdout, v)
	}
}

// orEmpty returns s, or an empty slice for nil (which JSON writes as null).
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// actorFlag defines --actor, who the audit log says acted.
func actorFlag(a *app, fs *flag.FlagSet) *string {
	return fs.String("actor", defaultActor(a.getenv), "who acts, as the audit log records it")
}

// defaultActor is $USER@hostname.
func defaultActor(getenv func(string) string) string {
	user := getenv("USER")
	if user == "" {
		user = getenv("LOGNAME")
	}
	if user == "" {
		user = "unknown"
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		return user
	}
	return user + "@" + host
}

// noArgs checks that there are no positional arguments.
func noArgs(args []string) error { return nArgs(args, 0, 0, "") }

// nArgs checks that there are between lo and hi positional arguments.
func nArgs(args []string, lo, hi int, what string) error {
	switch {
	case len(args) < lo:
		return usagef("missing %s", what)
	case len(args) > hi:
		return usagef("unexpected argument %q", args[hi])
	}
	return nil
}

// isTerminal reports whether f is a terminal: a character device other than /dev/null
// (the standard library has no isatty; this is close enough for prompts and redraws).
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	null, err := os.Stat(os.DevNull)
	return err != nil || !os.SameFile(fi, null)
}

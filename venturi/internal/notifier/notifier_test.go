package notifier_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/venturi-dev/venturi/internal/notifier"
	"github.com/venturi-dev/venturi/internal/testdb"
)

const within = 30 * time.Second

// newNotifier returns a notifier on the test database and a pool to send notifications
// and inspect the server with.
func newNotifier(t *testing.T) (*notifier.Notifier, func(ctx context.Context, channel, payload string)) {
	t.Helper()
	pool := testdb.Pool(t, testdb.Schema(t), 2)
	cc := pool.Config().ConnConfig
	cc.RuntimeParams["application_name"] = "notifier-" + t.Name()
	n := notifier.New(func(ctx context.Context) (*pgx.Conn, error) { return pgx.ConnectConfig(ctx, cc) },
		100*time.Millisecond, 10*time.Millisecond, slog.New(slog.DiscardHandler))
	send := func(ctx context.Context, channel, payload string) {
		t.Helper()
		if _, err := pool.Exec(ctx, `SELECT pg_notify($1, $2)`, channel, payload); err != nil {
			t.Fatal(err)
		}
	}
	return n, send
}

// collect subscribes to channel and returns what it hears.
func collect(n *notifier.Notifier, channel string) (*notifier.Subscription, <-chan string) {
	got := make(chan string, 100)
	return n.Listen(channel, func(p string) { got <- p }), got
}

func recv(t *testing.T, c <-chan string, what string) string {
	t.Helper()
	select {
	case p := <-c:
		return p
	case <-time.After(within):
		t.Fatalf("timed out waiting for %s", what)
		return ""
	}
}

func ready(t *testing.T, s *notifier.Subscription) {
	t.Helper()
	select {
	case <-s.Ready():
	case <-time.After(within):
		t.Fatal("timed out waiting for the subscription to be listened to")
	}
}

// TestNotificationsReachTheirChannelsSubscriptions: two channels on one connection; each
// notification reaches every subscription of its channel and no other, and an ended
// subscription hears nothing more while the others go on.
func TestNotificationsReachTheirChannelsSubscriptions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n, send := newNotifier(t)
	a1, got1 := collect(n, "chan_a")
	a2, got2 := collect(n, "chan_a")
	b, gotB := collect(n, "chan_b")
	for _, s := range []*notifier.Subscription{a1, a2, b} {
		ready(t, s)
	}
	send(ctx, "chan_a", "one")
	send(ctx, "chan_b", "two")
	if p := recv(t, got1, "a1"); p != "one" {
		t.Fatalf("a1 heard %q", p)
	}
	if p := recv(t, got2, "a2"); p != "one" {
		t.Fatalf("a2 heard %q", p)
	}
	if p := recv(t, gotB, "b"); p != "two" {
		t.Fatalf("b heard %q", p)
	}
	a1.Unlisten()
	send(ctx, "chan_a", "three")
	if p := recv(t, got2, "a2"); p != "three" {
		t.Fatalf("a2 heard %q", p)
	}
	select {
	case p := <-got1:
		t.Fatalf("an ended subscription heard %q", p)
	default:
	}
	if c := n.Channels(); c != 2 {
		t.Fatalf("%d channels, want 2", c)
	}
	a2.Unlisten()
	b.Unlisten()
	if c := n.Channels(); c != 0 {
		t.Fatalf("%d channels, want 0", c)
	}
}

// TestNotifierReconnects: when the server ends the notifier's connection, the notifier
// connects again, listens again, tells each subscription that it may have missed
// notifications (the empty payload), and delivers later ones.
func TestNotifierReconnects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n, send := newNotifier(t)
	s, got := collect(n, "chan_r")
	defer s.Unlisten()
	ready(t, s)
	admin := testdb.Pool(t, testdb.Schema(t), 1)
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE application_name = $1`, "notifier-"+t.Name()); err != nil {
		t.Fatal(err)
	}
	if p := recv(t, got, "the reconnection's wake-up"); p != "" {
		t.Fatalf("heard %q before the reconnection's wake-up", p)
	}
	send(ctx, "chan_r", "after")
	if p := recv(t, got, "a notification after the reconnection"); p != "after" {
		t.Fatalf("heard %q", p)
	}
}

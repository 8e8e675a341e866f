package listener_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/listener"
	"github.com/venturi-dev/venturi/internal/testdb"
)

// within bounds every wait of these tests: notifications arrive in milliseconds; the
// bound only keeps a broken listener from hanging the test.
const within = 30 * time.Second

// stopped is one call of the listener's Stop.
type stopped struct {
	id    ulid.ULID
	event string
}

// TestListener runs a listener for kind "k" and sends it every kind of payload: each
// calls its function, other kinds' call none, and a reconnect after its backend was
// terminated reports a wake-up. Notifications of one session on one channel arrive in
// order, so a queue notification sent after an ignored one shows it was ignored.
func TestListener(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.Pool(t, testdb.Schema(t), 2)
	var b [6]byte
	_, _ = rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	channel, app := "venturi_test."+suffix, "listener-test-"+suffix
	cc := pool.Config().ConnConfig.Copy()
	cc.RuntimeParams["application_name"] = app

	notified, delayed := make(chan struct{}, 16), make(chan struct{}, 16)
	queues, stops := make(chan string, 16), make(chan stopped, 16)
	logs := &testdb.LogBuffer{}
	l := listener.New(listener.Config{
		ConnConfig: cc, Channel: channel, Kinds: []string{"k"},
		Logger:   slog.New(slog.NewTextHandler(logs, nil)),
		Notified: func() { notified <- struct{}{} },
		Delayed:  func() { delayed <- struct{}{} },
		Queue:    func(name string) { queues <- name },
		Stop:     func(id ulid.ULID, ev string) { stops <- stopped{id, ev} },
	})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); l.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(within):
			t.Error("Run did not return after its context ended")
		}
	})

	wait := func(what string, ch <-chan struct{}) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(within):
			t.Fatalf("no %s within %v", what, within)
		}
	}
	notify := func(payload string) {
		t.Helper()
		if _, err := pool.Exec(ctx, "SELECT pg_notify($1, $2)", channel, payload); err != nil {
			t.Fatal(err)
		}
	}
	// barrier sends a queue notification and waits for it: every notification sent before
	// it has been handled.
	barrier := func(name string) {
		t.Helper()
		notify(listener.QueuePrefix + name)
		select {
		case got := <-queues:
			if got != name {
				t.Fatalf("Queue(%q), want Queue(%q)", got, name)
			}
		case <-time.After(within):
			t.Fatalf("no Queue(%q) within %v", name, within)
		}
	}
	assertNone := func(what string, ch <-chan struct{}) {
		t.Helper()
		select {
		case <-ch:
			t.Fatalf("unexpected %s", what)
		default:
		}
	}

	wait("wake-up after connecting", notified)

	notify("k")
	wait("Notified for a due job of k", notified)

	notify("other")
	notify(listener.DelayedPrefix + "other")
	barrier("q1")
	assertNone("Notified for another kind", notified)
	assertNone("Delayed for another kind", delayed)

	notify(listener.DelayedPrefix + "k")
	barrier("q2")
	wait("Delayed for a delayed job of k", delayed)
	assertNone("Notified for a delayed job", notified)

	id := ulid.Make()
	notify(listener.StopPrefix + "cancelled:" + uuidText(id))
	select {
	case s := <-stops:
		if s.id != id || s.event != "cancelled" {
			t.Fatalf("Stop(%s, %q), want Stop(%s, %q)", s.id, s.event, id, "cancelled")
		}
	case <-time.After(within):
		t.Fatalf("no Stop within %v", within)
	}
	notify(listener.StopPrefix + "cancelled:not-a-uuid")
	barrier("q3")
	select {
	case s := <-stops:
		t.Fatalf("Stop(%s, %q) for a malformed payload", s.id, s.event)
	default:
	}

	// Terminate the listener's backend: it reconnects and reports a wake-up.
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = $1`, app).Scan(&n); err != nil || n != 1 {
		t.Fatalf("terminated %d backends of the listener (%v), want 1", n, err)
	}
	wait("wake-up after reconnecting", notified)
	if !strings.Contains(logs.String(), "venturi: listener lost its connection; polling continues") {
		t.Fatalf("no warning of the lost connection in the logs:\n%s", logs)
	}
	// The new connection listens too.
	notify("k")
	wait("Notified after reconnecting", notified)
}

// uuidText formats id as PostgreSQL prints a uuid.
func uuidText(id ulid.ULID) string {
	h := hex.EncodeToString(id[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

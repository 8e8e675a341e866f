package worker

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/bookmarks/shared/tasks"
	"github.com/venturi-dev/bookmarks/sql/dbtest"
	"github.com/venturi-dev/bookmarks/sql/migrations"
	"github.com/venturi-dev/venturi"
)

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuf) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// TestEventSummaryLogsOneLinePerKind: the summary counts a subscription's events per task
// kind and event and logs them at each period's end and when it stops.
func TestEventSummaryLogsOneLinePerKind(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbtest.SchemaURL(t, "bmsum"))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := migrations.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	sub := q.Subscribe(venturi.SubscribeConfig{})
	buf := &lockedBuf{}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		summarizeEvents(sctx, sub, time.Hour, slog.New(slog.NewTextHandler(buf, nil)))
	}()
	for i := range 3 {
		if _, err := q.Enqueue(ctx, tasks.FetchBookmark{BookmarkID: string(rune('a' + i)), URL: "https://example.com/"}); err != nil {
			t.Fatal(err)
		}
	}
	// The subscription holds the three events until the summary reads them; closing it
	// ends the summary after everything buffered was counted.
	sub.Close()
	<-done
	stop()
	out := buf.String()
	if strings.Count(out, "job events") != 1 || !strings.Contains(out, "kind="+tasks.KindFetchBookmark) || !strings.Contains(out, "enqueued=3") {
		t.Fatalf("summary:\n%s", out)
	}
}

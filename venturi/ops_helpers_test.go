package venturi_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi"
)

// opsTask is the operations tests' task: it fails its first Fail runs (retryably, or
// permanently when Dead), then completes. Q names its queue.
type opsTask struct {
	N    int    `json:"n"`
	Q    string `json:"q,omitempty"`
	Fail int    `json:"fail,omitempty"`
	Dead bool   `json:"dead,omitempty"`
	Key  string `json:"key,omitempty"`
	User string `json:"user,omitempty"`
}

func (opsTask) Kind() string { return "ops" }

func (t opsTask) Queue() string {
	if t.Q == "" {
		return venturi.DefaultQueue
	}
	return t.Q
}

func (t opsTask) DedupKey() venturi.DedupKey { return venturi.DedupKey(t.Key) }

// Backoff keeps retries fast (the worker's backoff applies otherwise).
func (opsTask) Backoff() venturi.Backoff {
	return venturi.Backoff{Base: time.Millisecond, Cap: 5 * time.Millisecond}
}

func (t opsTask) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	if run.RunCount() <= t.Fail {
		err := fmt.Errorf("run %d of job %d fails", run.RunCount(), t.N)
		if t.Dead {
			return venturi.Outcome{}, venturi.Permanent(err)
		}
		return venturi.Outcome{}, err
	}
	return venturi.CompletedWith(fmt.Sprintf("job %d done", t.N)), nil
}

// opsKind is a second kind, for per-kind lines.
type opsKind struct {
	N int `json:"n"`
}

func (opsKind) Kind() string { return "ops_other" }
func (opsKind) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	return venturi.Completed(), nil
}

// statsConfig is fastConfig with a fast stats sampler.
func statsConfig(id string) venturi.Config {
	cfg := fastConfig()
	cfg.ID = id
	cfg.MaintenanceInterval = 20 * time.Millisecond
	cfg.StatsInterval = venturi.MinStatsInterval
	cfg.Queues = []venturi.WorkerQueue{{Name: venturi.DefaultQueue}, {Name: "media"}, {Name: "held"}}
	return cfg
}

// startOpsWorker starts a worker of opsTask and opsKind with cfg.
func startOpsWorker(t *testing.T, pool *pgxpool.Pool, cfg venturi.Config) *venturi.Worker[struct{}] {
	t.Helper()
	w := newWorker(t, pool, struct{}{}, cfg)
	venturi.MustRegister[opsTask](w)
	venturi.MustRegister[opsKind](w)
	startWorker(t, w)
	return w
}

// readStats reads the latest sample.
func readStats(t *testing.T, q *venturi.Queue) venturi.Stats {
	t.Helper()
	s, err := q.Stats(context.Background())
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	return s
}

// queueStats returns a queue's line of s (zero when absent).
func queueStats(s venturi.Stats, queue string) venturi.QueueStats {
	for _, qs := range s.Queues {
		if qs.Queue == queue {
			return qs
		}
	}
	return venturi.QueueStats{}
}

// waitStats waits until cond holds for a sample and returns it.
func waitStats(t *testing.T, q *venturi.Queue, what string, cond func(venturi.Stats) bool) venturi.Stats {
	t.Helper()
	var s venturi.Stats
	eventually(t, within, "stats: "+what, func() bool {
		s = readStats(t, q)
		return cond(s)
	})
	return s
}

// auditEntries reads the whole audit log, newest first.
func auditEntries(t *testing.T, q *venturi.Queue) []venturi.AuditEntry {
	t.Helper()
	var all []venturi.AuditEntry
	for before := int64(0); ; {
		page, err := q.AuditLog(context.Background(), before, 2)
		if err != nil {
			t.Fatalf("audit log: %v", err)
		}
		if len(page) == 0 {
			return all
		}
		all = append(all, page...)
		before = page[len(page)-1].ID
	}
}

// listAll reads every page of a listing.
func listAll(t *testing.T, q *venturi.Queue, f venturi.JobFilter, limit int) []venturi.JobSummary {
	t.Helper()
	var all []venturi.JobSummary
	cursor := ""
	for range 10_000 {
		page, err := q.ListJobs(context.Background(), f, cursor, limit)
		if err != nil {
			t.Fatalf("list %q after %q: %v", f.String(), cursor, err)
		}
		all = append(all, page.Jobs...)
		if page.Next == "" {
			return all
		}
		if len(page.Jobs) != limit && !page.Partial {
			t.Fatalf("a page of %d jobs (limit %d) with a next cursor, not partial", len(page.Jobs), limit)
		}
		cursor = page.Next
	}
	t.Fatal("listing does not end")
	return nil
}

// mustFilter parses a filter or fails the test.
func mustFilter(t *testing.T, s string) venturi.JobFilter {
	t.Helper()
	f, err := venturi.ParseJobFilter(s)
	if err != nil {
		t.Fatalf("filter %q: %v", s, err)
	}
	return f
}

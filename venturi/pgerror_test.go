package venturi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// TestIsTransient: the exported IsTransient is internal/pgerr's classification (its own
// table of SQLSTATEs and network errors is TestIsTransient there).
func TestIsTransient(t *testing.T) {
	t.Parallel()
	if !venturi.IsTransient(fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: "57P01"})) {
		t.Error("admin_shutdown is not transient")
	}
	if venturi.IsTransient(&pgconn.PgError{Code: "22P02"}) {
		t.Error("invalid_text_representation is transient")
	}
}

// ckptTask records evidence (carry and attachment) and then pauses or fails
// permanently, as the chaos suite's jobs do.
type ckptTask struct {
	Permanent bool `json:"permanent"`
}

type ckptCarry struct {
	Step int `json:"step"`
}

func (ckptTask) Kind() string { return "checkpoint" }

func (c ckptTask) Handle(ctx context.Context, run *venturi.Run[ckptCarry], release <-chan struct{}) (venturi.Outcome, error) {
	run.CarryMut().Step = 7
	if err := run.SetAttachment(map[string]int{"evidence": 42}); err != nil {
		return venturi.Outcome{}, err
	}
	<-release
	if c.Permanent {
		return venturi.Outcome{}, venturi.Permanentf("scripted permanent failure")
	}
	return venturi.PauseInWith(time.Hour, "checkpoint"), nil
}

// TestCompleterBackendTerminatedMidStatement is the regression test for the chaos run
// that lost a carry: the completer's FinishRuns is held on a row lock, its backend is
// terminated (SQLSTATE 57P01, what a restart or pg_terminate_backend sends), and the
// result must land unchanged on the retry, not be stored "degraded" without its carry,
// attachment and note.
func TestCompleterBackendTerminatedMidStatement(t *testing.T) {
	t.Parallel()
	for _, permanent := range []bool{false, true} {
		t.Run(fmt.Sprintf("permanent=%v", permanent), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := newDB(t)
			q := venturi.NewQueue(pool, venturi.QueueConfig{})
			release := make(chan struct{})
			cfg := fastConfig()
			cfg.ID = "completer-kill-" + ulid.Make().String()
			w := newWorker(t, pool, (<-chan struct{})(release), cfg)
			venturi.MustRegister[ckptTask](w)
			startWorker(t, w)
			r, err := q.Enqueue(ctx, ckptTask{Permanent: permanent})
			if err != nil {
				t.Fatal(err)
			}
			waitState(t, q, r, venturi.StateRunning)

			// Hold the job's row so that the completer's statement waits on it.
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, "SELECT 1 FROM venturi_job WHERE id = $1 FOR UPDATE", r.ID[:]); err != nil {
				t.Fatal(err)
			}
			close(release)
			pid := waitBlockedFinisher(t, pool, "venturi "+cfg.ID)
			var killed bool
			if err := pool.QueryRow(ctx, "SELECT pg_terminate_backend($1)", pid).Scan(&killed); err != nil || !killed {
				t.Fatalf("terminate completer backend %d: %v %v", pid, killed, err)
			}
			// The retry waits on the same lock; let it through.
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}

			want := venturi.StateScheduled
			if permanent {
				want = venturi.StateDead
			}
			j := waitState(t, q, r, want)
			e := j.Journal[len(j.Journal)-1]
			var ev map[string]int
			if err := json.Unmarshal(e.Attachment, &ev); err != nil || ev["evidence"] != 42 {
				t.Errorf("attachment = %s, want the handler's", e.Attachment)
			}
			if permanent {
				if e.Event != venturi.EventDead || e.Note != "scripted permanent failure" {
					t.Errorf("entry = %+v, want dead with the handler's note", e)
				}
				return
			}
			var c ckptCarry
			decodeCarry(t, j, &c)
			if e.Event != venturi.EventPaused || e.Note != "checkpoint" || c.Step != 7 {
				t.Errorf("entry = %+v, carry %s: want paused with carry step 7", e, j.Carry)
			}
		})
	}
}

// waitBlockedFinisher returns the backend of app's FinishRuns statement once it waits on
// a lock.
func waitBlockedFinisher(t *testing.T, pool *pgxpool.Pool, app string) int32 {
	t.Helper()
	var pid int32
	eventually(t, within, "the completer to wait on the row lock", func() bool {
		err := pool.QueryRow(context.Background(), `SELECT pid FROM pg_stat_activity
			WHERE application_name = $1 AND wait_event_type = 'Lock' AND query LIKE '-- name: FinishRuns%'`, app).Scan(&pid)
		return err == nil
	})
	return pid
}

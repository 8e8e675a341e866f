package handlers

// Cancelling an import and confirming a large one, on a real worker and PostgreSQL.

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/bookmarks/shared/tasks"
	"github.com/venturi-dev/venturi"
)

// urls returns n distinct URLs.
func urls(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "https://" + strings.Repeat("p", 1+i%3) + ".example/" + ulid.Make().String()
	}
	return out
}

// requireConfirmation marks an import as waiting for a confirmation that expires in d, as
// the API does for a large import.
func (b *testBundle) requireConfirmation(t *testing.T, task tasks.ImportBookmarks, d time.Duration) {
	t.Helper()
	imp, _ := parseID(task.ImportID)
	var hash [32]byte
	_, _ = rand.Read(hash[:])
	ctx := context.Background()
	if _, err := b.pool.Exec(ctx, "UPDATE bookmark_import SET status = 'awaiting_confirmation' WHERE id = $1", imp); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `INSERT INTO bookmark_import_confirmation (import_id, token_hash, expires_at)
		VALUES ($1, $2, now() + $3 * interval '1 millisecond')`, imp, hash[:], d.Milliseconds()); err != nil {
		t.Fatal(err)
	}
}

// importState reads an import's status, its count of bookmarks and its confirmation time.
func (b *testBundle) importState(t *testing.T, task tasks.ImportBookmarks) (status string, bookmarks int, confirmed bool) {
	t.Helper()
	imp, _ := parseID(task.ImportID)
	err := b.pool.QueryRow(context.Background(), `SELECT i.status, (SELECT count(*) FROM bookmark WHERE import_id = i.id),
		coalesce((SELECT confirmed_at IS NOT NULL FROM bookmark_import_confirmation WHERE import_id = i.id), false)
		FROM bookmark_import i WHERE i.id = $1`, imp).Scan(&status, &bookmarks, &confirmed)
	if err != nil {
		t.Fatal(err)
	}
	return
}

func events(j *venturi.Job) []venturi.Event {
	var out []venturi.Event
	for _, e := range j.Journal {
		out = append(out, e.Event)
	}
	return out
}

// TestImportWaitsForItsConfirmation: a large import imports nothing until its
// confirmation arrives (state waiting, for the signal "confirm"), then imports every page;
// the journal says who confirmed, and a repeated confirmation is stored once.
func TestImportWaitsForItsConfirmation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	task, job := b.newImportJob(t, 2, nil, urls(5)...)
	b.requireConfirmation(t, task, time.Hour)
	b.start(t)
	j := b.waitJob(t, job, venturi.StateWaiting)
	if e := j.Journal[len(j.Journal)-1]; e.Event != venturi.EventWaiting || !slices.Equal(e.Wait, []string{tasks.SignalConfirmImport}) ||
		e.ResumeIn < 59*time.Minute {
		t.Fatalf("waiting entry %+v, want a wait for confirm of about an hour", e)
	}
	if status, n, confirmed := b.importState(t, task); status != "awaiting_confirmation" || n != 0 || confirmed {
		t.Fatalf("while waiting: %s, %d bookmarks, confirmed %v", status, n, confirmed)
	}
	for range 2 {
		if _, err := b.queue.Signal(ctx, job, tasks.SignalConfirmImport,
			tasks.ImportConfirmation{Via: "api_key", KeyID: "01KEY"}, tasks.ConfirmDeliveryID); err != nil {
			t.Fatal(err)
		}
	}
	j = b.waitJob(t, job, venturi.StateCompleted)
	if got := events(j); !slices.Equal(got, []venturi.Event{venturi.EventWaiting, venturi.EventPaused, venturi.EventPaused,
		venturi.EventPaused, venturi.EventCompleted}) {
		t.Fatalf("journal %v", got)
	}
	if note := j.Journal[1].Note; !strings.HasPrefix(note, "confirmed with API key 01KEY; page 1:") {
		t.Fatalf("first page's note %q", note)
	}
	if status, n, confirmed := b.importState(t, task); status != "done" || n != 5 || !confirmed {
		t.Fatalf("after the confirmation: %s, %d bookmarks, confirmed %v", status, n, confirmed)
	}
	var signals int
	if err := b.pool.QueryRow(ctx, "SELECT count(*) FROM venturi_signal WHERE job_id = $1", uuidOf(job)).Scan(&signals); err != nil || signals != 1 {
		t.Fatalf("%d signals stored (%v), want 1: a confirmation is delivered once", signals, err)
	}
}

// TestUnconfirmedImportIsCancelled: with no confirmation before its expiry, the import ends
// cancelled (not failed), imports nothing, and says why.
func TestUnconfirmedImportIsCancelled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	task, job := b.newImportJob(t, 2, nil, urls(3)...)
	b.requireConfirmation(t, task, 1500*time.Millisecond)
	b.start(t)
	j := b.waitJob(t, job, venturi.StateCancelled)
	e := j.Journal[len(j.Journal)-1]
	if got := events(j); !slices.Equal(got, []venturi.Event{venturi.EventWaiting, venturi.EventCancelled}) || j.Failures != 0 ||
		!strings.HasPrefix(e.Note, "not confirmed within ") {
		t.Fatalf("journal %v, last note %q, failures %d", got, e.Note, j.Failures)
	}
	if status, n, confirmed := b.importState(t, task); status != "cancelled" || n != 0 || confirmed {
		t.Fatalf("after the timeout: %s, %d bookmarks, confirmed %v", status, n, confirmed)
	}
	if _, err := b.queue.Signal(context.Background(), job, tasks.SignalConfirmImport, nil, tasks.ConfirmDeliveryID); err == nil {
		t.Fatal("a confirmation after the cancel was accepted")
	}
}

// TestConfirmationSurvivesAFailedRun: venturi consumes a signal with the run that read it,
// whatever that run's outcome. The run that reads the confirmation fails here (its page's
// transaction is refused once), and its retry must import without waiting again: the
// confirmation is in the carry.
func TestConfirmationSurvivesAFailedRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// Fault injection in the test's own schema: the first bookmark insert fails (a sequence
	// is not rolled back with the transaction).
	if _, err := b.pool.Exec(ctx, `CREATE SEQUENCE fail_once;
		CREATE FUNCTION fail_once() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF nextval('fail_once') = 1 THEN RAISE EXCEPTION 'injected failure'; END IF; RETURN NEW; END $$;
		CREATE TRIGGER fail_once BEFORE INSERT ON bookmark FOR EACH ROW EXECUTE FUNCTION fail_once();`); err != nil {
		t.Fatal(err)
	}
	task, job := b.newImportJob(t, 10, nil, urls(3)...)
	b.requireConfirmation(t, task, time.Hour)
	// Sent before the job waits: kept, and the wait ends at once.
	if _, err := b.queue.Signal(ctx, job, tasks.SignalConfirmImport, tasks.ImportConfirmation{Via: "link"}, tasks.ConfirmDeliveryID); err != nil {
		t.Fatal(err)
	}
	b.start(t)
	j := b.waitJob(t, job, venturi.StateCompleted)
	if got := events(j); !slices.Equal(got, []venturi.Event{venturi.EventWaiting, venturi.EventFailed, venturi.EventPaused, venturi.EventCompleted}) {
		t.Fatalf("journal %v, want wait, the failed run, one page, completion", got)
	}
	if status, n, confirmed := b.importState(t, task); status != "done" || n != 3 || !confirmed {
		t.Fatalf("import: %s, %d bookmarks, confirmed %v", status, n, confirmed)
	}
}

// TestCancelStopsTheImportAtThePage: a cancel that arrives while a page is in progress
// (held here by a lock on the import's row, which the page updates) lets that page commit
// and ends the import there: cancelled, not failed, no further page, the checkpoint in the
// journal's last entry. A cancel of a pending import ends it at once, and it never runs.
func TestCancelStopsTheImportAtThePage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// A pending import (not started, or between pages) ends at once.
	pending, pendingJob := b.newImportJob(t, 2, nil, urls(3)...)
	if res, err := b.queue.Cancel(ctx, pendingJob, "stop"); err != nil || res != venturi.CancelEnded {
		t.Fatalf("Cancel of a pending import = %v, %v", res, err)
	}

	task, job := b.newImportJob(t, 2, nil, urls(7)...)
	imp, _ := parseID(task.ImportID)
	hold, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(ctx)
	var holder int
	if err := hold.QueryRow(ctx, "SELECT pg_backend_pid() FROM bookmark_import WHERE id = $1 FOR UPDATE", imp).Scan(&holder); err != nil {
		t.Fatal(err)
	}
	b.start(t)
	b.waitJob(t, job, venturi.StateRunning)
	waitBlockedBy(t, b, holder) // the page waits for the row
	res, err := b.queue.Cancel(ctx, job, "cancelled with API key 01KEY")
	if err != nil || res != venturi.CancelRequested {
		t.Fatalf("Cancel = %v, %v; want requested", res, err)
	}
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	j := b.waitJob(t, job, venturi.StateCancelled)
	requireStoppedAt(t, j, "cancelled with API key 01KEY", tasks.ImportCarry{Next: 2, Imported: 2, Pages: 1})
	// The page's bookmarks are in, with their fetches; nothing after them.
	b.waitFetches(t, task, 2)
	if _, n, _ := b.importState(t, task); n != 2 {
		t.Fatalf("%d bookmarks, want the cancelled page's 2", n)
	}
	if _, n, _ := b.importState(t, pending); n != 0 {
		t.Fatalf("the cancelled pending import made %d bookmarks", n)
	}
}

// requireStoppedAt checks the journal of an import cancelled during a page: one run, not a
// failure, the cancel's entry last with the reason first in its note, and the page's
// checkpoint in the journal. venturi writes that end in one of two ways, depending on
// whether the worker heard of the cancel before the page ended: a cancelled entry whose
// note goes on with the page's note and whose attachment is the checkpoint, or the page's
// paused entry (its attachment the checkpoint) followed by a cancelled entry with the
// reason alone.
func requireStoppedAt(t *testing.T, j *venturi.Job, reason string, want tasks.ImportCarry) {
	t.Helper()
	got := events(j)
	last := j.Journal[len(j.Journal)-1]
	heard := slices.Equal(got, []venturi.Event{venturi.EventCancelled}) && strings.HasPrefix(last.Note, reason+": page ")
	unheard := slices.Equal(got, []venturi.Event{venturi.EventPaused, venturi.EventCancelled}) && last.Note == reason
	if !heard && !unheard || j.RunCount != 1 || j.Failures != 0 {
		t.Fatalf("journal %v, last note %q, runs %d, failures %d", got, last.Note, j.RunCount, j.Failures)
	}
	withCheckpoint := j.Journal[0]
	if heard {
		withCheckpoint = last
	}
	var checkpoint tasks.ImportCarry
	if err := json.Unmarshal(withCheckpoint.Attachment, &checkpoint); err != nil || checkpoint != want {
		t.Fatalf("the journal's checkpoint %s (%v), want %+v", withCheckpoint.Attachment, err, want)
	}
}

// waitBlockedBy waits until a backend waits for a lock that the backend holder holds.
func waitBlockedBy(t *testing.T, b *testBundle, holder int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var waiting bool
		err := b.pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE $1::int = ANY(pg_blocking_pids(pid)))`, holder).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the page never waited for the import's row")
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		}
	}
}

// waitFetches waits until n of the import's bookmarks are fetched.
func (b *testBundle) waitFetches(t *testing.T, task tasks.ImportBookmarks, n int) {
	t.Helper()
	imp, _ := parseID(task.ImportID)
	deadline := time.Now().Add(15 * time.Second)
	for {
		var fetched int
		err := b.pool.QueryRow(context.Background(), "SELECT count(*) FROM bookmark WHERE import_id = $1 AND fetch_status = 'fetched'", imp).Scan(&fetched)
		if err != nil && err != pgx.ErrNoRows {
			t.Fatal(err)
		}
		if fetched == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the import's bookmarks fetched, want %d", fetched, n)
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		}
	}
}

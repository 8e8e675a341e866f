package e2e

// Cancelling imports, confirming large ones, and creates that wait for their fetch,
// through the real binaries (issue 12).

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"
)

// The API's confirmation settings in this suite (main_test.go passes them).
const (
	confirmAbove   = 8
	confirmTimeout = 5 * time.Second
)

type importView struct {
	ID           string     `json:"id"`
	Status       string     `json:"status"`
	Total        int        `json:"total"`
	Imported     int        `json:"imported"`
	Skipped      int        `json:"skipped"`
	FinishedAt   *time.Time `json:"finished_at"`
	Confirmation *struct {
		ExpiresAt   time.Time  `json:"expires_at"`
		ConfirmedAt *time.Time `json:"confirmed_at"`
		URL         string     `json:"url"`
	} `json:"confirmation"`
	Job *job `json:"job"`
}

type importCarry struct {
	Next      int  `json:"next"`
	Imported  int  `json:"imported"`
	Skipped   int  `json:"skipped"`
	Pages     int  `json:"pages"`
	Confirmed bool `json:"confirmed"`
}

// createImport posts an import of n pages of host, tagged with the host.
func createImport(t *testing.T, n, pageSize int, host string) importView {
	t.Helper()
	var items []map[string]string
	for i := range n {
		items = append(items, map[string]string{"url": pageURL(host, fmt.Sprintf("/page/%s-%d", host, i))})
	}
	var imp importView
	mustCall(t, "POST", "/imports", map[string]any{"items": items, "tags": []string{host}, "page_size": pageSize}, 202, &imp)
	return imp
}

// waitImport waits until the import's job is in state.
func waitImport(t *testing.T, id, state string, d time.Duration) importView {
	t.Helper()
	var imp importView
	eventually(t, d, "import "+id+" "+state, func() (bool, string) {
		code, err := call("GET", "/imports/"+id, nil, &imp)
		return err == nil && code == 200 && imp.Job != nil && imp.Job.State == state, fmt.Sprintf("%d %v %+v", code, err, imp.Job)
	})
	return imp
}

// linkPath checks that the confirmation link is one of this API's URLs and returns its path.
func linkPath(t *testing.T, imp importView) string {
	t.Helper()
	if imp.Confirmation == nil {
		t.Fatalf("import %s has no confirmation", imp.ID)
	}
	path, ok := strings.CutPrefix(imp.Confirmation.URL, sys.apiURL)
	if !ok || !strings.HasPrefix(path, "/imports/"+imp.ID+"/confirm/bmc_") {
		t.Fatalf("confirmation url %q", imp.Confirmation.URL)
	}
	return path
}

// readLog reads one of the processes' logs.
func readLog(name string) (string, error) {
	b, err := os.ReadFile(filepath.Join(sys.logDir, name))
	return string(b), err
}

func uuidOfID(t *testing.T, id string) pgtype.UUID {
	t.Helper()
	u, err := ulid.ParseStrict(id)
	if err != nil {
		t.Fatal(err)
	}
	return pgtype.UUID{Bytes: u, Valid: true}
}

// TestCancelRunningImport: a large import, confirmed, is cancelled while its first page is
// in progress (held by a lock on the import's confirmation row, which the first page after
// the confirmation updates and the API's cancel does not): the page commits, the import
// stops there (cancelled, not failed, no second page), its checkpoint in the journal; the
// bookmarks of that page stay and are fetched.
func TestCancelRunningImport(t *testing.T) {
	const host = "cancel.e2e.test"
	imp := createImport(t, confirmAbove+4, 2, host)
	if imp.Status != "awaiting_confirmation" || imp.Confirmation == nil || imp.Confirmation.URL == "" {
		t.Fatalf("created %+v", imp)
	}
	ctx := t.Context()
	hold, err := sys.db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(context.Background())
	var holder int
	if err := hold.QueryRow(ctx, "SELECT pg_backend_pid() FROM bookmark_import_confirmation WHERE import_id = $1 FOR UPDATE", uuidOfID(t, imp.ID)).Scan(&holder); err != nil {
		t.Fatal(err)
	}
	mustCall(t, "POST", "/imports/"+imp.ID+"/confirm", nil, 202, nil)
	eventually(t, fetchDeadline, "the first page waits for the confirmation's row", func() (bool, string) {
		var blocked bool
		err := sys.db.Pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid)))", holder).Scan(&blocked)
		return err == nil && blocked, fmt.Sprint(err)
	})
	var cancelled importView
	mustCall(t, "DELETE", "/imports/"+imp.ID, nil, 202, &cancelled)
	if cancelled.Status != "cancelled" || cancelled.Job.State != "running" {
		t.Fatalf("cancel answered %+v, job %+v", cancelled, cancelled.Job)
	}
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	imp = waitImport(t, imp.ID, "cancelled", fetchDeadline)
	if imp.Status != "cancelled" || imp.Imported != 2 || imp.FinishedAt == nil || imp.Job.Failures != 0 ||
		imp.Confirmation.ConfirmedAt == nil {
		t.Fatalf("cancelled import %+v, job %+v", imp, imp.Job)
	}
	// The journal: the wait, the page (its end turned into the cancel, or followed by it),
	// the reason first; the checkpoint after the page as an attachment.
	got := events(imp.Job.Journal)
	last := imp.Job.Journal[len(imp.Job.Journal)-1]
	var withCheckpoint journalEntry
	switch {
	case slices.Equal(got, []string{"waiting", "cancelled"}) && strings.Contains(last.Note, ": confirmed with API key ") &&
		strings.Contains(last.Note, "; page 1: 2/12 items"):
		withCheckpoint = last
	case slices.Equal(got, []string{"waiting", "paused", "cancelled"}) && !strings.Contains(last.Note, "page"):
		withCheckpoint = imp.Job.Journal[1]
	default:
		t.Fatalf("journal %v, last note %q", got, last.Note)
	}
	if !strings.HasPrefix(last.Note, "cancelled with API key ") {
		t.Fatalf("the cancel's note %q does not start with its reason", last.Note)
	}
	var c importCarry
	if err := json.Unmarshal(withCheckpoint.Attachment, &c); err != nil || c != (importCarry{Next: 2, Imported: 2, Pages: 1, Confirmed: true}) {
		t.Fatalf("checkpoint %s (%v)", withCheckpoint.Attachment, err)
	}
	// The page's bookmarks stay and are fetched; there are no others.
	var list struct {
		Items []bookmark `json:"items"`
	}
	eventually(t, fetchDeadline, "the cancelled import's bookmarks fetched", func() (bool, string) {
		mustCall(t, "GET", "/bookmarks?tag="+host+"&limit=100", nil, 200, &list)
		fetched := 0
		for _, b := range list.Items {
			if b.FetchStatus == "fetched" {
				fetched++
			}
		}
		return fetched == 2 && len(list.Items) == 2, fmt.Sprintf("%d of %d fetched", fetched, len(list.Items))
	})
	// Cancelling again is harmless.
	mustCall(t, "DELETE", "/imports/"+imp.ID, nil, 200, nil)
}

// TestConfirmImportBySignal: a large import waits (job waiting, for the signal confirm,
// for the configured timeout) and imports nothing until POST /imports/{id}/confirm; then
// it imports every page. A second confirmation is harmless: 202 while the import runs,
// 409 once it has ended (it may end within the first confirmation's round trip).
func TestConfirmImportBySignal(t *testing.T) {
	const host = "confirm.e2e.test"
	imp := createImport(t, confirmAbove+1, 5, host)
	if imp.Status != "awaiting_confirmation" || imp.Confirmation == nil ||
		time.Until(imp.Confirmation.ExpiresAt) > confirmTimeout {
		t.Fatalf("created %+v", imp)
	}
	waiting := waitImport(t, imp.ID, "waiting", fetchDeadline)
	if e := waiting.Job.Journal[0]; !slices.Equal(e.Wait, []string{"confirm"}) || waiting.Imported != 0 || waiting.Confirmation.URL != "" {
		t.Fatalf("waiting import %+v, journal %+v", waiting, waiting.Job.Journal)
	}
	mustCall(t, "POST", "/imports/"+imp.ID+"/confirm", nil, 202, nil)
	again, err := call("POST", "/imports/"+imp.ID+"/confirm", nil, nil)
	if err != nil || (again != 202 && again != 409) {
		t.Fatalf("second confirmation: %d, %v; want 202, or 409 once the import ended", again, err)
	}
	imp = waitImport(t, imp.ID, "completed", fetchDeadline)
	if imp.Status != "done" || imp.Imported != confirmAbove+1 || imp.Confirmation.ConfirmedAt == nil {
		t.Fatalf("confirmed import %+v", imp)
	}
	if got := events(imp.Job.Journal); !slices.Equal(got, []string{"waiting", "paused", "paused", "completed"}) ||
		!strings.HasPrefix(imp.Job.Journal[1].Note, "confirmed with API key ") {
		t.Fatalf("journal %v, %q", got, imp.Job.Journal[1].Note)
	}
	// A completed import cannot be cancelled.
	mustCall(t, "DELETE", "/imports/"+imp.ID, nil, 409, nil)
}

// TestConfirmImportByLink: the link in the create call's answer confirms the import without
// an API key, once: a second use is refused like an unknown link.
func TestConfirmImportByLink(t *testing.T) {
	const host = "link.e2e.test"
	imp := createImport(t, confirmAbove+1, 10, host)
	link := linkPath(t, imp)
	var ok struct {
		ImportID  string `json:"import_id"`
		Confirmed bool   `json:"confirmed"`
	}
	resp, err := callAs("", "POST", link, nil, &ok)
	if err != nil || resp.StatusCode != 202 || !ok.Confirmed || ok.ImportID != imp.ID {
		t.Fatalf("the link: %v %v %+v", resp, err, ok)
	}
	var problem struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	resp, err = callAs("", "POST", link, nil, &problem)
	if err != nil || resp.StatusCode != 404 || problem.Error.Code != "not_found" {
		t.Fatalf("the link again: %v %v %+v", resp, err, problem)
	}
	imp = waitImport(t, imp.ID, "completed", fetchDeadline)
	if imp.Status != "done" || imp.Imported != confirmAbove+1 ||
		!strings.HasPrefix(imp.Job.Journal[1].Note, "confirmed with the confirmation link; page 1:") {
		t.Fatalf("import %+v, journal %+v", imp, imp.Job.Journal)
	}
	// The token is not in the API's log.
	b, err := readLog("api.log")
	if err != nil || strings.Contains(b, link[strings.LastIndex(link, "/")+1:]) {
		t.Fatalf("the api log carries the link's token (%v)", err)
	}
}

// TestUnconfirmedImportIsCancelled: nobody confirms, and at the timeout the import ends
// cancelled having imported nothing; its link and the key can no longer confirm it.
func TestUnconfirmedImportIsCancelled(t *testing.T) {
	imp := createImport(t, confirmAbove+1, 10, "never.e2e.test")
	link := linkPath(t, imp)
	imp = waitImport(t, imp.ID, "cancelled", confirmTimeout+fetchDeadline)
	last := imp.Job.Journal[len(imp.Job.Journal)-1]
	if imp.Status != "cancelled" || imp.Imported != 0 || imp.Job.Failures != 0 ||
		!slices.Equal(events(imp.Job.Journal), []string{"waiting", "cancelled"}) || last.Note != "not confirmed within "+confirmTimeout.String() {
		t.Fatalf("import %+v, journal %+v", imp, imp.Job.Journal)
	}
	if resp, err := callAs("", "POST", link, nil, nil); err != nil || resp.StatusCode != 404 {
		t.Fatalf("the link after the timeout: %v %v", resp, err)
	}
	mustCall(t, "POST", "/imports/"+imp.ID+"/confirm", nil, 409, nil)
}

// TestCreateWaitsForTheFetch: POST /bookmarks?wait=5s answers with the fetched bookmark
// when the fetch ends in time; a bad wait is 400.
func TestCreateWaitsForTheFetch(t *testing.T) {
	var b bookmark
	mustCall(t, "POST", "/bookmarks?wait=5s", map[string]any{"url": pageURL("wait.e2e.test", "/page/waited")}, 201, &b)
	if b.FetchStatus != "fetched" || b.PageTitle != "Page waited" || b.FetchJob == nil || b.FetchJob.State != "completed" {
		t.Fatalf("created %+v, job %+v", b, b.FetchJob)
	}
	mustCall(t, "POST", "/bookmarks?wait=forever", map[string]any{"url": pageURL("wait.e2e.test", "/page/never")}, 400, nil)
}

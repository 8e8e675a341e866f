package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/venturi-dev/bookmarks/bookmarks-worker/internal/store"
	"github.com/venturi-dev/bookmarks/shared/tasks"
	"github.com/venturi-dev/venturi"
)

// RegisterSummarizeImport registers handleSummarizeImport for tasks.SummarizeImport.
func RegisterSummarizeImport(w *Worker) error {
	return venturi.RegisterFunc(w, handleSummarizeImport)
}

// handleSummarizeImport is the summary node of an import's workflow
// (tasks.NewImportWorkflow): it runs once the fetch node, every fetch it spawned and the
// reindex node have ended, however they ended. It reads their outputs
// (Run.UpstreamOutputs: the fetch node's count, each fetch's tasks.FetchOutput, the
// recount's) and stores what they came to in bookmark_import_summary, in one transaction
// with its completion; GET /imports/{id} shows it. It outputs the summary too. A retry
// writes the summary again.
func handleSummarizeImport(ctx context.Context, t tasks.SummarizeImport, run *venturi.Run[struct{}], app *App) (venturi.Outcome, error) {
	id, err := parseID(t.ImportID)
	if err != nil {
		return venturi.Outcome{}, venturi.Permanentf("bad import id %q: %v", t.ImportID, err)
	}
	if _, err := app.Store.GetImportForRun(ctx, app.Pool, id); errors.Is(err, pgx.ErrNoRows) {
		return venturi.CompletedWith("import deleted; nothing to summarize"), nil
	} else if err != nil {
		return venturi.Outcome{}, err
	}
	outs, err := run.UpstreamOutputs(ctx)
	if errors.Is(err, venturi.ErrNotInWorkflow) {
		return venturi.Outcome{}, venturi.Permanent(err) // enqueued outside an import's workflow
	}
	if err != nil {
		return venturi.Outcome{}, err
	}
	s := summarize(outs)
	failures, err := json.Marshal(s.Failures)
	if err != nil {
		return venturi.Outcome{}, err
	}
	if err := run.SetOutput(s); err != nil {
		return venturi.Outcome{}, err
	}
	var out venturi.Outcome
	err = pgx.BeginFunc(ctx, app.Pool, func(tx pgx.Tx) error {
		if err := app.Store.UpsertImportSummary(ctx, tx, store.UpsertImportSummaryParams{ImportID: id,
			Fetches: int32(s.Fetches), Fetched: int32(s.Fetched), TitlesFound: int32(s.TitlesFound), Failed: int32(s.Failed),
			Failures: string(failures), GaveUp: int32(s.GaveUp), Superseded: int32(s.Superseded), TagIndex: s.TagIndex,
		}); err != nil {
			return err
		}
		var err error
		out, err = run.CompleteTx(ctx, tx, venturi.CompletedWith(fmt.Sprintf(
			"%d fetches: %d fetched (%d with a title), %d failed, %d gave up, %d superseded; tag index %s",
			s.Fetches, s.Fetched, s.TitlesFound, s.Failed, s.GaveUp, s.Superseded, s.TagIndex)))
		return err
	})
	return out, err
}

// reasonCode is the form of a fetch failure's reason code (the bookmark table's CHECK).
var reasonCode = regexp.MustCompile(`^[a-z_]{1,32}$`)

// summarize tallies the outputs upstream of an import's summary node: the fetch node's
// (how many fetches it spawned), its fetches' (fetch/<bookmark id>) and the reindex
// node's. A fetch without an output ended without completing (it gave up, or was
// cancelled); one whose output is not a known status counts so too. A failure's reason
// that is not a reason code counts as "other".
func summarize(outs map[string]json.RawMessage) tasks.ImportSummary {
	s := tasks.ImportSummary{Failures: map[string]int{}, TagIndex: tasks.TagIndexFailed}
	var spawned tasks.ImportFetchesOutput
	if b, ok := outs[tasks.ImportNodeFetch]; ok {
		_ = json.Unmarshal(b, &spawned) // undecodable: counted from the fetches' outputs
	}
	if _, ok := outs[tasks.ImportNodeReindex]; ok {
		s.TagIndex = tasks.TagIndexRebuilt
	}
	for name, b := range outs {
		if !strings.HasPrefix(name, tasks.ImportNodeFetch+"/") {
			continue
		}
		var f tasks.FetchOutput
		if json.Unmarshal(b, &f) != nil {
			continue
		}
		switch f.Status {
		case tasks.FetchStatusFetched:
			s.Fetched++
			if f.TitleFound {
				s.TitlesFound++
			}
		case tasks.FetchStatusFailed:
			s.Failed++
			reason := f.Reason
			if !reasonCode.MatchString(reason) {
				reason = "other"
			}
			s.Failures[reason]++
		case tasks.FetchStatusSuperseded:
			s.Superseded++
		}
	}
	known := s.Fetched + s.Failed + s.Superseded
	s.Fetches = max(spawned.Fetches, known)
	s.GaveUp = s.Fetches - known
	return s
}

package venturi_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"testing"
)

// TestWorkerSendsNoTimestamps guards "database time only": every decision about due
// times, leases, backoff and retention is made with the server's now(), and workers pass
// durations. The only timestamps any statement accepts are the run-at times a producer
// chooses explicitly with venturi.At, and durable cron's fire times (cron.go): calendar
// times computed from the server's now(), read in the same transaction (CronLock, CronNow,
// CronDue), a ledger page's cursor, and a test's injected time (CronDueParams.Now, nil
// outside tests); and the ops API's filter bounds (of a listing and of a dry run's count),
// listing cursors and history start,
// which select rows and decide nothing. A worker whose clock is an hour off therefore
// cannot move a lease, a retry or a rescue. (A process's wall clock cannot be faked for
// a Go binary here: Go reads it through the vDSO, and time namespaces do not offset it.)
func TestWorkerSendsNoTimestamps(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("internal/dbsqlc/*.sql.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no generated query files (%v)", err)
	}
	fset := token.NewFileSet()
	var parsed []*ast.File
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, f)
	}
	allowed := []string{"InsertJobParams.At", "InsertJobsParams.Ats", "InsertIfNoCandidateParams.At",
		"MergeIntoParams.At", "InsertOrReplaceParams.At", "InsertWorkflowJobsParams.Ats",
		// durable cron: fire times from the database's now(), not the worker's clock
		"CronAdvanceParams.NextFire", "CronAdvanceParams.LastFire", "CronDueParams.Now", "CronFireParams.FireAt",
		"CronFiresParams.Before", "CronInsertParams.NextFire", "CronSetPausedParams.NextFire", "CronUpdateParams.NextFire",
		// the ops API: a filter's created-time bounds and a history's start, chosen by the
		// caller, and a listing cursor's position (a time read from a listed job's row)
		"ListJobsParams.After", "ListJobsParams.Before", "ListJobsParams.CTs", "StatsHistoryParams.Since",
		"ListWorkflowsParams.After", "ListWorkflowsParams.Before",
		// a bulk dry run's count: the same filter bounds
		"CountMatchingJobsParams.After", "CountMatchingJobsParams.Before"}
	var found []string
	inspect := func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok {
			return true
		}
		st, ok := ts.Type.(*ast.StructType)
		if !ok || len(ts.Name.Name) < 6 || ts.Name.Name[len(ts.Name.Name)-6:] != "Params" {
			return false
		}
		for _, field := range st.Fields.List {
			if isTime(field.Type) {
				for _, name := range field.Names {
					found = append(found, ts.Name.Name+"."+name.Name)
				}
			}
		}
		return false
	}
	for _, f := range parsed {
		ast.Inspect(f, inspect)
	}
	for _, f := range found {
		if !slices.Contains(allowed, f) {
			t.Errorf("statement parameter %s is a timestamp: pass a duration and compute with now()", f)
		}
	}
	if len(found) != len(allowed) {
		t.Errorf("timestamp parameters = %v, want exactly %v", found, allowed)
	}
}

// isTime reports whether e is time.Time, *time.Time or []time.Time.
func isTime(e ast.Expr) bool {
	switch x := e.(type) {
	case *ast.StarExpr:
		return isTime(x.X)
	case *ast.ArrayType:
		return isTime(x.Elt)
	case *ast.SelectorExpr:
		id, ok := x.X.(*ast.Ident)
		return ok && id.Name == "time" && x.Sel.Name == "Time"
	}
	return false
}

package main

import "testing"

// venturiSQL finds the statements bench explain needs in venturi's generated code, which
// sqlc writes as one file per query file.
func TestVenturiSQLFindsTheExplainedStatements(t *testing.T) {
	sqls, err := venturiSQL("../venturi")
	if err != nil {
		t.Fatal(err)
	}
	if len(sqls) < 100 {
		t.Fatalf("found %d statements in ../venturi/internal/dbsqlc, want all of them", len(sqls))
	}
}

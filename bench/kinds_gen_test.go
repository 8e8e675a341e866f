package main

import (
	"bytes"
	"os"
	"testing"

	"github.com/venturi-dev/bench/internal/kindsgen"
)

// TestKindsGenIsFresh fails when the committed kinds_gen.go is not what kindsgen
// generates (edited by hand, or the generator changed without a regeneration).
func TestKindsGenIsFresh(t *testing.T) {
	want, err := kindsgen.Source()
	if err != nil {
		t.Fatalf("kindsgen: %v", err)
	}
	got, err := os.ReadFile("kinds_gen.go")
	if err != nil {
		t.Fatalf("read the committed file: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("kinds_gen.go is stale: regenerate it with `cd bench && go generate ./...` (or `go run ./kindsgen`) and commit the result")
	}
}

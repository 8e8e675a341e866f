package main

import (
	"slices"
	"testing"
)

func TestRedactArgsHidesTheDatabasePasswordInEveryURLForm(t *testing.T) {
	in := []string{
		"-db", "postgres://postgres:s3cret@127.0.0.1:54329/venturi_bench?sslmode=disable",
		"-db=postgres://postgres:s3cret@127.0.0.1:54329/venturi_bench",
		"-only", "sustained",
		"postgres://postgres@127.0.0.1:54329/x",
	}
	want := []string{
		"-db", "postgres://postgres:xxxxx@127.0.0.1:54329/venturi_bench?sslmode=disable",
		"-db=postgres://postgres:xxxxx@127.0.0.1:54329/venturi_bench",
		"-only", "sustained",
		"postgres://postgres@127.0.0.1:54329/x",
	}
	got := redactArgs(in)
	if !slices.Equal(got, want) {
		t.Fatalf("redactArgs(%q)\n got %q\nwant %q", in, got, want)
	}
	if in[1] != "postgres://postgres:s3cret@127.0.0.1:54329/venturi_bench?sslmode=disable" {
		t.Fatalf("redactArgs changed its input: %q", in[1])
	}
}

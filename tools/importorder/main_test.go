package main

import (
	"strings"
	"testing"
)

func TestProcess(t *testing.T) {
	const local = "github.com/venturi-dev/"
	for _, c := range []struct {
		name, src, want, problem string
	}{
		{"in order", "package p\n\nimport (\n\t\"fmt\"\n\n\t\"github.com/jackc/pgx/v5\"\n\n\t\"github.com/venturi-dev/venturi\"\n)\n", "", ""},
		{"single", "package p\n\nimport \"fmt\"\n", "", ""},
		{"cgo", "package p\n\n// #include <stdio.h>\nimport \"C\"\n\nimport \"fmt\"\n", "", ""},
		{"no blank before local",
			"package p\n\nimport (\n\t\"github.com/jackc/pgx/v5\"\n\t\"github.com/venturi-dev/venturi\"\n)\n",
			"package p\n\nimport (\n\t\"github.com/jackc/pgx/v5\"\n\n\t\"github.com/venturi-dev/venturi\"\n)\n",
			"no blank line"},
		{"std split, comments kept",
			"package p\n\nimport (\n\t\"time\" // t\n\n\t// doc\n\t\"fmt\"\n)\n",
			"package p\n\nimport (\n\t// doc\n\t\"fmt\"\n\t\"time\" // t\n)\n",
			"split"},
		{"two declarations, wrong order",
			"package p\n\nimport \"github.com/venturi-dev/venturi\"\n\nimport (\n\tx \"os\"\n\t_ \"embed\"\n)\n\nvar _ = x.Args\n",
			"package p\n\nimport (\n\t_ \"embed\"\n\tx \"os\"\n\n\t\"github.com/venturi-dev/venturi\"\n)\n\nvar _ = x.Args\n",
			"2 import declarations"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, problem, err := process("x.go", []byte(c.src), local)
			if err != nil {
				t.Fatal(err)
			}
			if c.problem == "" {
				if problem != "" {
					t.Fatalf("problem %q, want none", problem)
				}
				return
			}
			if !strings.Contains(problem, c.problem) {
				t.Errorf("problem %q, want %q in it", problem, c.problem)
			}
			if string(out) != c.want {
				t.Errorf("got\n%s\nwant\n%s", out, c.want)
			}
			if _, again, err := process("x.go", out, local); err != nil || again != "" {
				t.Errorf("the fixed file: %q, %v", again, err)
			}
		})
	}
}

func TestFreeCommentIsNotRewritten(t *testing.T) {
	src := "package p\n\nimport (\n\t\"time\"\n\n\t// a note about nothing\n\n\t\"fmt\"\n)\n"
	if _, _, err := process("x.go", []byte(src), "github.com/venturi-dev/"); err == nil {
		t.Fatal("want an error for a comment that belongs to no import")
	}
}

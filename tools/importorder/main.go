// Command importorder checks (or with -fix rewrites) the import blocks of Go files: the
// imports of a file are in one block of up to three groups, in this order, separated by
// one blank line and each sorted by path (as gofmt sorts a group):
//
//  1. the standard library (a first path element without a dot),
//  2. third-party modules,
//  3. this repository's modules (paths with the -local prefix).
//
// `import "C"` (cgo) stays a declaration of its own, after its preamble. make lint runs
// it over every tracked .go file (make lint/imports), make fix/imports rewrites them.
//
// Usage: importorder [-local PREFIX] [-fix] FILE…
// Exit status 1 when a file is out of order (without -fix) or cannot be rewritten.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"sort"
	"strconv"
	"strings"
)

var (
	local = flag.String("local", "github.com/venturi-dev/", "import path prefix of this repository's modules (the third group)")
	fix   = flag.Bool("fix", false, "rewrite the files' import blocks instead of reporting them")
)

func main() {
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: importorder [-local PREFIX] [-fix] FILE…\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	bad := 0
	for _, name := range flag.Args() {
		src, err := os.ReadFile(name)
		if errors.Is(err, fs.ErrNotExist) {
			continue // listed by git but deleted in the work tree
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			bad++
			continue
		}
		out, problem, err := process(name, src, *local)
		switch {
		case err != nil:
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
			bad++
		case problem == "":
		case *fix:
			if err := os.WriteFile(name, out, 0o644); err != nil {
				fmt.Fprintln(os.Stderr, err)
				bad++
				continue
			}
			fmt.Printf("%s: fixed (%s)\n", name, problem)
		default:
			fmt.Printf("%s: %s\n", name, problem)
			bad++
		}
	}
	if bad > 0 {
		if !*fix {
			fmt.Fprintf(os.Stderr, "importorder: %d file(s) out of order: imports in groups std / third-party / %s..., separated by a blank line, each sorted (fix: make fix/imports)\n", bad, *local)
		}
		os.Exit(1)
	}
}

// group returns 0 for the standard library, 1 for third-party and 2 for local paths.
func group(path, local string) int {
	if local != "" && (strings.HasPrefix(path, local) || path == strings.TrimSuffix(local, "/")) {
		return 2
	}
	first, _, _ := strings.Cut(path, "/")
	if strings.Contains(first, ".") {
		return 1
	}
	return 0
}

type spec struct {
	path, name string
	group      int
	text       string // the spec with its comments, as written (one or more lines)
	start, end int    // lines, comments included
}

// process returns the file with its imports in order, and a description of what was out
// of order ("" when nothing was).
func process(filename string, src []byte, local string) ([]byte, string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filename, src, parser.ImportsOnly|parser.ParseComments)
	if err != nil {
		return nil, "", err
	}
	var decls []*ast.GenDecl
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.IMPORT {
			continue
		}
		if len(g.Specs) == 1 && g.Specs[0].(*ast.ImportSpec).Path.Value == `"C"` {
			continue // cgo: its own declaration, after its preamble
		}
		decls = append(decls, g)
	}
	if len(decls) == 0 {
		return src, "", nil
	}
	off := func(p token.Pos) int { return fset.Position(p).Offset }
	line := func(p token.Pos) int { return fset.Position(p).Line }

	// Every comment inside the import declarations must belong to a spec (its doc comment
	// or its line comment): a free-standing one could not be moved with certainty.
	owned := map[*ast.CommentGroup]bool{}
	var specs []spec
	for _, g := range decls {
		for _, s := range g.Specs {
			is := s.(*ast.ImportSpec)
			if is.Path.Value == `"C"` {
				return nil, "", fmt.Errorf("%s: import \"C\" inside a block with other imports: give it a declaration of its own", fset.Position(is.Pos()))
			}
			p, err := strconv.Unquote(is.Path.Value)
			if err != nil {
				return nil, "", err
			}
			sp := spec{path: p, group: group(p, local)}
			if is.Name != nil {
				sp.name = is.Name.Name
			}
			from, to := is.Pos(), is.End()
			if is.Doc != nil {
				owned[is.Doc] = true
				from = is.Doc.Pos()
			}
			if is.Comment != nil {
				owned[is.Comment] = true
				to = is.Comment.End()
			}
			sp.text = string(src[off(from):off(to)])
			sp.start, sp.end = line(from), line(to)
			specs = append(specs, sp)
		}
	}
	var free []int // lines taken by comments that belong to no spec
	for _, cg := range f.Comments {
		for _, g := range decls {
			if cg.Pos() > g.Pos() && cg.End() < g.End() && !owned[cg] {
				if len(decls) > 1 || g.Lparen.IsValid() {
					for l := line(cg.Pos()); l <= line(cg.End()); l++ {
						free = append(free, l)
					}
				}
			}
		}
	}

	// What is wrong, if anything.
	var problems []string
	if len(decls) > 1 {
		problems = append(problems, fmt.Sprintf("%d import declarations (want one)", len(decls)))
	}
	covered := func(a, b int) bool { // every line strictly between a and b is a free comment
		for l := a + 1; l < b; l++ {
			found := false
			for _, c := range free {
				if c == l {
					found = true
					break
				}
			}
			if !found {
				return false
			}
		}
		return true
	}
	for i := 1; i < len(specs) && len(problems) == 0; i++ {
		a, b := specs[i-1], specs[i]
		blank := !covered(a.end, b.start)
		switch {
		case b.group < a.group:
			problems = append(problems, fmt.Sprintf("line %d: %q (%s) after %q (%s)", b.start, b.path, groupName(b.group), a.path, groupName(a.group)))
		case b.group > a.group && !blank:
			problems = append(problems, fmt.Sprintf("line %d: no blank line between the %s and the %s imports", b.start, groupName(a.group), groupName(b.group)))
		case b.group == a.group && blank:
			problems = append(problems, fmt.Sprintf("line %d: the %s imports are split by a blank line (want one group)", b.start, groupName(a.group)))
		case b.group == a.group && less(b, a):
			problems = append(problems, fmt.Sprintf("line %d: %q before %q is not sorted", b.start, a.path, b.path))
		}
	}
	if len(problems) == 0 {
		return src, "", nil
	}
	if len(free) > 0 {
		return nil, "", fmt.Errorf("%s (not rewritten: a comment in the imports belongs to no import; move it and rerun)", strings.Join(problems, "; "))
	}

	// The block in order, replacing every import declaration (the first one's place).
	sort.SliceStable(specs, func(i, j int) bool {
		if specs[i].group != specs[j].group {
			return specs[i].group < specs[j].group
		}
		return less(specs[i], specs[j])
	})
	var b bytes.Buffer
	b.WriteString("import (\n")
	for i, s := range specs {
		if i > 0 && s.group != specs[i-1].group {
			b.WriteString("\n")
		}
		b.WriteString("\t" + s.text + "\n")
	}
	b.WriteString(")")
	var out bytes.Buffer
	first := decls[0]
	from := first.Pos()
	if first.Doc != nil {
		from = first.Doc.Pos()
	}
	out.Write(src[:off(from)])
	if first.Doc != nil {
		out.Write(src[off(first.Doc.Pos()):off(first.Doc.End())])
		out.WriteString("\n")
	}
	out.Write(b.Bytes())
	prev := off(first.End())
	for _, g := range decls[1:] {
		from := g.Pos()
		if g.Doc != nil {
			from = g.Doc.Pos()
		}
		out.Write(src[prev:off(from)])
		prev = off(g.End())
	}
	out.Write(src[prev:])
	formatted, err := format.Source(out.Bytes())
	if err != nil {
		return nil, "", fmt.Errorf("rewritten imports do not format: %v", err)
	}
	return formatted, strings.Join(problems, "; "), nil
}

func less(a, b spec) bool {
	if a.path != b.path {
		return a.path < b.path
	}
	return a.name < b.name
}

func groupName(g int) string {
	return [...]string{"standard library", "third-party", "local"}[g]
}

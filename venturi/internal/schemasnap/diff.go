package schemasnap

import (
	"fmt"
	"slices"
	"strings"
)

// Change says how a file of a generated snapshot differs from the committed one.
type Change string

// The changes [Compare] reports.
const (
	// Changed: both snapshots have the file, with different contents.
	Changed Change = "changed"
	// Missing: the migrations produce the file; the committed snapshot lacks it.
	Missing Change = "missing"
	// Extra: the committed snapshot has a file the migrations do not produce.
	Extra Change = "extra"
)

// Difference is one file in which a generated snapshot differs from the committed one.
type Difference struct {
	// Path is the file's path in the snapshot (tables.sql, functions/<name>.sql).
	Path   string
	Change Change
	// Diff is a unified diff from the committed file to the generated one (the whole file,
	// as added or removed lines, when one side lacks it).
	Diff string
}

// String is the difference as a report line followed by its diff.
func (d Difference) String() string {
	var what string
	switch d.Change {
	case Missing:
		what = "missing from the committed snapshot (the migrations produce it)"
	case Extra:
		what = "committed, but the migrations do not produce it"
	default:
		what = "differs from what the migrations produce"
	}
	return fmt.Sprintf("%s: %s\n%s", d.Path, what, d.Diff)
}

// Compare returns the files in which generated differs from committed, by path.
func Compare(committed, generated Snapshot) []Difference {
	var paths []string
	for p := range committed {
		paths = append(paths, p)
	}
	for p := range generated {
		if _, ok := committed[p]; !ok {
			paths = append(paths, p)
		}
	}
	slices.Sort(paths)
	var out []Difference
	for _, p := range paths {
		c, inC := committed[p]
		g, inG := generated[p]
		switch {
		case inC && inG && c == g:
			continue
		case !inC:
			out = append(out, Difference{Path: p, Change: Missing, Diff: unified(p, nil, lines(g))})
		case !inG:
			out = append(out, Difference{Path: p, Change: Extra, Diff: unified(p, lines(c), nil)})
		default:
			out = append(out, Difference{Path: p, Change: Changed, Diff: unified(p, lines(c), lines(g))})
		}
	}
	return out
}

// lines splits text into lines without their line ends.
func lines(text string) []string {
	if text == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(text, "\n"), "\n")
}

// maxDiffCells bounds the line diff's table (lines of one side times the other's).
const maxDiffCells = 16 << 20

// unified returns a unified diff of a to b with three lines of context, from the longest
// common subsequence of their lines.
func unified(name string, a, b []string) string {
	// The common prefix and suffix need no table.
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	ma, mb := a[pre:len(a)-suf], b[pre:len(b)-suf]
	type op struct {
		kind byte // ' ', '-', '+'
		text string
	}
	var ops []op
	for _, l := range a[:pre] {
		ops = append(ops, op{' ', l})
	}
	if len(ma)*len(mb) > maxDiffCells {
		for _, l := range ma {
			ops = append(ops, op{'-', l})
		}
		for _, l := range mb {
			ops = append(ops, op{'+', l})
		}
	} else {
		// lcs[i][j]: the longest common subsequence of ma[i:] and mb[j:].
		w := len(mb) + 1
		lcs := make([]int32, (len(ma)+1)*w)
		for i := len(ma) - 1; i >= 0; i-- {
			for j := len(mb) - 1; j >= 0; j-- {
				if ma[i] == mb[j] {
					lcs[i*w+j] = lcs[(i+1)*w+j+1] + 1
				} else {
					lcs[i*w+j] = max(lcs[(i+1)*w+j], lcs[i*w+j+1])
				}
			}
		}
		i, j := 0, 0
		for i < len(ma) || j < len(mb) {
			switch {
			case i < len(ma) && j < len(mb) && ma[i] == mb[j]:
				ops = append(ops, op{' ', ma[i]})
				i++
				j++
			case i < len(ma) && (j == len(mb) || lcs[(i+1)*w+j] >= lcs[i*w+j+1]):
				ops = append(ops, op{'-', ma[i]})
				i++
			default:
				ops = append(ops, op{'+', mb[j]})
				j++
			}
		}
	}
	for _, l := range a[len(a)-suf:] {
		ops = append(ops, op{' ', l})
	}

	const context = 3
	var out strings.Builder
	fmt.Fprintf(&out, "--- committed/%s\n+++ generated/%s\n", name, name)
	// Line numbers (1-based) in a and b where each op starts.
	na, nb := make([]int, len(ops)+1), make([]int, len(ops)+1)
	na[0], nb[0] = 1, 1
	for k, o := range ops {
		na[k+1], nb[k+1] = na[k], nb[k]
		if o.kind != '+' {
			na[k+1]++
		}
		if o.kind != '-' {
			nb[k+1]++
		}
	}
	for k := 0; k < len(ops); {
		if ops[k].kind == ' ' {
			k++
			continue
		}
		// A hunk: from context lines before this change to context lines after the last
		// change that is within 2*context lines of the one before it.
		start := max(0, k-context)
		end := k
		for m := k; m < len(ops); m++ {
			if ops[m].kind != ' ' {
				end = m + 1
			} else if m-end >= 2*context {
				break
			}
		}
		stop := min(len(ops), end+context)
		var ca, cb int
		for _, o := range ops[start:stop] {
			if o.kind != '+' {
				ca++
			}
			if o.kind != '-' {
				cb++
			}
		}
		fmt.Fprintf(&out, "@@ -%d,%d +%d,%d @@\n", na[start], ca, nb[start], cb)
		for _, o := range ops[start:stop] {
			out.WriteByte(o.kind)
			out.WriteString(o.text)
			out.WriteByte('\n')
		}
		k = stop
	}
	return out.String()
}

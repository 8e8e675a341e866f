package dbsqlc

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestBatchHelpersFollowTheGeneratedArgumentOrder: each Queue* helper passes its Params
// fields in the order of the generated method of the same query. sqlc numbers parameters
// by where they appear in the SQL, so editing a query can reorder them; a helper that
// kept the old order would bind values to the wrong placeholders.
func TestBatchHelpersFollowTheGeneratedArgumentOrder(t *testing.T) {
	files, err := filepath.Glob("*.sql.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no generated query files (%v)", err)
	}
	var gen []byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		gen = append(gen, b...)
	}
	batch, err := os.ReadFile("batch.go")
	if err != nil {
		t.Fatal(err)
	}
	field := regexp.MustCompile(`arg\.(\w+)`)
	args := func(call string) string {
		var out []string
		for _, m := range field.FindAllStringSubmatch(call, -1) {
			out = append(out, m[1])
		}
		return strings.Join(out, ",")
	}
	helper := regexp.MustCompile(`(?s)func Queue(\w+)\(b \*pgx\.Batch, arg \w+Params[^{]*\{\s*b\.Queue\((\w+),(.*?)\)`)
	helpers := helper.FindAllStringSubmatch(string(batch), -1)
	if len(helpers) < 5 {
		t.Fatalf("found only %d batch helpers with a Params argument; has batch.go changed shape?", len(helpers))
	}
	for _, h := range helpers {
		name, stmt, call := h[1], h[2], h[3]
		m := regexp.MustCompile(`(?s)func \(q \*Queries\) ` + name + `\(ctx context\.Context, db DBTX, arg \w+Params\)[^{]*\{\s*\w+(?:, err)? :?= db\.\w+\(ctx, ` + stmt + `,(.*?)\)\n`).FindStringSubmatch(string(gen))
		if m == nil {
			t.Errorf("Queue%s: no generated method %s using %s", name, name, stmt)
			continue
		}
		if got, want := args(call), args(m[1]); got != want {
			t.Errorf("Queue%s passes (%s), the generated %s passes (%s)", name, got, name, want)
		}
	}
}

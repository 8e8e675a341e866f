package venturi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/internal/testdb"
)

// nodeProducerDir is the Node producer of the SQL API, in the repository beside venturi:
// its package.json, package-lock.json and produce.js (`make deps/node` runs npm ci there).
const nodeProducerDir = "../examples/node-producer"

// sendEmail is the task the Node producer enqueues as kind send_email.
type sendEmail struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

func (sendEmail) Kind() string { return "send_email" }

// nodeRequired fails the test, saying what is missing: the Node producer must run
// wherever venturi's tests run (make test and make test/quick install its packages first,
// with make deps/node), as the dashboard's tests need Chromium.
func nodeRequired(t *testing.T, what string) {
	t.Helper()
	t.Fatalf("%s: the SQL API's Node producer must run; make deps/node installs its packages (Node 20 and npm needed)", what)
}

// TestNodeProducer: a producer in another language, examples/node-producer/produce.js
// (Node and the pg package), enqueues jobs through the SQL API into a schema a Go worker
// serves: one in a transaction, the same dedup key again (replaced), three in one call,
// and one refused (its SQLSTATE and field reach the Node client). The worker runs them
// with the payloads Node sent, and the script reads their end with venturi_job_status.
func TestNodeProducer(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		nodeRequired(t, "node is not installed")
	}
	if _, err := os.Stat(filepath.Join(nodeProducerDir, "node_modules", "pg", "package.json")); err != nil {
		nodeRequired(t, "the Node producer's packages are not installed ("+nodeProducerDir+"/node_modules)")
	}
	pool, q := newQueue(t)
	var (
		mu   sync.Mutex
		sent []sendEmail
	)
	w := newWorker(t, pool, struct{}{}, fastConfig())
	venturi.MustRegisterFunc(w, func(ctx context.Context, e sendEmail, _ *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, e)
		return venturi.CompletedWith("sent to " + e.To), nil
	})
	startWorker(t, w)

	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "produce.js")
	cmd.Dir = nodeProducerDir
	cmd.Env = append(os.Environ(), "DATABASE_URL="+testdb.URL(t), "VENTURI_SCHEMA="+schemaOf(pool))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node produce.js: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.String())
	}

	type line struct {
		Step, ID, Action, State, Note, Code, Column, Message string
		Runs                                                 int
	}
	var lines []line
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("produce.js printed %q: %v", sc.Text(), err)
		}
		lines = append(lines, l)
	}
	var steps []string
	done := map[string]line{}
	for _, l := range lines {
		steps = append(steps, l.Step+" "+l.Action)
		if l.Step == "done" {
			done[l.ID] = l
		}
	}
	if got := strings.Join(steps, ","); got != "one inserted,again replaced,many inserted,many inserted,many inserted,refused ,done ,done ,done ,done " {
		t.Fatalf("produce.js steps: %s\n%s", got, out)
	}
	if lines[1].ID != lines[0].ID {
		t.Fatalf("the second enqueue of the key went to %s, not the pending %s", lines[1].ID, lines[0].ID)
	}
	if r := lines[5]; r.Code != "22003" || r.Column != "priority" || !strings.HasPrefix(r.Message, "venturi_enqueue: priority: ") {
		t.Fatalf("refused enqueue as Node saw it: %+v", r)
	}
	for _, id := range []string{lines[0].ID, lines[2].ID, lines[3].ID, lines[4].ID} {
		if d := done[id]; d.State != "completed" || d.Runs != 1 || !strings.HasPrefix(d.Note, "sent to ") {
			t.Fatalf("job %s as Node read it: %+v", id, d)
		}
	}
	// The Go side: four jobs ran, with Node's payloads (the replaced one's address).
	mu.Lock()
	defer mu.Unlock()
	var tos []string
	for _, e := range sent {
		tos = append(tos, e.To)
	}
	if got := strings.Join(tos, ","); len(sent) != 4 || !strings.Contains(got, "ada@example.org") ||
		!strings.Contains(got, "bob@example.com") || !strings.Contains(got, "cy@example.com") || !strings.Contains(got, "dee@example.com") {
		t.Fatalf("the worker sent %s", got)
	}
	if n := countJobs(t, pool, "kind = 'send_email' AND state = 'completed'"); n != 4 {
		t.Fatalf("%d completed jobs", n)
	}
	if j := jobByID(t, q, idWhere(t, pool, "dedup_key = 'welcome/ada'")); j.Meta["source"] != "node" {
		t.Fatalf("meta from Node: %v", j.Meta)
	}
}

package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/venturi-dev/venturi"
)

// The backdrop (-backdrop N): N blocked workflow jobs in venturi_job while
// scenario 4's and scenario 11's venturi runs drain their jobs, to show whether jobs that
// wait in workflows cost the others anything (blocked jobs are in no claim index). Every
// repetition makes those runs twice, without and with the backdrop; the order alternates
// by repetition (without first in even ones), so that its rows are loaded about once per
// two repetitions.
//
// The backdrop is made once by the engine: workflows of up to -backdrop-nodes nodes (1,000
// by default), each node needing an open group that is never sealed, so every node's job
// stays blocked; then its job, node and workflow rows are copied into tables of their own
// (backdropSaved), from which later loads insert them back in one statement each.

// With -backdrop-kind scheduled the same rows are loaded as plain jobs due in a year
// (no workflow): the table has the same size and layout, and a difference between the two
// kinds is what waiting in a workflow costs the others beyond the rows' presence.

// The backdrop's kinds of jobs (-backdrop-kind).
const (
	backdropBlocked   = "blocked"
	backdropScheduled = "scheduled"
)

// backdrop is the state of the backdrop's rows.
type backdrop struct {
	n, nodes int
	kind     string // backdropBlocked or backdropScheduled
	want     bool   // the runs about to start want it in place
	loaded   bool   // its rows are in venturi's tables
	saved    bool   // its rows are copied aside
}

// backdropSaved are the tables holding the backdrop's rows aside: venturi's table, its copy.
var backdropSaved = [][2]string{
	{"venturi_workflow", "bench_backdrop_workflow"},
	{"venturi_workflow_node", "bench_backdrop_node"},
	{"venturi_job", "bench_backdrop_job"},
}

// backdropSizes splits n nodes into workflows of at most per nodes.
func backdropSizes(n, per int) []int {
	var out []int
	for left := n; left > 0; left -= min(left, per) {
		out = append(out, min(left, per))
	}
	return out
}

// backdropPhases are the conditions of a repetition's runs, in order: without the
// backdrop only when there is none (or -libs leaves venturi out), else both, without
// first in even repetitions.
func (b *bencher) backdropPhases(rep int) []bool {
	switch {
	case b.bd == nil || b.o.libs != nil && !b.o.libs[libVenturi]:
		return []bool{false}
	case rep%2 == 0:
		return []bool{false, true}
	}
	return []bool{true, false}
}

// backdropWant says whether the next runs want the backdrop in place.
func (b *bencher) backdropWant(on bool) {
	if b.bd != nil {
		b.bd.want = on
	}
}

// backdropTable is the report's backdrop table, made on first use.
func (b *bencher) backdropTable() *backdropReport {
	if b.rep.backdrop == nil {
		b.rep.backdrop = newBackdropReport(b.bd.n, b.bd.nodes, b.bd.kind)
	}
	return b.rep.backdrop
}

// backdropE2E records a venturi run of scenario 4 of n jobs in the backdrop table, in
// condition cond (backdropOff, backdropOn); nothing without -backdrop.
func (b *bencher) backdropE2E(n int, cond string, r e2eResult) {
	if b.bd == nil {
		return
	}
	t := b.backdropTable().t
	run := fmt.Sprintf("4. end-to-end, %d no-op jobs", n)
	t.add(run+": jobs/s", cond, r.jps)
	if r.cpu.ok {
		t.add(run+": worker CPU ms per 1k jobs", cond, float64(r.cpu.worker.Milliseconds())*1000/float64(n))
		t.add(run+": PostgreSQL backend CPU ms per 1k jobs", cond, float64(r.cpu.db.Milliseconds())*1000/float64(n))
	}
	t.add(run+": WAL bytes per job (drain)", cond, float64(r.walBytes)/float64(n))
}

// backdropFlow records a run of scenario 11's variant of n jobs in the backdrop table.
func (b *bencher) backdropFlow(variant string, n int, cond string, jps float64, cpu cpuUse) {
	if b.bd == nil {
		return
	}
	t := b.backdropTable().t
	run := fmt.Sprintf("11. %s, %d jobs", variant, n)
	t.add(run+": jobs/s", cond, jps)
	if cpu.ok {
		t.add(run+": worker CPU ms per 1k jobs", cond, float64(cpu.worker.Milliseconds())*1000/float64(n))
		t.add(run+": PostgreSQL backend CPU ms per 1k jobs", cond, float64(cpu.db.Milliseconds())*1000/float64(n))
	}
}

// resetVenturi empties the job tables between runs as resetJobs does, keeping the
// backdrop's rows (or loading them) when the runs want them; venturi_job is then vacuumed,
// so that a run starts without the dead rows of the one before, as a truncated table does.
func (b *bencher) resetVenturi(ctx context.Context) error {
	bd := b.bd
	switch {
	case bd == nil:
		return resetJobs(ctx, b.admin)
	case !bd.want:
		return b.backdropUnload(ctx)
	case !bd.loaded:
		if err := b.backdropUnload(ctx); err != nil {
			return err
		}
		return b.backdropLoad(ctx)
	}
	_, err := b.admin.Exec(ctx, "DELETE FROM "+venturiSchema+".venturi_job WHERE kind <> '"+kindBackdrop+"'; "+
		"TRUNCATE "+venturiSchema+".venturi_job_history; TRUNCATE "+riverSchema+".river_job, "+riverSchema+".river_leader")
	if err != nil {
		return err
	}
	_, err = b.admin.Exec(ctx, "VACUUM "+venturiSchema+".venturi_job")
	return err
}

// backdropUnload empties the job tables and, when the backdrop is loaded, the workflow
// tables (the backdrop's workflows are all there is in them).
func (b *bencher) backdropUnload(ctx context.Context) error {
	if err := resetJobs(ctx, b.admin); err != nil {
		return err
	}
	if b.bd == nil || !b.bd.loaded {
		return nil
	}
	b.bd.loaded = false
	_, err := b.admin.Exec(ctx, "TRUNCATE "+venturiSchema+".venturi_workflow, "+venturiSchema+".venturi_workflow_node, "+
		venturiSchema+".venturi_workflow_output, "+venturiSchema+".venturi_workflow_inbox")
	return err
}

// backdropLoad puts the backdrop's rows into the emptied tables: made by the engine the
// first time, inserted back from their copies afterwards; then vacuums and analyzes
// venturi_job (setting the new rows' hint bits and visibility, so that no later scan
// writes them) and checks that every backdrop job is blocked.
func (b *bencher) backdropLoad(ctx context.Context) error {
	bd := b.bd
	t0 := time.Now()
	how := "inserted from its copy"
	if !bd.saved {
		how = "made by the engine"
		if err := b.backdropMake(ctx); err != nil {
			return fmt.Errorf("backdrop: %w", err)
		}
		for _, t := range backdropSaved {
			sql := fmt.Sprintf("DROP TABLE IF EXISTS %[1]s.%[2]s; CREATE TABLE %[1]s.%[2]s AS SELECT * FROM %[1]s.%[3]s", venturiSchema, t[1], t[0])
			if _, err := b.admin.Exec(ctx, sql); err != nil {
				return err
			}
		}
		bd.saved = true
		if bd.kind == backdropScheduled {
			// The saved rows become plain jobs due in a year, loaded in place of the ones made
			// into the emptied table, as every later load inserts them.
			sql := fmt.Sprintf(`UPDATE %[1]s.bench_backdrop_job SET state = 'scheduled', run_at = now() + interval '1 year', workflow_id = NULL;
				TRUNCATE %[1]s.bench_backdrop_workflow, %[1]s.bench_backdrop_node;
				TRUNCATE %[1]s.venturi_workflow, %[1]s.venturi_workflow_node, %[1]s.venturi_workflow_output, %[1]s.venturi_workflow_inbox;
				TRUNCATE %[1]s.venturi_job;
				INSERT INTO %[1]s.venturi_job SELECT * FROM %[1]s.bench_backdrop_job`, venturiSchema)
			if _, err := b.admin.Exec(ctx, sql); err != nil {
				return err
			}
		}
	} else {
		for _, t := range backdropSaved {
			if _, err := b.admin.Exec(ctx, fmt.Sprintf("INSERT INTO %[1]s.%[2]s SELECT * FROM %[1]s.%[3]s", venturiSchema, t[0], t[1])); err != nil {
				return err
			}
		}
	}
	bd.loaded = true
	made := time.Since(t0)
	if _, err := b.admin.Exec(ctx, "VACUUM (ANALYZE) "+venturiSchema+".venturi_job"); err != nil {
		return err
	}
	var waiting, all int64
	if err := b.admin.QueryRow(ctx, "SELECT count(*) FILTER (WHERE state = $1::text::"+venturiSchema+".venturi_job_state), count(*) FROM "+venturiSchema+".venturi_job", bd.kind).Scan(&waiting, &all); err != nil {
		return err
	}
	if waiting != int64(bd.n) || all != int64(bd.n) {
		return fmt.Errorf("backdrop: %d %s jobs of %d, want %d", waiting, bd.kind, all, bd.n)
	}
	took := time.Since(t0)
	logf("  backdrop: %d %s jobs %s in %v, vacuumed in %v", bd.n, bd.kind, how, made.Round(time.Millisecond), (took - made).Round(time.Millisecond))
	r := b.backdropTable()
	r.loads = append(r.loads, fmt.Sprintf("%s in %v", how, took.Round(100*time.Millisecond)))
	return nil
}

// backdropMake enqueues the backdrop's workflows through venturi, two at a time: each a
// group left open and nodes that need it.
func (b *bencher) backdropMake(ctx context.Context) error {
	pool, err := poolFor(ctx, b.o.url, venturiSchema, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	sizes := backdropSizes(b.bd.n, b.bd.nodes)
	var (
		mu   sync.Mutex
		next int
		ferr error
		wg   sync.WaitGroup
	)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				stop := i >= len(sizes) || ferr != nil
				mu.Unlock()
				if stop {
					return
				}
				if _, err := q.EnqueueWorkflow(ctx, backdropWorkflow(i, sizes[i])); err != nil {
					mu.Lock()
					ferr = err
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return ferr
}

// backdropWorkflow is the backdrop's workflow i: an open group and n nodes that need it.
func backdropWorkflow(i, n int) *venturi.Workflow {
	wf := venturi.NewWorkflow(fmt.Sprintf("backdrop %d", i))
	gate := wf.Group("gate", venturi.OpenGroup())
	for j := range n {
		wf.Add(fmt.Sprintf("n%05d", j), BackdropTask{I: j}, venturi.Needs(gate))
	}
	return wf
}

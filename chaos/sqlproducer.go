package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// The SQL producer: while the workload runs (the arrival window), goroutines enqueue jobs
// of two kinds on a few shared dedup keys, through venturi's SQL API (venturi_enqueue, one
// job a call, and venturi_enqueue_many, batches of 2-4) and through Go's Enqueue, at once,
// under every fault of the run. SQLMerge's merge is Go code: an enqueue from SQL that meets
// a pending job of its key waits in venturi_deferred_merge until a worker applies it.
// SQLReplace's (Replace) is decided in SQL. Each enqueue carries a contribution of its own
// (s<n>: venturi_enqueue, m<n>: venturi_enqueue_many, g<n>: Enqueue), and the driver keeps
// every call in memory, acknowledged or failed, as the live producer does (producer.go).
// After the run, resolve holds the database to them (checkSQLProduced).

// sqlProducerRate is the SQL producer's calls per second, all paths together (a batch
// of venturi_enqueue_many is one call).
const sqlProducerRate = 8

// sqlMergeKeys and sqlReplaceKeys are the shared keys: few, so that enqueues collide.
var (
	sqlMergeKeys   = []string{"mk-0", "mk-1", "mk-2", "mk-3", "mk-4", "mk-5"}
	sqlReplaceKeys = []string{"rk-0", "rk-1", "rk-2", "rk-3"}
)

// The producer's paths.
const (
	viaSQL  = "venturi_enqueue"
	viaMany = "venturi_enqueue_many"
	viaGo   = "Enqueue"
)

// sqlItem is one enqueue of a call: its kind, key and contribution, and for an
// acknowledged call what venturi answered (the job's ID and the action).
type sqlItem struct {
	kind    string
	key     string
	contrib string
	id      ulid.ULID
	action  string // inserted, deferred, kept, replaced (SQL); inserted, merged, replaced (Go)
}

// sqlCall is one call of the producer: one enqueue, or a batch (venturi_enqueue_many).
type sqlCall struct {
	via       string
	items     []sqlItem
	at        time.Time
	acked     bool
	err       string
	transient bool
}

type sqlProducer struct {
	d      *driver
	pool   *pgxpool.Pool
	rate   float64 // calls per second, all paths together
	workMs int

	mu    sync.Mutex
	rng   *rand.Rand
	n     int // contributions so far
	calls []sqlCall
}

func newSQLProducer(d *driver, rate float64, workMs int) *sqlProducer {
	return &sqlProducer{d: d, rate: rate, workMs: workMs, rng: rand.New(rand.NewPCG(d.o.seed, 0x5e1))}
}

// sqlProducerSchema records, for each job of the producer's kinds inserted while another
// job of its kind and key is pending, that other job and whether it was ever claimed
// (chaos_dedup_beside, written by a trigger in the inserting transaction). Every enqueue
// takes its key's lock before it looks for a pending job, so a pending job that was never
// claimed was pending when the insert decided: the insert broke dedup. One that was claimed
// may have come back to pending (a retry, a rescue, a release) after the insert decided,
// which is no violation.
const sqlProducerSchema = `
CREATE TABLE chaos_dedup_beside (
    job_id        uuid NOT NULL,
    kind          text NOT NULL,
    dedup_key     text NOT NULL,
    other_id      uuid NOT NULL,
    other_claimed boolean NOT NULL,
    at            timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE FUNCTION chaos_dedup_beside() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos_dedup_beside (job_id, kind, dedup_key, other_id, other_claimed)
    SELECT NEW.id, NEW.kind, NEW.dedup_key, j.id, j.attempted_at IS NOT NULL
    FROM venturi_job j
    WHERE j.kind = NEW.kind AND j.dedup_key = NEW.dedup_key AND j.id <> NEW.id
      AND j.state IN ('scheduled', 'available');
    RETURN NULL;
END $$;
CREATE TRIGGER chaos_dedup_beside AFTER INSERT ON venturi_job FOR EACH ROW
    WHEN (NEW.kind IN ('chaos.sqlmerge', 'chaos.sqlreplace') AND NEW.dedup_key IS NOT NULL)
    EXECUTE FUNCTION chaos_dedup_beside();`

// start opens the producer's own pool (direct, not through a worker's proxy).
func (p *sqlProducer) start(ctx context.Context) error {
	dsn, err := withParams(p.d.o.dsn, "search_path", p.d.o.schema, "application_name", "chaos-sqlproducer")
	if err != nil {
		return err
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return err
	}
	cfg.MaxConns = 6
	p.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	return err
}

func (p *sqlProducer) close() {
	if p.pool != nil {
		p.pool.Close()
	}
}

// run calls at the producer's rate until ctx ends: two goroutines per path, each at a
// sixth of the rate.
func (p *sqlProducer) run(ctx context.Context) {
	q := venturi.NewQueue(p.pool, venturi.QueueConfig{})
	var wg sync.WaitGroup
	for _, via := range []string{viaSQL, viaSQL, viaMany, viaMany, viaGo, viaGo} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Duration(6 * float64(time.Second) / p.rate))
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
					p.call(ctx, q, via)
				}
			}
		}()
	}
	wg.Wait()
}

// item scripts one enqueue: a kind (two thirds SQLMerge), a key, a fresh contribution, and
// a delay of 100-1500 ms (a pending job lingers, so enqueues meet it).
func (p *sqlProducer) item(prefix string) (sqlItem, time.Duration, []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	it := sqlItem{contrib: fmt.Sprintf("%s%d", prefix, p.n)}
	var payload []byte
	if p.rng.IntN(3) < 2 {
		it.kind, it.key = SQLMerge{}.Kind(), sqlMergeKeys[p.rng.IntN(len(sqlMergeKeys))]
		payload, _ = json.Marshal(SQLMerge{Key: it.key, Contrib: []string{it.contrib}, WorkMs: p.workMs})
	} else {
		it.kind, it.key = SQLReplace{}.Kind(), sqlReplaceKeys[p.rng.IntN(len(sqlReplaceKeys))]
		payload, _ = json.Marshal(SQLReplace{Key: it.key, Contrib: it.contrib, WorkMs: p.workMs})
	}
	return it, time.Duration(100+p.rng.IntN(1400)) * time.Millisecond, payload
}

// call makes one call on its path and records it. Each call has 5 s, and an answer in
// flight when the producer stops is still waited for.
func (p *sqlProducer) call(ctx context.Context, q *venturi.Queue, via string) {
	c := sqlCall{via: via, at: time.Now()}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var err error
	switch via {
	case viaSQL:
		it, delay, payload := p.item("s")
		var id pgtype.UUID
		err = p.pool.QueryRow(cctx, `SELECT id, action FROM venturi_enqueue(kind => $1, payload => $2::jsonb,
			delay => make_interval(secs => $3), dedup_key => $4)`, it.kind, string(payload), delay.Seconds(), it.key).Scan(&id, &it.action)
		it.id = id.Bytes
		c.items = []sqlItem{it}
	case viaMany:
		p.mu.Lock()
		n := 2 + p.rng.IntN(3)
		p.mu.Unlock()
		type job struct {
			it      sqlItem
			delay   time.Duration
			payload []byte
		}
		var batch []job
		for range n {
			it, delay, payload := p.item("m")
			batch = append(batch, job{it, delay, payload})
		}
		// In the order drawn: a batch takes its keys' locks in one order whatever its
		// order (schema 35), so opposite batches queue instead of deadlocking (I10).
		var jobs []map[string]any
		for _, j := range batch {
			c.items = append(c.items, j.it)
			jobs = append(jobs, map[string]any{"kind": j.it.kind, "payload": json.RawMessage(j.payload),
				"delay": j.delay.Seconds(), "dedup_key": j.it.key})
		}
		b, _ := json.Marshal(jobs)
		var rows pgx.Rows
		rows, err = p.pool.Query(cctx, `SELECT ord, id, action FROM venturi_enqueue_many($1::jsonb)`, string(b))
		if err == nil {
			for rows.Next() {
				var ord int
				var id pgtype.UUID
				var action string
				if err = rows.Scan(&ord, &id, &action); err != nil {
					break
				}
				if ord >= 0 && ord < len(c.items) {
					c.items[ord].id, c.items[ord].action = id.Bytes, action
				}
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
	case viaGo:
		it, delay, _ := p.item("g")
		var task venturi.Task = SQLMerge{Key: it.key, Contrib: []string{it.contrib}, WorkMs: p.workMs}
		if it.kind == (SQLReplace{}).Kind() {
			task = SQLReplace{Key: it.key, Contrib: it.contrib, WorkMs: p.workMs}
		}
		var res venturi.Result
		res, err = q.Enqueue(cctx, task, venturi.After(delay))
		it.id, it.action = res.ID, res.Action.String()
		c.items = []sqlItem{it}
	}
	if err != nil {
		c.err, c.transient = err.Error(), venturi.IsTransient(err)
	} else {
		c.acked = true
	}
	p.mu.Lock()
	p.calls = append(p.calls, c)
	p.mu.Unlock()
}

// sqlJob is a job of the producer's kinds as the database holds it after the run.
type sqlJob struct {
	id       [16]byte
	kind     string
	key      string
	state    string
	contribs []string // SQLMerge: the merged contributions; SQLReplace: the last one
	merges   []string // the merged entries' notes ("merged enqueue <ID>"), in order
}

// sqlProduced is what checkSQLProduced found.
type sqlProduced struct {
	calls, acked, failed        map[string]int // by path
	items, itemsAcked           int
	committed                   int            // contributions of failed calls that are in a job anyway
	actions                     map[string]int // acknowledged items by action
	jobs                        map[string]int // by kind
	merges                      int
	maxContribs                 int // SQLMerge: the most contributions merged into one job
	deferredLeft                int
	beside, besideUnclaimed     int // dedup observations: a job inserted beside a pending one (never claimed: a violation)
	errs                        map[string]int
	nonTransient                int
	replaceOver, replaceMissing int // SQLReplace keys whose jobs and merges exceed or fall short of their enqueues
}

// The SQL producer's invariants.
const (
	invSQLAccounted = "every acknowledged SQL enqueue is accounted for (a job, or merged into one)"
	invSQLOnce      = "no enqueue applied twice (deferred merges included)"
	invSQLDeferred  = "no deferred merge left once the workers are idle"
	invSQLDedup     = "dedup holds across Go and SQL producers (no insert beside a pending job of its key)"
	invSQLErrors    = "every failed enqueue of the SQL producer is a transient error"
)

// besideRow is a row of chaos_dedup_beside.
type besideRow struct {
	job, other   [16]byte
	kind, key    string
	otherClaimed bool
}

// checkSQLProduced holds the jobs of the SQL producer's kinds to its calls:
//
//   - invSQLAccounted: the ID an acknowledged enqueue was answered with (inserted, kept,
//     replaced, merged) is a job of its kind and key; an acknowledged SQLMerge contribution
//     is in exactly one job of its key (a deferred one, wherever the worker merged it), and
//     an inserted or Go-merged one in the job it was answered with; for each SQLReplace
//     key, its jobs and their replace entries (each a committed enqueue) number at least
//     its acknowledged enqueues and at most those and its failed ones; every contribution
//     in a job is one the producer sent;
//   - invSQLOnce: no contribution twice, no merged entry's enqueue twice (its note names
//     the enqueue's ID) nor as a job of its own, and a SQLMerge job holds one contribution
//     more than its merged entries;
//   - invSQLDeferred: venturi_deferred_merge is empty;
//   - invSQLDedup: no job inserted beside a pending job of its key that was never claimed;
//   - invSQLErrors: every failed call is transient.
func checkSQLProduced(calls []sqlCall, jobs []sqlJob, deferredLeft int, beside []besideRow) (st sqlProduced, violations []string) {
	st = sqlProduced{calls: map[string]int{}, acked: map[string]int{}, failed: map[string]int{}, actions: map[string]int{},
		jobs: map[string]int{}, errs: map[string]int{}, deferredLeft: deferredLeft}
	fail := func(inv, format string, a ...any) {
		violations = append(violations, inv+": "+fmt.Sprintf(format, a...))
	}
	type sent struct {
		it    sqlItem
		acked bool
		via   string
	}
	byContrib := map[string]sent{}
	type kk struct{ kind, key string }
	ackedBy, failedBy := map[kk]int{}, map[kk]int{}
	for _, c := range calls {
		st.calls[c.via]++
		if c.acked {
			st.acked[c.via]++
		} else {
			st.failed[c.via]++
			st.errs[c.via+": "+errClass(c.err)]++
			if !c.transient {
				st.nonTransient++
				fail(invSQLErrors, "%s at %s: %s", c.via, c.at.Format("15:04:05.000"), trunc(c.err, 160))
			}
		}
		for _, it := range c.items {
			st.items++
			byContrib[it.contrib] = sent{it: it, acked: c.acked, via: c.via}
			if c.acked {
				st.itemsAcked++
				st.actions[c.via+" "+it.action]++
				ackedBy[kk{it.kind, it.key}]++
			} else {
				failedBy[kk{it.kind, it.key}]++
			}
		}
	}
	jobByID := map[[16]byte]*sqlJob{}
	mergedNote := map[string][16]byte{}
	where := map[string][][16]byte{} // contribution -> the jobs that hold it
	perKey := map[kk]int{}           // SQLReplace: jobs and replace entries
	for i := range jobs {
		j := &jobs[i]
		jobByID[j.id] = j
		st.jobs[j.kind]++
		st.merges += len(j.merges)
		for _, n := range j.merges {
			if other, dup := mergedNote[n]; dup {
				fail(invSQLOnce, "%q is in the journals of jobs %s and %s", n, ulidStr(other), ulidStr(j.id))
			}
			mergedNote[n] = j.id
		}
		for _, c := range j.contribs {
			where[c] = append(where[c], j.id)
			s, ok := byContrib[c]
			switch {
			case !ok:
				fail(invSQLAccounted, "job %s (%s %s) holds contribution %q, which the producer never sent", ulidStr(j.id), j.kind, j.key, c)
			case s.it.kind != j.kind || s.it.key != j.key:
				fail(invSQLAccounted, "job %s (%s %s) holds contribution %q, sent as %s %s", ulidStr(j.id), j.kind, j.key, c, s.it.kind, s.it.key)
			}
		}
		switch j.kind {
		case SQLMerge{}.Kind():
			st.maxContribs = max(st.maxContribs, len(j.contribs))
			if len(j.contribs) != 1+len(j.merges) {
				fail(invSQLOnce, "job %s (%s): %d contributions, %d merged entries (want one more contribution than merges)",
					ulidStr(j.id), j.key, len(j.contribs), len(j.merges))
			}
		case SQLReplace{}.Kind():
			perKey[kk{j.kind, j.key}] += 1 + len(j.merges)
		}
	}
	for n, jid := range mergedNote {
		if id, err := ulid.ParseStrict(strings.TrimPrefix(n, "merged enqueue ")); err == nil && jobByID[id] != nil {
			fail(invSQLOnce, "the enqueue %s was merged into job %s and is a job of its own too", id, ulidStr(jid))
		}
	}
	for c, js := range where {
		if len(js) > 1 {
			var ids []string
			for _, id := range js {
				ids = append(ids, ulidStr(id))
			}
			fail(invSQLOnce, "contribution %q is in %d places: jobs %s", c, len(js), strings.Join(ids, ", "))
		}
		if s, ok := byContrib[c]; ok && !s.acked {
			st.committed++
		}
	}
	cs := make([]string, 0, len(byContrib))
	for c := range byContrib {
		cs = append(cs, c)
	}
	slices.Sort(cs)
	for _, c := range cs {
		s := byContrib[c]
		if !s.acked {
			continue
		}
		it := s.it
		var answered *sqlJob
		if it.action != "deferred" {
			answered = jobByID[it.id]
			if answered == nil || answered.kind != it.kind || answered.key != it.key {
				fail(invSQLAccounted, "%s of %s %s (%q) was answered %s %s, which is not a job of its kind and key",
					s.via, it.kind, it.key, c, it.action, it.id)
				continue
			}
		}
		if it.kind != (SQLMerge{}).Kind() {
			continue
		}
		switch {
		case len(where[c]) == 0:
			fail(invSQLAccounted, "%s of %s %s (%q), answered %s %s, is in no job", s.via, it.kind, it.key, c, it.action, it.id)
		case answered != nil && (it.action == "inserted" || it.action == "merged") && where[c][0] != answered.id:
			fail(invSQLAccounted, "%s of %s %s (%q) was answered %s %s, but is in job %s", s.via, it.kind, it.key, c,
				it.action, it.id, ulidStr(where[c][0]))
		}
	}
	keys := map[kk]bool{}
	for k := range ackedBy {
		keys[k] = true
	}
	for k := range perKey {
		keys[k] = true
	}
	for k := range keys {
		if k.kind != (SQLReplace{}).Kind() {
			continue
		}
		if got := perKey[k]; got < ackedBy[k] {
			st.replaceMissing++
			fail(invSQLAccounted, "%s %s: %d jobs and replace entries, %d acknowledged enqueues", k.kind, k.key, got, ackedBy[k])
		} else if got > ackedBy[k]+failedBy[k] {
			st.replaceOver++
			fail(invSQLOnce, "%s %s: %d jobs and replace entries, only %d enqueues sent (%d acknowledged)", k.kind, k.key, got,
				ackedBy[k]+failedBy[k], ackedBy[k])
		}
	}
	if deferredLeft > 0 {
		fail(invSQLDeferred, "%d enqueues from SQL still wait in venturi_deferred_merge", deferredLeft)
	}
	for _, b := range beside {
		st.beside++
		if !b.otherClaimed {
			st.besideUnclaimed++
			fail(invSQLDedup, "job %s (%s %s) was inserted while job %s of its key was pending and had never been claimed",
				ulidStr(b.job), b.kind, b.key, ulidStr(b.other))
		}
	}
	return st, violations
}

// String is the SQL producer's part of the summary.
func (st sqlProduced) String() string {
	var b strings.Builder
	var paths []string
	for _, v := range []string{viaSQL, viaMany, viaGo} {
		paths = append(paths, fmt.Sprintf("%s %d (failed %d)", v, st.calls[v], st.failed[v]))
	}
	fmt.Fprintf(&b, "SQL producer: calls %s; enqueues %d, acknowledged %d, failed but committed %d\n",
		strings.Join(paths, ", "), st.items, st.itemsAcked, st.committed)
	var acts []string
	for a := range st.actions {
		acts = append(acts, a)
	}
	slices.Sort(acts)
	for i, a := range acts {
		acts[i] = fmt.Sprintf("%s %d", a, st.actions[a])
	}
	fmt.Fprintf(&b, "  answers: %s\n", strings.Join(acts, ", "))
	fmt.Fprintf(&b, "  jobs: %s %d (merged entries %d in all, at most %d contributions in one), %s %d; deferred merges left %d; inserted beside a pending job of the key %d (never claimed: %d)\n",
		SQLMerge{}.Kind(), st.jobs[SQLMerge{}.Kind()], st.merges, st.maxContribs, SQLReplace{}.Kind(), st.jobs[SQLReplace{}.Kind()],
		st.deferredLeft, st.beside, st.besideUnclaimed)
	var classes []string
	for c := range st.errs {
		classes = append(classes, c)
	}
	slices.SortFunc(classes, func(a, b string) int { return st.errs[b] - st.errs[a] })
	for _, c := range classes {
		fmt.Fprintf(&b, "  enqueue error %5d x %s\n", st.errs[c], c)
	}
	return b.String()
}

// resolve reads the producer's jobs after the run, writes their expected state (each
// completed; a SQLMerge job's effect value is its number of contributions), and checks them
// against the calls.
func (p *sqlProducer) resolve(ctx context.Context) (sqlProduced, []string, error) {
	p.mu.Lock()
	calls := slices.Clone(p.calls)
	p.mu.Unlock()
	kinds := []string{SQLMerge{}.Kind(), SQLReplace{}.Kind()}
	full, _, err := loadJobs(ctx, p.d.pool, `kind IN ('chaos.sqlmerge', 'chaos.sqlreplace')`)
	if err != nil {
		return sqlProduced{}, nil, err
	}
	rows, err := p.d.pool.Query(ctx, `SELECT id, kind, COALESCE(dedup_key, ''), state::text, payload FROM venturi_job_all WHERE kind = ANY($1)`, kinds)
	if err != nil {
		return sqlProduced{}, nil, err
	}
	var jobs []sqlJob
	for rows.Next() {
		var id pgtype.UUID
		var j sqlJob
		var payload []byte
		if err := rows.Scan(&id, &j.kind, &j.key, &j.state, &payload); err != nil {
			return sqlProduced{}, nil, err
		}
		j.id = id.Bytes
		if j.kind == (SQLMerge{}).Kind() {
			var m SQLMerge
			if err := json.Unmarshal(payload, &m); err != nil {
				return sqlProduced{}, nil, fmt.Errorf("payload of %s: %w", ulidStr(j.id), err)
			}
			j.contribs = m.Contrib
		} else {
			var r SQLReplace
			if err := json.Unmarshal(payload, &r); err != nil {
				return sqlProduced{}, nil, fmt.Errorf("payload of %s: %w", ulidStr(j.id), err)
			}
			j.contribs = []string{r.Contrib}
		}
		if fj := full[j.id]; fj != nil {
			for _, en := range fj.journal {
				if en.Event == venturi.EventMerged {
					j.merges = append(j.merges, en.Note)
				}
			}
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return sqlProduced{}, nil, err
	}
	var left int
	if err := p.d.pool.QueryRow(ctx, `SELECT count(*) FROM venturi_deferred_merge`).Scan(&left); err != nil {
		return sqlProduced{}, nil, err
	}
	var beside []besideRow
	rows, err = p.d.pool.Query(ctx, `SELECT job_id, other_id, kind, dedup_key, other_claimed FROM chaos_dedup_beside ORDER BY at`)
	if err != nil {
		return sqlProduced{}, nil, err
	}
	for rows.Next() {
		var job, other pgtype.UUID
		var b besideRow
		if err := rows.Scan(&job, &other, &b.kind, &b.key, &b.otherClaimed); err != nil {
			return sqlProduced{}, nil, err
		}
		b.job, b.other = job.Bytes, other.Bytes
		beside = append(beside, b)
	}
	if err := rows.Err(); err != nil {
		return sqlProduced{}, nil, err
	}
	st, violations := checkSQLProduced(calls, jobs, left, beside)
	out := make([][]any, 0, len(jobs))
	for i, j := range jobs {
		sc, value := scSQLReplace, int64(0)
		if j.kind == (SQLMerge{}).Kind() {
			sc, value = scSQLMerge, int64(len(j.contribs))
		}
		out = append(out, []any{pgtype.UUID{Bytes: j.id, Valid: true}, int64(producerSeqBase/2 + i), sc, "completed", value})
	}
	if _, err := p.d.pool.CopyFrom(ctx, pgx.Identifier{"chaos_expect"}, []string{"job_id", "seq", "scenario", "want_state", "want_value"},
		pgx.CopyFromRows(out)); err != nil {
		return sqlProduced{}, nil, err
	}
	return st, violations, nil
}

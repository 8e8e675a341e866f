package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The network between the workers and the database (README.md, "Network faults"): every
// worker slot reaches its server through a blackhole proxy of its own (proxy.go) that
// the half-open fault cuts, and the last pgbWorkers slots reach PostgreSQL through
// PgBouncer in transaction mode (scripts/pgbouncer.sh), which the pgbouncer-restart
// fault restarts. The driver itself, the event reader and the checker connect directly.

// startNetwork starts PgBouncer (when the profile puts workers behind it) and one proxy
// per worker slot.
func (d *driver) startNetwork(ctx context.Context) error {
	o := d.o
	if o.prof.pgbWorkers > 0 {
		sh, err := d.pgbouncerSh()
		if err != nil {
			return err
		}
		d.pgbSh = sh
		cctx, cancel := context.WithTimeout(ctx, 3*time.Minute) // may install the package
		defer cancel()
		cmd := exec.CommandContext(cctx, sh, "start", o.schema)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("pgbouncer.sh start: %w", err)
		}
		d.pgbURL = strings.TrimSpace(string(out))
		d.logf("PgBouncer (transaction pooling) in front of PostgreSQL for worker(s) %v", d.pgbSlots())
	}
	if o.failover != "" {
		return nil // the workers connect through the multi-host URL, to whichever server is primary
	}
	for slot := 1; slot <= o.prof.workers; slot++ {
		target, err := hostPort(o.dsn)
		if d.behindPgBouncer(slot) {
			target, err = hostPort(d.pgbURL)
		}
		if err != nil {
			return err
		}
		b, err := newBlackhole(target)
		if err != nil {
			return err
		}
		d.proxies = append(d.proxies, b)
	}
	return nil
}

// stopNetwork closes the proxies and stops PgBouncer.
func (d *driver) stopNetwork() {
	for _, b := range d.proxies {
		b.close()
	}
	if d.pgbSh != "" {
		cmd := exec.Command(d.pgbSh, "stop")
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			d.logf("pgbouncer.sh stop: %v", err)
		}
	}
}

func (d *driver) pgbouncerSh() (string, error) {
	pgsh := d.o.pgsh
	if pgsh == "" {
		p, err := findPgSh()
		if err != nil {
			return "", err
		}
		pgsh = p
	}
	sh := filepath.Join(filepath.Dir(pgsh), "pgbouncer.sh")
	if _, err := os.Stat(sh); err != nil {
		return "", fmt.Errorf("scripts/pgbouncer.sh not found beside %s: %w", pgsh, err)
	}
	return sh, nil
}

// behindPgBouncer says whether a worker slot reaches PostgreSQL through PgBouncer: the
// profile's last pgbWorkers slots.
func (d *driver) behindPgBouncer(slot int) bool {
	return d.pgbURL != "" && slot > d.o.prof.workers-d.o.prof.pgbWorkers
}

func (d *driver) pgbSlots() []int {
	var s []int
	for slot := 1; slot <= d.o.prof.workers; slot++ {
		if d.behindPgBouncer(slot) {
			s = append(s, slot)
		}
	}
	return s
}

func hostPort(dsn string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("cannot read host:port of the connection URL")
	}
	return u.Host, nil
}

// workerDSN is a worker slot's connection URL: through its proxy, to PostgreSQL or (with
// the statement mode PgBouncer's transaction pooling needs: no named prepared
// statements) to PgBouncer.
func (d *driver) workerDSN(slot int) (string, error) {
	base := d.o.dsn
	kv := []string{"search_path", d.o.schema, "application_name", fmt.Sprintf("chaos-worker-%d", slot)}
	if d.behindPgBouncer(slot) {
		base = d.pgbURL
		kv = append(kv, "default_query_exec_mode", "exec")
	}
	dsn, err := withParams(base, kv...)
	if err != nil {
		return "", err
	}
	if len(d.proxies) >= slot {
		u, _ := url.Parse(dsn)
		u.Host = d.proxies[slot-1].addr()
		dsn = u.String()
	}
	return dsn, nil
}

// halfOpen cuts a worker's network for hold (longer than the lease) without closing
// anything, then heals it. The worker must notice through its own timeouts (it hears
// nothing: no error, no reset), stop its handlers when their leases cannot be extended,
// and complete nothing that another worker rescued meanwhile. Every other cut (the first
// included) is of the sampler caught inside its stats sample's transaction
// (catchSampler): the other workers' rescue of the cut worker's runs must wait neither for
// the heal nor for the sample. The others cut the busiest worker.
func (d *driver) halfOpen(ctx context.Context) {
	d.halfOpens++
	var p *proc
	what := "busiest"
	var release func()
	if d.halfOpens%2 == 1 {
		if p, release = d.catchSampler(ctx); p != nil {
			what = "the sampler, inside its stats sample's transaction"
		}
	}
	if p == nil {
		p = d.pickBusiest(ctx)
	}
	if p == nil || len(d.proxies) < p.slot {
		if release != nil {
			release()
		}
		return
	}
	hold := d.o.lease*5/2 + time.Second
	b := d.proxies[p.slot-1]
	held := b.held.Load()
	at := time.Now()
	b.cutOff()
	if release != nil {
		release() // the sample goes on on the server, and idles there
	}
	d.logf("half-open network: worker %d (pid %d; %s) cut off for %v", p.slot, p.pid, what, hold)
	// Once the cut worker's leases have run out and a rescue tick has passed, say what
	// still holds its runs: each run whose lease expired but is not rescued, and what the
	// worker's backends are doing (a transaction left open on the server holds its rows,
	// which the rescue skips).
	probe := d.o.lease + 1500*time.Millisecond
	sleepCtx(ctx, probe)
	d.probeCut(ctx, p.slot)
	sleepCtx(ctx, hold-probe)
	b.heal()
	until := time.Now()
	detail := fmt.Sprintf("%s; %v, %d transfers held (data, connects, closes)", what, hold, b.held.Load()-held)
	d.record(fault{Kind: "half-open", At: at, Until: until, Worker: p.slot, PID: p.pid, Detail: detail})
	d.logf("half-open network: worker %d healed (%s)", p.slot, detail)
}

// pgbouncerRestart stops PgBouncer at once (every client and server connection closed
// mid-transaction) and starts it again on the same port.
func (d *driver) pgbouncerRestart(ctx context.Context) {
	if d.pgbSh == "" {
		return
	}
	at := time.Now()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, d.pgbSh, "restart").CombinedOutput()
	until := time.Now()
	detail := ""
	if err != nil {
		detail = fmt.Sprintf("pgbouncer.sh restart failed: %v: %s", err, strings.TrimSpace(string(out)))
		d.logf("%s", detail)
	}
	for _, slot := range d.pgbSlots() {
		d.record(fault{Kind: "pgbouncer-restart", At: at, Until: until, Worker: slot, Detail: detail})
	}
	d.logf("PgBouncer restarted in %v", until.Sub(at).Round(time.Millisecond))
}

// catchSampler stops a worker inside its stats sample's transaction: it locks the stats
// state's row, which the sample (venturi/ops_stats.go) locks right after taking the stats
// lock, and waits (up to 12 s: a sample is due every 5 s) for a worker that holds the
// stats lock to queue behind it. It returns that worker and the function that lets the
// sample go on (it releases the row), or nil when none came (the caller cuts the busiest
// worker instead). Meanwhile retention waits too (a prune's stats bookkeeping
// share-locks the row); rescue and promotion must not (they take neither the row nor the
// stats lock).
func (d *driver) catchSampler(ctx context.Context) (*proc, func()) {
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		d.logf("half-open network: cannot catch the sampler: %v", err)
		return nil, nil
	}
	release := func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '2s'; SELECT FROM venturi_stats_state FOR UPDATE`); err != nil {
		release()
		d.logf("half-open network: cannot catch the sampler: %v", err)
		return nil, nil
	}
	deadline := time.Now().Add(12 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var app string
		// The waiter that holds the stats lock (venturi/internal/dbsqlc/queries/stats.sql, TryStatsLock): a bigint
		// advisory key is (classid, objid) = (high, low) 32 bits.
		err := d.pool.QueryRow(ctx, `
			SELECT a.application_name FROM pg_locks w JOIN pg_stat_activity a ON a.pid = w.pid
			WHERE w.locktype = 'transactionid' AND NOT w.granted
			  AND EXISTS (SELECT FROM pg_locks h WHERE h.pid = w.pid AND h.locktype = 'advisory' AND h.granted
			      AND h.objsubid = 1 AND ((h.classid::bigint << 32) | h.objid::bigint)
			          = hashtextextended(current_schema() || '.venturi_stats', 0))
			LIMIT 1`).Scan(&app)
		if err == nil {
			var slot int
			if _, err := fmt.Sscanf(app, "chaos-worker-%d", &slot); err == nil {
				d.mu.Lock()
				for _, p := range d.procs {
					if p != nil && p.slot == slot && !p.stopped {
						d.mu.Unlock()
						return p, release
					}
				}
				d.mu.Unlock()
			}
			d.logf("half-open network: the sampler (%q) is no worker slot that can be cut", app)
			break
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
	release()
	return nil, nil
}

// probeCut logs the runs of worker slot whose lease expired and that nobody rescued yet,
// and what that worker's backends are doing (state, transaction age, last statement).
func (d *driver) probeCut(ctx context.Context, slot int) {
	var expired, locked int
	err := d.pool.QueryRow(ctx, `
		SELECT count(*), count(*) - (SELECT count(*) FROM (
		    SELECT 1 FROM venturi_job x WHERE x.state = 'running' AND x.lease_expires_at < now()
		      AND x.worker_id LIKE $1 FOR UPDATE SKIP LOCKED) s)
		FROM venturi_job WHERE state = 'running' AND lease_expires_at < now() AND worker_id LIKE $1`,
		fmt.Sprintf("chaos-worker-%d-%%", slot)).Scan(&expired, &locked)
	if err != nil {
		d.logf("half-open network: probe of worker %d: %v", slot, err)
		return
	}
	rows, err := d.pool.Query(ctx, `
		SELECT state, COALESCE(round(extract(epoch FROM now() - xact_start)::numeric, 1)::text, '-'),
		       left(regexp_replace(query, '\s+', ' ', 'g'), 70)
		FROM pg_stat_activity WHERE application_name = $1 AND state <> 'idle' ORDER BY xact_start`,
		fmt.Sprintf("chaos-worker-%d", slot))
	var backends []string
	if err == nil {
		for rows.Next() {
			var st, age, q string
			if rows.Scan(&st, &age, &q) == nil {
				backends = append(backends, fmt.Sprintf("%s %ss: %s", st, age, q))
			}
		}
		rows.Close()
	}
	d.logf("half-open network: worker %d after a lease: %d runs expired, not rescued (%d of them locked); %d backends not idle: %s",
		slot, expired, locked, len(backends), strings.Join(backends, " | "))
}

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

// halfOpen cuts the busiest worker's network for hold (longer than the lease) without
// closing anything, then heals it. The worker must notice through its own timeouts (it
// hears nothing: no error, no reset), stop its handlers when their leases cannot be
// extended, and complete nothing that another worker rescued meanwhile.
func (d *driver) halfOpen(ctx context.Context) {
	p := d.pickBusiest(ctx)
	if p == nil || len(d.proxies) < p.slot {
		return
	}
	hold := d.o.lease*5/2 + time.Second
	b := d.proxies[p.slot-1]
	held := b.held.Load()
	at := time.Now()
	b.cutOff()
	d.logf("half-open network: worker %d (pid %d) cut off for %v", p.slot, p.pid, hold)
	sleepCtx(ctx, hold)
	b.heal()
	until := time.Now()
	detail := fmt.Sprintf("%v, %d transfers held (data, connects, closes)", hold, b.held.Load()-held)
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

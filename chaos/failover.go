package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Failover (`chaos -failover sync|async`, README.md "Failover"): a streaming replica of
// the chaos cluster (scripts/pg-replica.sh) on another port; every connection (workers,
// driver, event reader, checker) goes through a multi-host URL that lists the primary,
// then the replica, with target_session_attrs=read-write. Mid-run the primary is killed
// (an immediate stop: a crash) and the replica promoted. With synchronous replication
// nothing acknowledged may be lost; with asynchronous replication what was lost is the
// measured figure (the live producer's acknowledged enqueues, the ledger's acknowledged
// completions), and the checker holds the database to the rest of the invariants.

const failoverQuiet = 20 * time.Second // no other fault from 3s before a failover to this after it

type replication struct {
	sh    string // scripts/pg-replica.sh
	mode  string // sync | async
	port  int    // the replica's
	delay time.Duration
	link  *blackhole // the replication link with latency (proxy.go), when delay > 0

	killed     chan struct{} // closed at the kill: the lag sampler stops
	killedOnce sync.Once

	mu      sync.Mutex
	samples int
	maxLag  int64  // bytes the replica had not flushed, most seen before the kill
	lastLag string // the last sample before the kill
	lost    string // pg-replica.sh lost after the run: commit records past the fork
}

func (d *driver) replicaSh() (string, error) {
	sh := filepath.Join(filepath.Dir(d.o.pgsh), "pg-replica.sh")
	if _, err := os.Stat(sh); err != nil {
		return "", fmt.Errorf("scripts/pg-replica.sh not found beside %s: %w", d.o.pgsh, err)
	}
	return sh, nil
}

// startReplica makes the replica and points every connection of the run at the
// multi-host URL (primary first).
func (d *driver) startReplica(ctx context.Context) error {
	sh, err := d.replicaSh()
	if err != nil {
		return err
	}
	d.repl = &replication{sh: sh, mode: d.o.failover, delay: d.o.replDelay}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, sh, "start", d.o.failover)
	cmd.Stderr = os.Stderr
	if d.o.replDelay > 0 {
		// The replica streams through a link of the driver's with latency.
		target, err := hostPort(d.o.dsn)
		if err != nil {
			return err
		}
		if d.repl.link, err = newDelayLink(target, d.o.replDelay); err != nil {
			return err
		}
		_, port, _ := strings.Cut(d.repl.link.addr(), ":")
		cmd.Env = append(os.Environ(), "VENTURI_REPLICA_UPSTREAM_PORT="+port)
	}
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("pg-replica.sh start %s: %w", d.o.failover, err)
	}
	if d.repl.port, err = strconv.Atoi(strings.TrimSpace(string(out))); err != nil {
		return fmt.Errorf("pg-replica.sh start printed %q, want the replica's port", out)
	}
	dsn, err := multiHost(d.o.dsn, d.repl.port)
	if err != nil {
		return err
	}
	d.o.dsn = dsn
	d.logf("replica (%s replication, link latency %v) on port %d; connecting through %s", d.o.failover, d.o.replDelay, d.repl.port, redact(dsn))
	return nil
}

// multiHost adds a second host (the replica, on the same address) to a postgres:// URL
// and asks for a read-write session: pgx tries the hosts in order and keeps the first
// that accepts writes.
func multiHost(dsn string, port int) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("DATABASE_URL must be a postgres:// URL with a host")
	}
	u.Host = u.Host + "," + u.Hostname() + ":" + strconv.Itoa(port)
	q := u.Query()
	q.Set("target_session_attrs", "read-write")
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// redact hides a URL's password for the log.
func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

func (d *driver) stopReplica() {
	if d.repl == nil {
		return
	}
	cmd := exec.Command(d.repl.sh, "stop")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		d.logf("pg-replica.sh stop: %v", err)
	}
	if d.repl.link != nil {
		d.repl.link.close()
	}
}

// markKilled stops the lag sampler (at the kill, or when the schedule ends without one).
func (rp *replication) markKilled() {
	rp.killedOnce.Do(func() {
		if rp.killed != nil {
			close(rp.killed)
		}
	})
}

// sampleLag records how far the replica's flush is behind the primary's WAL, every 250ms
// until the failover: the async run's exposure.
func (d *driver) sampleLag(ctx context.Context, until <-chan struct{}) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-until:
			return
		case <-t.C:
		}
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		var lag int64
		var s string
		err := d.pool.QueryRow(qctx, `SELECT COALESCE(pg_current_wal_lsn() - flush_lsn, -1)::bigint,
			format('sent %s, flushed %s, replayed %s behind %s (%s)', sent_lsn, flush_lsn, replay_lsn, pg_current_wal_lsn(), sync_state)
			FROM pg_stat_replication WHERE application_name = 'chaos_replica'`).Scan(&lag, &s)
		cancel()
		if err != nil {
			continue
		}
		d.repl.mu.Lock()
		d.repl.samples++
		d.repl.maxLag = max(d.repl.maxLag, lag)
		d.repl.lastLag = s
		d.repl.mu.Unlock()
	}
}

// failover kills the primary (immediate stop) and promotes the replica. The fault's
// window runs from the kill to the promotion's end (the new primary accepts writes).
func (d *driver) failover(ctx context.Context) {
	if d.repl == nil {
		return
	}
	d.repl.markKilled()
	d.repl.mu.Lock()
	lag := d.repl.lastLag
	d.repl.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	at := time.Now()
	d.logf("failover (%s): killing the primary", d.repl.mode)
	if d.repl.link != nil {
		// The primary's host is gone: what is in flight on the replication link is
		// lost with it, as in a crash of the machine (a killed process alone would
		// still have its socket's data delivered).
		d.repl.link.close()
	}
	var errs []string
	if out, err := exec.CommandContext(cctx, d.repl.sh, "kill-primary").CombinedOutput(); err != nil {
		errs = append(errs, fmt.Sprintf("kill-primary: %v: %s", err, strings.TrimSpace(string(out))))
	}
	killed := time.Now()
	if out, err := exec.CommandContext(cctx, d.repl.sh, "promote").CombinedOutput(); err != nil {
		errs = append(errs, fmt.Sprintf("promote: %v: %s", err, strings.TrimSpace(string(out))))
	}
	up := time.Now()
	detail := fmt.Sprintf("primary down in %v, replica promoted %v later; replication before the kill: %s",
		killed.Sub(at).Round(time.Millisecond), up.Sub(killed).Round(time.Millisecond), lag)
	if len(errs) > 0 {
		detail = strings.Join(errs, "; ")
		d.logf("failover failed: %s", detail)
	}
	d.record(fault{Kind: "failover-" + d.repl.mode, At: at, Until: up, Detail: detail})
	d.logf("failover: the replica accepts writes %v after the kill", up.Sub(at).Round(time.Millisecond))
}

// countLost asks pg-replica.sh how many commit records the old primary wrote past the
// fork of the new timeline.
func (d *driver) countLost() {
	if d.repl == nil {
		return
	}
	out, err := exec.Command(d.repl.sh, "lost").CombinedOutput()
	s := strings.TrimSpace(string(out))
	if err != nil {
		s = fmt.Sprintf("unknown (%v: %s)", err, s)
	}
	d.repl.mu.Lock()
	d.repl.lost = s
	d.repl.mu.Unlock()
}

// report adds the failover's lines to the summary.
func (rp *replication) report(r *report) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "failover (%s replication, replication link latency %v one way)\n", rp.mode, rp.delay)
	fmt.Fprintf(&b, "  replica flush behind the primary before the kill: most %d bytes over %d samples (every 250 ms)\n", rp.maxLag, rp.samples)
	fmt.Fprintf(&b, "  commit records in the old primary's WAL past the new timeline's fork (lost, acknowledged or not): %s\n", rp.lost)
	r.extra += b.String()
}

#!/usr/bin/env bash
# pg-replica.sh: a streaming replica of a cluster that scripts/pg.sh started, for the chaos
# suite's failover runs (chaos/README.md, "Failover").
#
#   scripts/pg-replica.sh start sync|async  make the replica afresh (pg_basebackup from the
#                                       running primary into $VENTURI_PGDATA.replica), start it
#                                       on a free loopback port and wait until it streams; sync:
#                                       the primary's synchronous_standby_names names it and
#                                       synchronous_commit is on (every commit waits for the
#                                       replica's flush); async: no synchronous standby.
#                                       Prints the replica's port.
#   scripts/pg-replica.sh kill-primary  stop the primary at once (pg_ctl stop -m immediate: a crash)
#   scripts/pg-replica.sh promote       promote the replica (pg_ctl promote, waiting until it
#                                       accepts writes)
#   scripts/pg-replica.sh lag           the primary's WAL position and what the replica has
#                                       received, flushed and replayed (pg_stat_replication)
#   scripts/pg-replica.sh lost          after a failover: the commit records in the old
#                                       primary's WAL past the point where the replica's new
#                                       timeline forked off (transactions the failover lost)
#   scripts/pg-replica.sh stop          stop the replica, and clear synchronous_standby_names on
#                                       the primary (so that it never waits for a replica gone)
#   scripts/pg-replica.sh url [DB]      the replica's URL
#
# The primary is the cluster in $VENTURI_PGDATA (set by `pg.sh with`). The replica is an
# ordinary pg.sh cluster directory ($VENTURI_PGDATA.replica: the base backup copies the
# password file and the configuration), so `VENTURI_PGDATA=<that> scripts/pg.sh start|url`
# work on it too, and after a promotion it is the database the run ends on. It connects
# to the primary as postgres with the cluster's password and application_name
# chaos_replica, on the primary's port or on VENTURI_REPLICA_UPSTREAM_PORT (a proxy in
# front of the primary: the chaos driver's link with latency). Each start makes it afresh: after a failover, the old primary has
# forked from it (throwaway data, as always with pg.sh clusters).
set -euo pipefail

log() { printf 'pg-replica.sh: %s\n' "$*" >&2; }
die() { printf 'pg-replica.sh: error: %s\n' "$*" >&2; exit 1; }

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
primary=${VENTURI_PGDATA:-}
[ -n "$primary" ] && [ -f "$primary/venturi.port" ] ||
  die "VENTURI_PGDATA must name a cluster of scripts/pg.sh (run under: scripts/pg.sh with -- ...)"
replica=$primary.replica
name=chaos_replica
bindir=${VENTURI_PGBIN:-$(pg_config --bindir 2>/dev/null || true)}
[ -x "$bindir/pg_basebackup" ] || bindir=$(dirname "$(command -v pg_basebackup 2>/dev/null || echo /nonexistent/x)")
[ -x "$bindir/pg_ctl" ] || die "no PostgreSQL server binaries (pg_ctl, pg_basebackup) found; set VENTURI_PGBIN"

owner=$(id -un)
[ "$(id -u)" = 0 ] && owner=postgres
as_owner() {
  if [ "$(id -u)" = 0 ]; then (cd / && runuser -u "$owner" -- "$@"); else "$@"; fi
}

pw() { cat "$primary/venturi.password"; }
pport() { cat "$primary/venturi.port"; }
rport() { cat "$replica/venturi.port"; }
# psql_at PORT SQL: one statement as postgres, unaligned, tuples only.
psql_at() { PGPASSWORD=$(pw) "$bindir/psql" -h 127.0.0.1 -p "$1" -U postgres -d postgres -qtAX -v ON_ERROR_STOP=1 -c "$2"; }
primary_up() { [ -f "$primary/postmaster.pid" ] && as_owner "$bindir/pg_ctl" -D "$primary" status >/dev/null 2>&1; }
replica_up() { [ -f "$replica/postmaster.pid" ] && as_owner "$bindir/pg_ctl" -D "$replica" status >/dev/null 2>&1; }

# set_sync NAMES: the primary's synchronous_standby_names ('' clears it), reloaded.
set_sync() {
  if [ -z "$1" ]; then
    psql_at "$(pport)" "ALTER SYSTEM RESET synchronous_standby_names" >/dev/null
    psql_at "$(pport)" "ALTER SYSTEM RESET synchronous_commit" >/dev/null
  else
    psql_at "$(pport)" "ALTER SYSTEM SET synchronous_standby_names = '$1'" >/dev/null
    psql_at "$(pport)" "ALTER SYSTEM SET synchronous_commit = 'on'" >/dev/null
  fi
  psql_at "$(pport)" "SELECT pg_reload_conf()" >/dev/null
}

# wait_state COLUMN VALUE waits up to 30s for the replica's row of pg_stat_replication to
# show VALUE in COLUMN; got is the last value seen.
wait_state() {
  local i
  got=
  for i in $(seq 300); do
    got=$(psql_at "$(pport)" "SELECT $1 FROM pg_stat_replication WHERE application_name = '$name'" || true)
    [ "$got" = "$2" ] && return 0
    sleep 0.1
  done
  return 1
}

start() {
  local mode=$1
  case "$mode" in sync | async) ;; *) die "usage: pg-replica.sh start sync|async" ;; esac
  primary_up || die "the primary ($primary) is not running"
  if replica_up; then as_owner "$bindir/pg_ctl" -D "$replica" -m immediate -w stop >/dev/null; fi
  # The base backup copies postgresql.auto.conf: clear the synchronous standby first, or the
  # replica, once promoted, would wait for a standby of its own that never comes.
  set_sync ""
  rm -rf "$replica"
  mkdir -p "$replica"
  [ "$(id -u)" = 0 ] && chown "$owner" "$replica"
  chmod 700 "$replica"
  log "pg_basebackup from 127.0.0.1:$(pport) into $replica"
  # -X stream: the WAL written during the backup comes along; no replication slot (the
  # old primary outlives the replica and must not keep WAL for it).
  as_owner env PGPASSWORD="$(pw)" "$bindir/pg_basebackup" -h 127.0.0.1 -p "$(pport)" -U postgres \
    -D "$replica" -X stream -c fast >/dev/null || die "pg_basebackup failed"
  rm -f "$replica/server.log" "$replica/venturi.port"
  as_owner touch "$replica/standby.signal"
  as_owner tee -a "$replica/postgresql.auto.conf" >/dev/null <<CONF
# pg-replica.sh: stream from the primary ($primary)
primary_conninfo = 'host=127.0.0.1 port=${VENTURI_REPLICA_UPSTREAM_PORT:-$(pport)} user=postgres password=$(pw) application_name=$name'
CONF
  # pg.sh starts it like any of its clusters: a free port, venturi.port, server.log.
  VENTURI_PGDATA=$replica "$here/pg.sh" start >/dev/null
  wait_state state streaming || die "the replica does not stream after 30s (state '${got}'); see $replica/server.log"
  if [ "$mode" = sync ]; then
    set_sync "$name"
    wait_state sync_state sync || die "the replica is not a synchronous standby after 30s (sync_state '${got}')"
  fi
  log "replica on 127.0.0.1:$(rport) streams from 127.0.0.1:$(pport) ($mode)"
  rport
}

# lost counts the commit records of the old primary's WAL past the fork of the replica's
# timeline (its history file names the switch point): transactions the old primary
# committed that the new one never received. Run it after a failover, with the old primary
# stopped.
lost() {
  local hist lsn
  hist=$(ls "$replica"/pg_wal/*.history 2>/dev/null | sort | tail -1)
  [ -n "$hist" ] || die "no timeline history in $replica/pg_wal (was it promoted?)"
  lsn=$(awk 'NF >= 2 { l = $2 } END { print l }' "$hist")
  # pg_waldump stops with an error at the end of the valid WAL (the crash): expected.
  as_owner "$bindir/pg_waldump" -p "$primary/pg_wal" -s "$lsn" -t 1 -r Transaction 2>/dev/null |
    grep -c 'COMMIT' || true
}

stop() {
  if replica_up; then
    log "stopping the replica ($replica)"
    as_owner "$bindir/pg_ctl" -D "$replica" -m fast -w stop >/dev/null
  fi
  if primary_up; then
    set_sync ""
  elif [ -f "$primary/postgresql.auto.conf" ] && grep -q '^synchronous_' "$primary/postgresql.auto.conf"; then
    # The primary is down (killed by the failover): drop the settings from the file ALTER
    # SYSTEM writes, so that its next start does not wait for a standby.
    as_owner sed -i '/^synchronous_standby_names/d; /^synchronous_commit/d' "$primary/postgresql.auto.conf"
  fi
}

cmd=${1:-}; shift || true
case "$cmd" in
  start) start "${1:-}" ;;
  kill-primary) as_owner "$bindir/pg_ctl" -D "$primary" -m immediate -w stop >/dev/null ;;
  promote) as_owner "$bindir/pg_ctl" -D "$replica" -w -t 60 promote >/dev/null ;;
  lag)
    psql_at "$(pport)" "SELECT pg_current_wal_lsn(), sent_lsn, flush_lsn, replay_lsn, sync_state
      FROM pg_stat_replication WHERE application_name = '$name'" ;;
  lost) lost ;;
  stop) stop ;;
  url) echo "postgres://postgres:$(pw)@127.0.0.1:$(rport)/${1:-venturi}?sslmode=disable" ;;
  *) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac

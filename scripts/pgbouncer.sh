#!/usr/bin/env bash
# pgbouncer.sh: a throwaway PgBouncer (transaction pooling) in front of a cluster that
# scripts/pg.sh started, for the chaos suite's PgBouncer fault (chaos/README.md) and the
# bench's pgbouncer scenario (bench/README.md).
#
#   scripts/pgbouncer.sh start SCHEMA   start PgBouncer on a free loopback port (reuse it when
#                                       it runs); its database SCHEMA is the cluster's database
#                                       venturi ($VENTURI_PGB_DBNAME) with search_path SCHEMA;
#                                       prints a URL
#   scripts/pgbouncer.sh restart        stop it at once (SIGTERM: every client and server
#                                       connection is closed) and start it on the same port
#   scripts/pgbouncer.sh stop           stop it
#   scripts/pgbouncer.sh url SCHEMA     print the URL of database SCHEMA
#
# The cluster is the one in $VENTURI_PGDATA (set by `pg.sh with`); PgBouncer keeps its
# configuration, log and pid file in $VENTURI_PGDATA.pgbouncer (mode 0700). Clients log in
# as postgres with the cluster's password (scram-sha-256); PgBouncer logs in to PostgreSQL
# with the same password, kept in its auth file (mode 0600).
#
# Optional environment (the chaos suite sets neither):
#   VENTURI_PGB_DBNAME  the cluster's database that database SCHEMA maps to (default venturi)
#   VENTURI_PGB_NAME    a separate instance (directory $VENTURI_PGDATA.pgbouncer-NAME, port
#                       and pid of its own), so that two users of one cluster (the bench and
#                       the chaos suite) neither reconfigure nor stop each other's PgBouncer
# A start that finds its recorded port taken by another program picks a free one.
#
# PgBouncer refuses to run as root: when we are root it runs as postgres, like pg.sh's
# cluster. If the binary is missing on a Debian machine and we are root, the `pgbouncer`
# package is installed; otherwise (or when the install fails) the script fails: nothing
# is skipped, in CI or elsewhere.
set -euo pipefail

log() { printf 'pgbouncer.sh: %s\n' "$*" >&2; }
die() { printf 'pgbouncer.sh: error: %s\n' "$*" >&2; exit 1; }

pgdata=${VENTURI_PGDATA:-}
[ -n "$pgdata" ] && [ -f "$pgdata/venturi.port" ] ||
  die "VENTURI_PGDATA must name a running cluster of scripts/pg.sh (run under: scripts/pg.sh with -- ...)"
dir=$pgdata.pgbouncer
instance=${VENTURI_PGB_NAME:-}
if [ -n "$instance" ]; then
  case "$instance" in *[!A-Za-z0-9_-]*) die "VENTURI_PGB_NAME must be letters, digits, _ or -, got '$instance'" ;; esac
  dir=$pgdata.pgbouncer-$instance
fi
dbname=${VENTURI_PGB_DBNAME:-venturi}
case "$dbname" in *[!A-Za-z0-9_]* | "") die "VENTURI_PGB_DBNAME must be a plain identifier, got '$dbname'" ;; esac

find_bin() {
  local b
  for b in "$(command -v pgbouncer 2>/dev/null || true)" /usr/sbin/pgbouncer /usr/bin/pgbouncer; do
    [ -n "$b" ] && [ -x "$b" ] && { echo "$b"; return; }
  done
  return 1
}

ensure_binary() {
  if bin=$(find_bin); then return; fi
  if [ "$(id -u)" = 0 ] && [ -f /etc/debian_version ] && command -v apt-get >/dev/null; then
    log "no pgbouncer binary found; installing the Debian package 'pgbouncer'"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >&2
    # The package may start its own PgBouncer on 6432; we do not need it.
    if command -v service >/dev/null; then service pgbouncer stop >/dev/null 2>&1 || true; fi
    bin=$(find_bin) || die "installed 'pgbouncer' but still found no binary"
    return
  fi
  die "no pgbouncer binary found. Install PgBouncer (Debian/Ubuntu: sudo apt-get install pgbouncer;
  macOS: brew install pgbouncer)"
}

owner=$(id -un)
[ "$(id -u)" = 0 ] && owner=postgres

as_owner() {
  if [ "$(id -u)" = 0 ]; then (cd / && runuser -u "$owner" -- "$@"); else "$@"; fi
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

pid() { cat "$dir/pgbouncer.pid" 2>/dev/null || true; }

running() { local p; p=$(pid); [ -n "$p" ] && kill -0 "$p" 2>/dev/null; }

url() {
  echo "postgres://postgres:$(cat "$pgdata/venturi.password")@127.0.0.1:$(cat "$dir/port")/$1?sslmode=disable"
}

# configure writes the configuration for database $1 (a schema of the database $dbname,
# venturi unless VENTURI_PGB_DBNAME says otherwise).
configure() {
  local schema=$1 pw pgport
  case "$schema" in *[!A-Za-z0-9_]* | "") die "schema must be a plain identifier, got '$schema'" ;; esac
  pw=$(cat "$pgdata/venturi.password")
  pgport=$(cat "$pgdata/venturi.port")
  mkdir -p "$dir"
  chmod 700 "$dir"
  [ "$(id -u)" = 0 ] && chown "$owner" "$dir"
  # A recorded port that another program took meanwhile (another instance, the chaos
  # suite's or ours, started while this one was stopped) is given up for a free one.
  if [ -f "$dir/port" ] && ! running && ! port_free "$(cat "$dir/port")"; then
    log "port $(cat "$dir/port") is taken; picking another"
    rm -f "$dir/port"
  fi
  if [ ! -f "$dir/port" ]; then
    local p=64329
    while ! port_free "$p"; do p=$((p + 1)); done
    echo "$p" >"$dir/port"
  fi
  (umask 077 && printf '"postgres" "%s"\n' "$pw" >"$dir/users.txt")
  cat >"$dir/pgbouncer.ini" <<INI
; written by scripts/pgbouncer.sh
[databases]
$schema = host=127.0.0.1 port=$pgport dbname=$dbname connect_query='SET search_path TO $schema'

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $(cat "$dir/port")
unix_socket_dir =
auth_type = scram-sha-256
auth_file = $dir/users.txt
pool_mode = transaction
max_client_conn = 500
default_pool_size = 40
; pgx sends these as startup parameters; search_path comes from connect_query instead
ignore_startup_parameters = extra_float_digits,search_path
server_login_retry = 1
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
INI
  [ "$(id -u)" = 0 ] && chown "$owner" "$dir"/*
  return 0
}

start() {
  ensure_binary
  if running; then return; fi
  as_owner "$bin" -d -q "$dir/pgbouncer.ini" || { tail -20 "$dir/pgbouncer.log" >&2 || true; die "pgbouncer did not start"; }
  # Wait until it accepts connections.
  local i
  for i in $(seq 100); do
    port_free "$(cat "$dir/port")" || return 0
    sleep 0.05
  done
  die "pgbouncer does not listen on port $(cat "$dir/port")"
}

stop() {
  local p i
  p=$(pid)
  [ -n "$p" ] || return 0
  kill -TERM "$p" 2>/dev/null || return 0
  for i in $(seq 200); do
    kill -0 "$p" 2>/dev/null || return 0
    sleep 0.05
  done
  kill -KILL "$p" 2>/dev/null || true
}

cmd=${1:-}; shift || true
case "$cmd" in
  start) configure "${1:?usage: pgbouncer.sh start SCHEMA}"; start; url "$1" ;;
  restart) [ -f "$dir/pgbouncer.ini" ] || die "not configured: run start first"; ensure_binary; stop; start ;;
  stop) stop ;;
  url) url "${1:?usage: pgbouncer.sh url SCHEMA}" ;;
  *) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac

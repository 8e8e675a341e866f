#!/usr/bin/env bash
# pg.sh: a throwaway PostgreSQL for development, tests, benchmarks and CI.
#
#   scripts/pg.sh url [DB]      print a connection URL (starting the cluster if needed; says so
#                               on stderr when it does)
#   scripts/pg.sh start         start the cluster (reuse it when already running)
#   scripts/pg.sh stop          stop the cluster started by this script
#   scripts/pg.sh status        say whether it runs
#   scripts/pg.sh restart [fast|immediate]
#   scripts/pg.sh with -- CMD…  start if needed, export DATABASE_URL / TEST_DATABASE_URL,
#                               run CMD, and stop the cluster afterwards if this call started it
#
# When DATABASE_URL (or TEST_DATABASE_URL) is already set, nothing is started and the
# given URL is used. Otherwise the cluster lives in $VENTURI_PGDATA (default: .pgdata in
# the repository, git-ignored) and listens on 127.0.0.1 on a free port from 54329 upwards
# (its own port again when it has one and it is free). A cluster keeps its port while it is
# stopped: each start claims the port in /tmp/venturi-pg-ports (a symbolic link PORT -> data
# directory), and no other cluster of pg.sh takes a port whose claiming directory still
# records it, so a `restart` (the chaos suite's, with clients waiting for that port) finds it
# free. `restart` says so when another program holds the port anyway, and when a start fails
# it prints what the server log said during the attempt, without the clients it turned away.
# It is for throwaway data only, but other users of the machine cannot connect to it: the
# superuser postgres logs in with scram-sha-256 and a random password generated at initdb,
# kept in $VENTURI_PGDATA/venturi.password (mode 0600, in the 0700 data directory), and the
# URLs printed here (url, status, with) carry it. A cluster made by an earlier pg.sh with
# trust authentication is upgraded in place the next time it is started or used: a password
# is set and pg_hba.conf switched to scram-sha-256 (pg.sh says so on stderr).
#
# VENTURI_INITDB_ARGS adds options to initdb when the cluster is made (scripts/pg-waldisk.sh
# puts the WAL on a small filesystem of its own with --waldir).
#
# Server binaries are looked up with pg_config, then /usr/lib/postgresql/*/bin, then PATH.
# If none exist on a Debian machine and we are root, the `postgresql` package is installed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
datadir=${VENTURI_PGDATA:-$here/.pgdata}
dbs=(venturi venturi_test venturi_bench)

log() { printf 'pg.sh: %s\n' "$*" >&2; }
die() { printf 'pg.sh: error: %s\n' "$*" >&2; exit 1; }

find_bindir() {
  local d
  if command -v pg_config >/dev/null 2>&1; then
    d=$(pg_config --bindir 2>/dev/null || true)
    [ -x "$d/initdb" ] && { echo "$d"; return; }
  fi
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k4 -n -r); do
    [ -x "$d/initdb" ] && { echo "$d"; return; }
  done
  d=$(command -v initdb 2>/dev/null || true)
  [ -n "$d" ] && { dirname "$d"; return; }
  return 1
}

ensure_binaries() {
  if bindir=$(find_bindir); then return; fi
  if [ "$(id -u)" = 0 ] && [ -f /etc/debian_version ] && command -v apt-get >/dev/null; then
    log "no PostgreSQL server binaries found; installing the Debian package 'postgresql'"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
    # Debian's package starts its own cluster on 5432; we do not need it.
    if command -v pg_lsclusters >/dev/null; then
      pg_lsclusters -h 2>/dev/null | while read -r ver name _; do pg_ctlcluster "$ver" "$name" stop 2>/dev/null || true; done
    fi
    bindir=$(find_bindir) || die "installed 'postgresql' but still found no initdb"
    return
  fi
  die "no PostgreSQL server binaries (initdb, pg_ctl) found. Install PostgreSQL 15 or newer
  (Debian/Ubuntu: sudo apt-get install postgresql; macOS: brew install postgresql@16),
  or set DATABASE_URL to an existing server."
}

# as_owner runs a command as the cluster's owner: postgres when we are root.
as_owner() {
  if [ "$(id -u)" = 0 ]; then
    # From /: the owner may not be allowed into the current directory (a private checkout).
    (cd / && runuser -u "$owner" -- "$@")
  else
    "$@"
  fi
}

pick_owner() {
  owner=$(id -un)
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --home-dir /nonexistent --shell /usr/sbin/nologin postgres
    owner=postgres
    # postgres must reach the data directory; fall back to /tmp when the checkout is private
    # (a 0700 home, mktemp -d). The fallback is derived from the requested directory, so each
    # cluster of a checkout (.pgdata, .pgdata-chaos) keeps its own directory and its name.
    mkdir -p "$(dirname "$datadir")"
    if ! runuser -u postgres -- test -x "$(dirname "$datadir")"; then
      local sum base
      sum=$(printf '%s' "$datadir" | cksum | cut -d' ' -f1)
      base=$(basename "$datadir" | tr -c 'A-Za-z0-9._\n-' '_')
      datadir=/tmp/venturi-pg-$sum$base
      # A predictable path in /tmp: refuse one that somebody else created.
      if [ -e "$datadir" ] && { [ -L "$datadir" ] || [ "$(stat -c %U "$datadir")" != postgres ]; }; then
        die "$datadir exists and is not a directory of user postgres; remove it or set VENTURI_PGDATA"
      fi
      log "checkout not reachable by user postgres; using $datadir"
    fi
  fi
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

portdir=/tmp/venturi-pg-ports

# port_claimed P: another data directory claimed port P and still records it as its port.
# A claim whose directory is gone, or records another port now, is stale. A directory we
# cannot read (another user's cluster) keeps its claim.
port_claimed() {
  local other rec
  other=$(readlink "$portdir/$1" 2>/dev/null) || return 1
  [ "$other" = "$datadir" ] && return 1
  [ -e "$other" ] || return 1
  rec=$(cat "$other/venturi.port" 2>/dev/null) || return 0
  [ "$rec" = "$1" ]
}

# claim_port P: record that this cluster uses port P (best effort: the claim is advisory).
claim_port() {
  if [ ! -d "$portdir" ]; then
    mkdir -p "$portdir" 2>/dev/null && chmod 1777 "$portdir" 2>/dev/null
  fi
  ln -sfn "$datadir" "$portdir/$1" 2>/dev/null || true
}

# port_holder P: the program listening on port P, as ss(8) shows it; empty when nothing
# listens there (or ss is missing). It does not connect: a listener that never accepts
# would hold a connecting client up for many seconds.
port_holder() {
  command -v ss >/dev/null 2>&1 || return 0
  local l; l=$(ss -Hltnp "sport = :$1" 2>/dev/null | head -n 1)
  [ -n "$l" ] || return 0
  printf '%s\n' "$l" | grep -o 'users:(.*)' || echo "a listener"
}

# server_said OFFSET: the server log from byte OFFSET on, without the messages about the
# clients the server turned away or lost while it was down or starting (hundreds of them
# when clients are waiting), at most its last 20 lines.
server_said() {
  tail -c +"$(($1 + 1))" "$datadir/server.log" 2>/dev/null \
    | grep -Ev 'the database system is (in recovery mode|not yet accepting connections|starting up|shutting down)|Consistent recovery state has not been yet reached|in cancel request did not match any process|terminating connection because of crash of another server process|connection to client lost|could not (receive|send) data (from|to) client|unexpected EOF on client connection' \
    | tail -n 20
}

running() { [ -f "$datadir/postmaster.pid" ] && as_owner "$bindir/pg_ctl" -D "$datadir" status >/dev/null 2>&1; }

port() { cat "$datadir/venturi.port"; }

pwfile() { echo "$datadir/venturi.password"; }

# new_password prints 32 random URL-safe characters (no escaping needed inside a URL).
new_password() { head -c 24 /dev/urandom | base64 | tr '+/' '-_'; }

# save_password writes the password file: mode 0600, owned by the cluster's owner, inside
# the 0700 data directory. Whoever runs pg.sh reads it: the owner, or root.
save_password() {
  local tmp="$datadir/venturi.password.tmp"
  (umask 077 && printf '%s\n' "$1" >"$tmp")
  [ "$(id -u)" = 0 ] && chown "$owner" "$tmp"
  mv -f "$tmp" "$(pwfile)"
}

password() { cat "$(pwfile)"; }

# hba_scram makes every connection authenticate with scram-sha-256.
hba_scram() {
  as_owner tee "$datadir/pg_hba.conf" >/dev/null <<'HBA'
# venturi pg.sh: every connection authenticates with scram-sha-256; the superuser's password
# is in venturi.password beside this file. TYPE DATABASE USER ADDRESS METHOD
local   all         all                 scram-sha-256
host    all         all   127.0.0.1/32  scram-sha-256
host    all         all   ::1/128       scram-sha-256
local   replication all                 scram-sha-256
host    replication all   127.0.0.1/32  scram-sha-256
host    replication all   ::1/128       scram-sha-256
HBA
}

# ensure_auth runs on a running cluster. A cluster initialised by an earlier pg.sh trusts
# every local connection and has no password file: set a password (trust still lets us in),
# save it, switch pg_hba.conf to scram-sha-256 and reload.
ensure_auth() {
  [ -f "$(pwfile)" ] && return 0
  if ! as_owner grep -Eq '^[^#]*[[:space:]]trust([[:space:]]|$)' "$datadir/pg_hba.conf"; then
    die "$datadir has no venturi.password and does not trust local connections, so pg.sh cannot log in.
  It holds throwaway data: stop it (scripts/pg.sh stop) and remove the directory to start afresh."
  fi
  log "upgrading $datadir (made by an earlier pg.sh) from trust to scram-sha-256 authentication; password in $(pwfile)"
  local pw; pw=$(new_password)
  "$bindir/psql" -h 127.0.0.1 -p "$(port)" -U postgres -d postgres -qX -v ON_ERROR_STOP=1 >/dev/null <<SQL
SET password_encryption = 'scram-sha-256';
ALTER ROLE postgres PASSWORD '$pw';
SQL
  save_password "$pw"
  hba_scram
  as_owner "$bindir/pg_ctl" -D "$datadir" reload >/dev/null
}

start() {
  ensure_binaries; pick_owner
  if running; then ensure_auth; return 0; fi
  if [ ! -f "$datadir/PG_VERSION" ]; then
    mkdir -p "$datadir"
    [ "$(id -u)" = 0 ] && chown "$owner" "$datadir"
    chmod 700 "$datadir"
    log "initdb in $datadir"
    # initdb wants an empty directory: hand it the password in a private temporary file.
    local pw tmp; pw=$(new_password); tmp=$(mktemp -d)
    (umask 077 && printf '%s\n' "$pw" >"$tmp/pw")
    [ "$(id -u)" = 0 ] && chown -R "$owner" "$tmp"
    # shellcheck disable=SC2086 # VENTURI_INITDB_ARGS: words, e.g. --waldir=DIR --wal-segsize=1
    as_owner "$bindir/initdb" -D "$datadir" -U postgres --pwfile="$tmp/pw" -A scram-sha-256 -E UTF8 --locale=C ${VENTURI_INITDB_ARGS:-} >/dev/null \
      || { rm -rf "$tmp"; die "initdb failed"; }
    rm -rf "$tmp"
    save_password "$pw"
    hba_scram
    as_owner tee -a "$datadir/postgresql.conf" >/dev/null <<CONF
# venturi development settings (durability stays on: fsync and synchronous_commit are defaults)
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
password_encryption = 'scram-sha-256'
max_connections = 300
shared_buffers = 256MB
max_wal_size = 2GB
# A job queue's table churns: look for tables to vacuum every 10s instead of every minute
# (bench/results/2026-11-30-sustained-naptime10s/sustained-naptime10s.md: most dead tuples 2.4M -> 380k, p99 due->handler 465 -> 125 ms
# at 10,000 jobs/s).
autovacuum_naptime = 10s
log_min_messages = warning
log_min_error_statement = panic
CONF
  fi
  local p
  p=$(cat "$datadir/venturi.port" 2>/dev/null || true)
  if [ -z "$p" ] || ! port_free "$p" || port_claimed "$p"; then
    p=54329
    while ! port_free "$p" || port_claimed "$p"; do p=$((p + 1)); done
  fi
  echo "$p" | as_owner tee "$datadir/venturi.port" >/dev/null
  claim_port "$p"
  log "starting PostgreSQL on 127.0.0.1:$p ($datadir)"
  as_owner "$bindir/pg_ctl" -D "$datadir" -l "$datadir/server.log" -o "-p $p" -w -t 60 start >/dev/null \
    || { cat "$datadir/server.log" >&2; die "PostgreSQL did not start"; }
  ensure_auth
  local pw; pw=$(password)
  for db in "${dbs[@]}"; do
    PGPASSWORD=$pw "$bindir/psql" -h 127.0.0.1 -p "$p" -U postgres -d postgres -qtAc \
      "SELECT 1 FROM pg_database WHERE datname = '$db'" | grep -q 1 \
      || PGPASSWORD=$pw "$bindir/createdb" -h 127.0.0.1 -p "$p" -U postgres "$db"
  done
}

stop() {
  ensure_binaries; pick_owner
  if running; then
    log "stopping PostgreSQL ($datadir)"
    as_owner "$bindir/pg_ctl" -D "$datadir" -m fast -w stop >/dev/null
  fi
}

# url prints a URL of database $1 with the superuser's password (none for a cluster that an
# earlier pg.sh made with trust authentication and that has not been upgraded yet).
url() {
  local auth=postgres
  [ -f "$(pwfile)" ] && auth="postgres:$(password)"
  echo "postgres://$auth@127.0.0.1:$(port)/${1:-venturi}?sslmode=disable"
}

cmd=${1:-}; shift || true
case "$cmd" in
  url)
    if [ -n "${DATABASE_URL:-}" ]; then echo "$DATABASE_URL"; exit 0; fi
    ensure_binaries; pick_owner
    if ! running; then
      start
      log "started PostgreSQL for this URL; it keeps running until scripts/pg.sh stop (make db/stop)"
    fi
    ensure_auth
    url "${1:-venturi}" ;;
  start) start; url ;;
  stop) stop ;;
  status) ensure_binaries; pick_owner; if running; then echo "running: $(url)"; else echo stopped; exit 1; fi ;;
  restart)
    ensure_binaries; pick_owner
    if running; then
      as_owner "$bindir/pg_ctl" -D "$datadir" -m "${1:-fast}" -w stop >/dev/null || true
      # The old postmaster must be gone: a new one would find its lock file and exit.
      if running; then
        die "the old postmaster (PID $(head -n 1 "$datadir/postmaster.pid")) is still running after pg_ctl stop; not starting another"
      fi
    fi
    p=$(port)
    # Same port: the clients have the URL. Someone else may hold it now.
    holder=$(port_holder "$p")
    [ -z "$holder" ] || log "port $p is taken by another program: $holder"
    claim_port "$p"
    # A start that fails says why: the server log from the attempt on (the caller, chaos's
    # full-disk mode for one, prints it; the cluster may be removed before anyone reads it).
    off=$(stat -c %s "$datadir/server.log" 2>/dev/null || echo 0)
    as_owner "$bindir/pg_ctl" -D "$datadir" -l "$datadir/server.log" -o "-p $p" -w -t 60 start >/dev/null \
      || { server_said "$off" >&2; exit 1; } ;;
  with)
    [ "${1:-}" = "--" ] && shift
    if [ -n "${DATABASE_URL:-}" ] || [ -n "${TEST_DATABASE_URL:-}" ]; then
      export DATABASE_URL=${DATABASE_URL:-$TEST_DATABASE_URL}
      export TEST_DATABASE_URL=${TEST_DATABASE_URL:-$DATABASE_URL}
      exec "$@"
    fi
    ensure_binaries; pick_owner
    started=0
    if running; then ensure_auth; else start; started=1; fi
    export DATABASE_URL; DATABASE_URL=$(url venturi)
    export TEST_DATABASE_URL; TEST_DATABASE_URL=$(url venturi_test)
    export VENTURI_PGDATA=$datadir VENTURI_PGBIN=$bindir
    rc=0; "$@" || rc=$?
    [ "$started" = 1 ] && stop
    exit "$rc" ;;
  *) sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac

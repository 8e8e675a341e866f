#!/usr/bin/env bash
# pg-waldisk.sh: a throwaway pg.sh cluster whose WAL lives on a small filesystem of its own,
# for the chaos suite's full-disk run (chaos/README.md, "Full disk").
#
#   scripts/pg-waldisk.sh with SIZE_MB -- CMD…
#
# mounts a tmpfs of SIZE_MB MiB, makes a new cluster in $VENTURI_PGDATA (removing what was
# there: the directory's name must contain "waldisk") with its WAL on that tmpfs (initdb
# --waldir, 1 MiB segments, max_wal_size 24MB, no segment recycling, so that WAL needs new
# space every megabyte), runs CMD under `pg.sh with` with VENTURI_WALDISK set to the mount
# point (CMD fills it with a file of its own to make the disk full), then stops the
# cluster, removes it and unmounts the tmpfs, whatever CMD did.
#
# The server log ($VENTURI_PGDATA/server.log) would go with the cluster: when CMD fails it
# is kept as /tmp/venturi-waldisk-server.TIME.log (the script says so), and when
# VENTURI_WALDISK_SERVERLOG names a file it is copied there whatever CMD did.
#
# Mounting needs root (or CAP_SYS_ADMIN). When it is impossible the script fails with the
# reason: it never skips, in CI or elsewhere.
set -euo pipefail

log() { printf 'pg-waldisk.sh: %s\n' "$*" >&2; }
die() { printf 'pg-waldisk.sh: error: %s\n' "$*" >&2; exit 1; }

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ "${1:-}" = with ] || { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
size=${2:-}
case "$size" in '' | *[!0-9]*) die "usage: pg-waldisk.sh with SIZE_MB -- CMD…" ;; esac
shift 2
[ "${1:-}" = "--" ] && shift
[ $# -gt 0 ] || die "usage: pg-waldisk.sh with SIZE_MB -- CMD…"
datadir=${VENTURI_PGDATA:-}
case "$(basename "$datadir")" in
  *waldisk*) ;;
  *) die "VENTURI_PGDATA must name a throwaway cluster directory whose name contains 'waldisk' (it is removed), got '$datadir'" ;;
esac
[ "$(id -u)" = 0 ] || die "mounting the WAL's tmpfs needs root (or CAP_SYS_ADMIN); run as root, as CI does"
unset DATABASE_URL TEST_DATABASE_URL

owner=postgres
id "$owner" >/dev/null 2>&1 || useradd --system --home-dir /nonexistent --shell /usr/sbin/nologin "$owner"

# The mount point is in /tmp, which user postgres can always reach (a checkout may not be).
mnt=$(mktemp -d /tmp/venturi-waldisk.XXXXXX)
cleanup() {
  local rc=$?
  VENTURI_PGDATA=$datadir "$here/pg.sh" stop 2>/dev/null || true
  if [ -f "$datadir/postmaster.pid" ]; then
    # Still running (stuck on the full disk): stop it at once.
    runuser -u "$owner" -- "${VENTURI_PGBIN:-$(pg_config --bindir)}/pg_ctl" -D "$datadir" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  if [ -f "$datadir/server.log" ]; then
    if [ -n "${VENTURI_WALDISK_SERVERLOG:-}" ]; then cp "$datadir/server.log" "$VENTURI_WALDISK_SERVERLOG" || true; fi
    if [ "$rc" != 0 ]; then
      local keep; keep=/tmp/venturi-waldisk-server.$(date -u +%Y%m%dT%H%M%SZ).log
      cp "$datadir/server.log" "$keep" && log "the run failed; PostgreSQL's server log is kept in $keep"
    fi
  fi
  rm -rf "$datadir"
  if mountpoint -q "$mnt"; then umount "$mnt" || log "could not unmount $mnt"; fi
  rmdir "$mnt" 2>/dev/null || true
  exit "$rc"
}
trap cleanup EXIT

mount -t tmpfs -o "size=${size}m,mode=0700,uid=$(id -u "$owner"),gid=$(id -g "$owner")" venturi-waldisk "$mnt" ||
  die "could not mount a tmpfs of ${size} MiB at $mnt (mount -t tmpfs failed; a container needs CAP_SYS_ADMIN)"
log "WAL on a ${size} MiB tmpfs at $mnt"

if [ -f "$datadir/postmaster.pid" ]; then
  runuser -u "$owner" -- "${VENTURI_PGBIN:-$(pg_config --bindir)}/pg_ctl" -D "$datadir" -m immediate -w stop >/dev/null 2>&1 || true
fi
rm -rf "$datadir"
export VENTURI_PGDATA=$datadir
VENTURI_INITDB_ARGS="--waldir=$mnt/wal --wal-segsize=1" "$here/pg.sh" start >/dev/null
pw=$(cat "$datadir/venturi.password")
port=$(cat "$datadir/venturi.port")
# Checkpoints every 24 MiB of WAL, and no recycled segments kept ahead: once the disk is
# full, the next megabyte of WAL fails to find room.
for s in "max_wal_size = '24MB'" "min_wal_size = '4MB'" "wal_recycle = off"; do
  PGPASSWORD=$pw psql -h 127.0.0.1 -p "$port" -U postgres -d postgres -qtAX -v ON_ERROR_STOP=1 -c "ALTER SYSTEM SET $s" >/dev/null
done
PGPASSWORD=$pw psql -h 127.0.0.1 -p "$port" -U postgres -d postgres -qtAX -c "SELECT pg_reload_conf()" >/dev/null
export VENTURI_WALDISK=$mnt
rc=0
"$here/pg.sh" with -- "$@" || rc=$?
exit "$rc"

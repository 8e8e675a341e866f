#!/usr/bin/env bash
# check-private-clone.sh: run CI (.ci/run) on a fresh clone in a private directory.
#
# A template is cloned into homes and temporary directories that user postgres cannot
# enter (mktemp -d is 0700). scripts/pg.sh then keeps its clusters under /tmp; this check
# proves that `make test` still passes there, chaos cluster included. It takes as long as
# CI (a few minutes). Usage: scripts/check-private-clone.sh [REVISION] (default HEAD).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
rev=${1:-HEAD}
dir=$(mktemp -d) # 0700
chmod 700 "$dir"
cleanup() {
  # The clusters were started (and stopped) by .ci/run; remove their /tmp fallbacks.
  for d in "$dir/repo/.pgdata" "$dir/repo/.pgdata-chaos"; do
    sum=$(printf '%s' "$d" | cksum | cut -d' ' -f1)
    rm -rf "/tmp/venturi-pg-$sum$(basename "$d")"
  done
  rm -rf "$dir"
}
trap cleanup EXIT
git clone -q "$here" "$dir/repo"
git -C "$dir/repo" checkout -q "$rev"
echo "check-private-clone: running .ci/run in $dir/repo (mode $(stat -c %a "$dir"))"
(cd "$dir/repo" && CI=true bash .ci/run)
echo "check-private-clone: PASS"

#!/usr/bin/env bash
# audit.sh GOVULNCHECK VULNDB_VERSION MODULE…: govulncheck each module on its own (GOWORK=off,
# as it ships) against the Go vulnerability database: its packages, or for a module without
# any (tools/) the tools its `tool` directives pin. `make audit` runs it.
#
# The database comes from the module proxy, not from vuln.go.dev: the golang.org/x/vulndb
# module holds every report as an OSV file in data/osv/<ID>.json, and govulncheck reads a
# directory of such files when given -db file://DIR (it builds the index in memory). So the
# audit needs only what the rest of the build needs: the module proxy, or the module cache.
# VULNDB_VERSION is `latest` (the newest reports), or a version to repeat an earlier audit.
# With `latest` and no proxy, the newest vulndb already in the module cache is used (said on
# stderr).
#
# govulncheck fails (exit 3) only for vulnerabilities whose code the module can reach; it
# mentions the others (in modules or packages imported but not called) in its summary. A
# reachable one that has been looked at and does not apply (say, an advisory with no fixed
# version whose vulnerable feature the module does not use) is listed with its reason in
# scripts/audit-accepted.txt: it is still printed, but does not fail the audit.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 3 ] || { echo "usage: $0 GOVULNCHECK VULNDB_VERSION MODULE…" >&2; exit 2; }
govulncheck=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") version=$2
shift 2
[ -x "$govulncheck" ] || { echo "audit: $govulncheck is not an executable (make audit builds it)" >&2; exit 2; }
# The toolchain the go.mod files pin is the standard library audited (see the Makefile).
export GOTOOLCHAIN=${GOTOOLCHAIN:-auto}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
field() { sed -n "s/^[[:space:]]*\"$1\": \"\\(.*\\)\",\\{0,1\\}\$/\\1/p"; }
# Outside any module: `go mod download` of a query needs no go.mod.
if json=$(cd "$tmp" && GOWORK=off go mod download -json "golang.org/x/vulndb@$version" 2>&1); then
  dir=$(echo "$json" | field Dir)
  resolved=$(echo "$json" | field Version)
else
  cached=$(ls -d "$(go env GOMODCACHE)"/golang.org/x/vulndb@v* 2>/dev/null | sort | tail -n 1 || true)
  if [ "$version" != latest ] || [ -z "$cached" ]; then
    echo "audit: cannot download golang.org/x/vulndb@$version from the module proxy:" >&2
    echo "$json" | field Error >&2
    exit 1
  fi
  dir=$cached
  resolved=${cached##*@}
  echo "audit: cannot download golang.org/x/vulndb@latest ($(echo "$json" | field Error)); using the newest one in the module cache, $resolved" >&2
fi
[ -d "$dir/data/osv" ] || { echo "audit: $dir/data/osv is missing: not a vulndb checkout?" >&2; exit 1; }
# A pseudo-version v0.0.0-YYYYMMDDhhmmss-commit carries the date of its last report.
stamp=$(echo "$resolved" | sed -n 's/^v0\.0\.0-\([0-9]\{4\}\)\([0-9]\{2\}\)\([0-9]\{2\}\).*/\1-\2-\3/p')
echo "audit: govulncheck $("$govulncheck" -version 2>/dev/null | sed -n 's/^Scanner: govulncheck@//p'), $(go env GOVERSION), golang.org/x/vulndb $resolved${stamp:+ (reports up to $stamp)}: $(ls "$dir/data/osv" | wc -l) entries"

accepted_file=$here/scripts/audit-accepted.txt
# accepted MODULE prints the IDs accepted for MODULE, one a line.
accepted() { [ -f "$accepted_file" ] && awk -v m="$1" '$1 == m { print $2 }' "$accepted_file" | sort -u; }

# check MODULE runs govulncheck in MODULE, its output into $tmp/N.out and its exit status
# into $tmp/N.rc (N: the module's place in the arguments). Exit status 3: vulnerable code
# is reachable. A module with no packages of its own (tools/) is audited for its tool
# directives.
check() {
  local m=$1 n=$2 rc=0 pattern=./...
  [ -n "$(cd "$here/$m" && GOWORK=off go list ./... 2>/dev/null)" ] || pattern=tool
  (cd "$here/$m" && GOWORK=off "$govulncheck" -db "file://$dir/data/osv" "$pattern") >"$tmp/$n.out" 2>&1 || rc=$?
  echo "$rc" >"$tmp/$n.rc"
}
# AUDIT_JOBS modules at once (default: the number of CPUs); the reports are printed in the
# order of the arguments, each in one piece.
njobs=${AUDIT_JOBS:-$(nproc 2>/dev/null || echo 2)}
n=0
for m in "$@"; do
  n=$((n + 1))
  while [ "$(jobs -rp | wc -l)" -ge "$njobs" ]; do wait -n || true; done
  check "$m" "$n" &
done
wait

vulnerable=() broken=()
n=0
for m in "$@"; do
  n=$((n + 1))
  echo "audit: $m"
  rc=$(cat "$tmp/$n.rc" 2>/dev/null || echo 2)
  cp "$tmp/$n.out" "$tmp/out" 2>/dev/null || : >"$tmp/out"
  # The output is printed below, in full unless every finding is accepted.
  found=$(sed -n 's/^Vulnerability #[0-9]*: \(GO-[0-9]*-[0-9]*\).*/\1/p' "$tmp/out" | sort -u)
  for id in $(comm -13 <(echo "$found") <(accepted "$m")); do
    echo "audit: note: $id is accepted for $m in scripts/audit-accepted.txt but no longer reported: remove the line"
  done
  case $rc in
    0) cat "$tmp/out" ;;
    3)
      unaccepted=$(comm -23 <(echo "$found") <(accepted "$m"))
      if [ -z "$found" ] || [ -n "$unaccepted" ]; then
        cat "$tmp/out"
        vulnerable+=("$m${unaccepted:+ (}$(echo $unaccepted | tr ' ' ',')${unaccepted:+)}")
      else
        # Without the call traces (there, every use of the module).
        grep -v '^ *#[0-9]*: ' "$tmp/out" | grep -v '^ *Example traces found:$' || true
        echo "audit: $m: every reachable vulnerability ($(echo $found)) is accepted in scripts/audit-accepted.txt"
      fi ;;
    *) cat "$tmp/out"; broken+=("$m") ;;
  esac
done
if [ ${#vulnerable[@]} -gt 0 ] || [ ${#broken[@]} -gt 0 ]; then
  [ ${#vulnerable[@]} -eq 0 ] || echo "audit: FAIL: vulnerable code reachable in: ${vulnerable[*]} (bump the module or the toolchain; see above)" >&2
  [ ${#broken[@]} -eq 0 ] || echo "audit: FAIL: govulncheck could not check: ${broken[*]} (see above)" >&2
  exit 1
fi
echo "audit: PASS ($*: no reachable vulnerability but those accepted in scripts/audit-accepted.txt)"

#!/usr/bin/env bash
# check-rename.sh: scripts/rename.sh works on a fresh clone: every reference to the old
# module root is gone, gofmt is clean, every module vets (GOWORK=off: every package and
# test type-checked, every imported package compiled; rename.sh's own `make build` is
# skipped, since this covers it but for linking the commands).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
git clone -q "$here" "$dir/repo"
# The working tree's scripts, so that an uncommitted change to them is what is checked.
cp "$here/scripts/rename.sh" "$dir/repo/scripts/rename.sh"
cd "$dir/repo"
old=$(sed -n 's#^module \(.*\)/venturi$#\1#p' venturi/go.mod)
FORCE=1 RENAME_NO_BUILD=1 scripts/rename.sh example.com/renamecheck >/dev/null
if left=$(git ls-files | grep -v -E '(^|/)go\.sum$' | xargs grep -l -I -F "$old"); then
  echo "check-rename: FAIL: still refers to $old: $left" >&2; exit 1
fi
for m in $(git ls-files '*go.mod' | xargs -n1 dirname); do
  # tools/ holds only a tool directive: nothing to vet.
  (cd "$m" && { [ -z "$(GOWORK=off go list ./... 2>/dev/null)" ] || GOWORK=off go vet ./...; }) \
    || { echo "check-rename: FAIL: go vet in $m" >&2; exit 1; }
done
grep -q '^module example.com/renamecheck/venturi$' venturi/go.mod || { echo "check-rename: FAIL: venturi/go.mod" >&2; exit 1; }
echo "check-rename: PASS (example.com/renamecheck: no old references, gofmt clean, every module builds and vets)"

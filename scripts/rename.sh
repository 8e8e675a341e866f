#!/usr/bin/env bash
# rename.sh: make this template yours. Rewrites the module root (the path of venturi/go.mod
# without its last element; github.com/venturi-dev in the original) to NEW_ROOT in every go.mod, Go import, go.work and document, re-sorts the imports (gofmt:
# the new path sorts elsewhere), and builds every module to check the result.
#
#   scripts/rename.sh github.com/acme          # modules become github.com/acme/venturi, …
#
# Run it on a clean checkout (it refuses uncommitted changes unless FORCE=1) and review the
# diff; then commit. Binary and generated-lockfile contents (go.sum) need no change: they
# list only third-party modules.
set -euo pipefail
new=${1:?usage: scripts/rename.sh NEW_MODULE_ROOT (e.g. github.com/acme)}
cd "$(dirname "$0")/.."
old=$(sed -n 's#^module \(.*\)/venturi$#\1#p' venturi/go.mod)
[ -n "$old" ] || { echo "rename: cannot read the module root from venturi/go.mod" >&2; exit 2; }
[ "$old" != "$new" ] || { echo "rename: the module root is already $new"; exit 0; }
case $new in
  */ | /* | *' '* | *'#'*) echo "rename: bad module root '$new'" >&2; exit 2 ;;
esac
if [ -z "${FORCE:-}" ] && [ -n "$(git status --porcelain 2>/dev/null)" ]; then
  echo "rename: the checkout has uncommitted changes; commit them first (or FORCE=1)" >&2
  exit 2
fi
files=$(git ls-files | grep -v -E '(^|/)go\.sum$' | xargs grep -l -I -F "$old" || true)
[ -n "$files" ] || { echo "rename: nothing refers to $old"; exit 0; }
n=$(printf '%s\n' "$files" | wc -l)
printf '%s\n' "$files" | xargs sed -i "s#$old#$new#g"
echo "rename: $old -> $new in $n files"
for m in $(git ls-files '*go.mod' | xargs -n1 dirname); do
  gofmt -w "$m"
done
echo "rename: imports re-sorted (gofmt)"
if ! unformatted=$(gofmt -l $(git ls-files '*.go')) || [ -n "$unformatted" ]; then
  echo "rename: gofmt still reports: $unformatted" >&2; exit 1
fi
# scripts/check-rename.sh vets every module after this (which compiles every package but
# the commands): it sets RENAME_NO_BUILD=1 rather than build them twice.
if [ -z "${RENAME_NO_BUILD:-}" ]; then
  make --no-print-directory build
  echo "rename: every module builds. Review with git diff, then commit."
fi

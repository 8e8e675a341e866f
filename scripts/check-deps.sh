#!/usr/bin/env bash
# check-deps.sh MODULE…: each module, built on its own (GOWORK=off, as the Dockerfiles and
# `make build` build it), selects the same version of every third-party module it compiles
# as the go.work workspace does, and pins the workspace's toolchain.
#
# Why: a module's own go.mod can require an older version of a shared dependency than the
# workspace selects (another workspace module requires a newer one). Then what an editor,
# `go build` at the root or a workspace test compiles is not what ships: bookmarks-api alone
# once selected golang.org/x/net v0.56.0 while the workspace selected v0.62.0.
#
# Compared: the modules that provide a package to the module's build or tests
# (`go list -deps -test ./...`), standalone against workspace. `go list -m all` lists more
# (modules that only appear in dependencies' go.mod files, such as a dependency's test-only
# requirements) and those cannot be pinned: `go mod tidy` drops requirements that provide no
# package. Modules inside the repository (replace => ../x) are skipped.
#
# Fix a reported drift with: cd MODULE && GOWORK=off go get PATH@VERSION && GOWORK=off go mod tidy
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
[ $# -gt 0 ] || { echo "usage: $0 MODULE…" >&2; exit 2; }
# As in the Makefile: the pinned toolchain, unless GOTOOLCHAIN says otherwise.
export GOTOOLCHAIN=${GOTOOLCHAIN:-auto}

want=$(sed -n 's/^toolchain //p' "$here/go.work")
[ -n "$want" ] || { echo "check-deps: FAIL: go.work has no toolchain line" >&2; exit 1; }

# deps prints "path version" for each third-party module providing a package to the build
# or the tests of the packages in the current directory's module.
deps() {
  go list -deps -test -f '{{with .Module}}{{if and (not .Main) (not .Replace)}}{{.Path}} {{.Version}}{{end}}{{end}}' ./... | sort -u
}

fail=0
# The go command must run the pinned toolchain (or a newer one), or tests do not cover it.
run=$(cd "$here" && go env GOVERSION)
if [ "$(printf '%s\n%s\n' "${want#go}" "${run#go}" | sort -V | head -n 1)" != "${want#go}" ]; then
  echo "check-deps: go runs $run, older than the pinned $want (GOTOOLCHAIN=$GOTOOLCHAIN; unset it or set it to auto)" >&2
  fail=1
fi
for m in "$@"; do
  got=$(sed -n 's/^toolchain //p' "$here/$m/go.mod")
  if [ "$got" != "$want" ]; then
    echo "check-deps: $m/go.mod: toolchain '${got:-none}', go.work pins $want" >&2; fail=1
  fi
  # An empty module (only a tool directive) has no packages to compare.
  [ -n "$(cd "$here/$m" && GOWORK=off go list ./... 2>/dev/null)" ] || continue
  alone=$(cd "$here/$m" && GOWORK=off deps)
  inws=$(cd "$here/$m" && GOWORK="$here/go.work" deps)
  drift=$(join <(echo "$alone") <(echo "$inws") | awk '$2 != $3 { printf "  %s: %s alone, %s in the workspace\n", $1, $2, $3 }')
  if [ -n "$drift" ]; then
    echo "check-deps: $m selects other versions on its own (GOWORK=off) than in the workspace:" >&2
    echo "$drift" >&2
    fail=1
  fi
done
[ "$fail" = 0 ] || { echo "check-deps: FAIL" >&2; exit 1; }
echo "check-deps: PASS ($*: toolchain $want; standalone versions = workspace versions)"

#!/usr/bin/env bash
# check-docker-go.sh: the Go that docker/*.Dockerfile build with (ARG GO_VERSION, the
# golang:${GO_VERSION}-alpine image, GOTOOLCHAIN=local) satisfies every `go` and
# `toolchain` line of the modules the images compile. Without Docker: it reads files only,
# so `make verify` (and CI) runs it; a go.mod raised past the images' Go fails here, not
# at a user's `docker build`.
set -euo pipefail
cd "$(dirname "$0")/.."
modules=(venturi venturi/venturiotel shared/tasks shared/telemetry sql bookmarks-api bookmarks-worker)
fail() { echo "check-docker-go: $*" >&2; exit 1; }

# version_ge A B: A >= B for Go versions (1.26, 1.26.0, 1.26.11, 1.27rc1).
version_ge() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | tail -1)" = "$1" ]; }

pinned=
for f in docker/api.Dockerfile docker/worker.Dockerfile; do
  v=$(sed -n 's/^ARG GO_VERSION=\([0-9][0-9.a-z]*\)[[:space:]]*$/\1/p' "$f")
  [ -n "$v" ] || fail "$f: no 'ARG GO_VERSION=<version>' line"
  grep -q '^FROM golang:\${GO_VERSION}-alpine' "$f" || fail "$f: the build stage is not FROM golang:\${GO_VERSION}-alpine"
  [ -z "$pinned" ] || [ "$v" = "$pinned" ] || fail "docker/api.Dockerfile pins Go $pinned, $f pins $v: keep them equal"
  pinned=$v
done

need=0 from=
for m in "${modules[@]}"; do
  while read -r directive v; do
    v=${v#go}
    if version_ge "$v" "$need" && [ "$v" != "$need" ]; then need=$v from="$m/go.mod ($directive $v)"; fi
  done < <(awk '$1 == "go" || $1 == "toolchain" { print $1, $2 }' "$m/go.mod")
done
version_ge "$pinned" "$need" ||
  fail "the Dockerfiles build with Go $pinned (ARG GO_VERSION) but $from needs $need: raise GO_VERSION in both"
echo "check-docker-go: the images' Go $pinned satisfies every module (highest requirement $need, $from)"

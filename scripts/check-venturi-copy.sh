#!/usr/bin/env bash
# check-venturi-copy.sh: the README's two recipes for copying venturi/ into another service
# work as written. In a temporary, unrelated module (example.com/shop) it
#   1. vendors the directory under third_party/venturi, keeps its module path, and adds the
#      require + replace lines; a program using venturi builds and vets;
#   2. copies it under internal/venturi with its module path rewritten to
#      example.com/shop/internal/venturi (every import of the old path, gofmt -w after); the
#      same program builds and vets, and the copy's own tests run against TEST_DATABASE_URL
#      (when set) with GOWORK=off.
# Go downloads pgx and ulid through the module proxy (GOFLAGS=-mod=mod).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export GOWORK=off GOFLAGS=-mod=mod
old=$(sed -n 's#^module ##p' "$here/venturi/go.mod") # github.com/venturi-dev/venturi in the original

program() { # $1: import path of venturi
  cat <<GO
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	venturi "$1"
)

type Hello struct{ Name string }

func (Hello) Kind() string { return "hello" }

func (h Hello) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	return venturi.CompletedWith("hello " + h.Name), nil
}

func main() {
	pool, err := pgxpool.New(context.Background(), os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	w, err := venturi.NewWorker(pool, struct{}{}, venturi.Config{})
	if err != nil {
		panic(err)
	}
	venturi.MustRegister[Hello](w)
	fmt.Println(w.ID() != "")
}
GO
}

# 1. Vendored under third_party/, module path kept, require + replace.
a=$dir/a
mkdir -p "$a/third_party"
cp -r "$here/venturi" "$a/third_party/venturi"
(cd "$a" && go mod init example.com/shop >/dev/null 2>&1 \
  && go mod edit -require=$old@v0.0.0 -replace=$old=./third_party/venturi \
  && program $old > main.go && go mod tidy >/dev/null 2>&1 && go build ./... && go vet .) \
  || { echo "check-venturi-copy: FAIL: recipe 1 (require + replace)" >&2; exit 1; }
echo "check-venturi-copy: recipe 1 (keep the path, require + replace): builds and vets"

# 2. Copied under internal/ with the module path rewritten.
b=$dir/b
new=example.com/shop/internal/venturi
mkdir -p "$b/internal"
cp -r "$here/venturi" "$b/internal/venturi"
rm "$b/internal/venturi/go.mod" "$b/internal/venturi/go.sum"
grep -rl --include='*.go' "$old" "$b/internal/venturi" | xargs sed -i "s#\"$old\([/\"]\)#\"$new\1#g"
gofmt -w "$b/internal/venturi" # the new path sorts elsewhere among the imports
(cd "$b" && go mod init example.com/shop >/dev/null 2>&1 && program $new > main.go \
  && go mod tidy >/dev/null 2>&1 && gofmt -l . | { ! grep . ; } && go build ./... && go vet ./...) \
  || { echo "check-venturi-copy: FAIL: recipe 2 (rewritten path)" >&2; exit 1; }
echo "check-venturi-copy: recipe 2 (path rewritten into the service's module): builds, vets, gofmt clean"
if [ -n "${TEST_DATABASE_URL:-}" ]; then
  (cd "$b" && go test -count=1 ./internal/venturi/...) \
    || { echo "check-venturi-copy: FAIL: the copy's tests" >&2; exit 1; }
  echo "check-venturi-copy: the copy's own tests pass"
fi
echo "check-venturi-copy: PASS"

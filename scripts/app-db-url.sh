#!/usr/bin/env bash
# app-db-url.sh: print the bookmarks app's database URL, creating the database `bookmarks`
# on the cluster of DATABASE_URL when needed. BOOKMARKS_DATABASE_URL, when set, is printed
# as it is. Used by `make run` and `make migrate` inside `scripts/pg.sh with`.
set -euo pipefail
if [ -n "${BOOKMARKS_DATABASE_URL:-}" ]; then
  echo "$BOOKMARKS_DATABASE_URL"
  exit 0
fi
: "${DATABASE_URL:?DATABASE_URL is not set: run under scripts/pg.sh with --}"
psql=${VENTURI_PGBIN:+$VENTURI_PGBIN/}psql
"$psql" "$DATABASE_URL" -qtAc "SELECT 1 FROM pg_database WHERE datname = 'bookmarks'" | grep -q 1 \
  || "$psql" "$DATABASE_URL" -qc "CREATE DATABASE bookmarks" >&2
echo "${DATABASE_URL%/*}/bookmarks?sslmode=disable"

#!/usr/bin/env bash
# check-docker.sh: the Docker path end to end (make test/docker; not in make test, since CI
# has no Docker). It builds both images (docker/*.Dockerfile), brings docker/compose.yaml up
# under a project name of its own on a free host port, creates a bookmark over HTTP, waits
# (condition and deadline) until the worker has processed it, prints it, and tears the stack
# down with its volume, also on failure or Ctrl-C.
#
# Needs a Docker engine and the compose v2 plugin (`docker compose`). Settings:
#   CHECK_DOCKER_URL      the page to bookmark (default https://example.com/)
#   CHECK_DOCKER_EXPECT   processed (default): the fetch ended, fetched or failed with a reason
#                         code; fetched: it must succeed (a machine that reaches the page)
#   CHECK_DOCKER_TIMEOUT  seconds to wait for readiness and for the worker (default 120)
#   CHECK_DOCKER_KEEP=1   leave the stack running (docker compose -p <project> down -v stops it)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
url=${CHECK_DOCKER_URL:-https://example.com/}
expect=${CHECK_DOCKER_EXPECT:-processed}
timeout=${CHECK_DOCKER_TIMEOUT:-120}
project=bookmarks-check-$$
log() { printf 'check-docker: %s\n' "$*" >&2; }
fail() { log "FAIL: $*"; exit 1; }

case $expect in processed|fetched) ;; *) fail "CHECK_DOCKER_EXPECT=$expect: want processed or fetched" ;; esac
docker info >/dev/null 2>&1 || fail "no Docker engine answers (docker info); DOCKER_HOST=${DOCKER_HOST:-unset}"
docker compose version >/dev/null 2>&1 || fail "no compose v2 plugin (docker compose version)"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null ||
  echo $((20000 + RANDOM % 20000)))
export BOOKMARKS_API_PORT=$port
compose() { docker compose -p "$project" -f docker/compose.yaml "$@"; }

cleanup() {
  local rc=$?
  if [ "$rc" != 0 ]; then
    log "the stack's last log lines:"
    compose logs --no-color --tail 40 >&2 || true
  fi
  if [ "${CHECK_DOCKER_KEEP:-}" = 1 ]; then
    log "left running: docker compose -p $project -f docker/compose.yaml down -v"
  else
    compose down -v --remove-orphans >/dev/null 2>&1 || log "docker compose down failed; run: docker compose -p $project -f docker/compose.yaml down -v"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The one place this script talks to the API: api METHOD PATH [JSON_BODY]. It prints the
# response body and then the HTTP status on a line of its own. Headers every request needs
# (authentication, say) go here.
api() {
  local args=(-sS --max-time 10 -X "$1" -w '\n%{http_code}\n')
  [ -z "${key:-}" ] || args+=(-H "Authorization: Bearer $key")
  [ $# -lt 3 ] || args+=(-H 'Content-Type: application/json' --data-raw "$3")
  curl "${args[@]}" "http://127.0.0.1:$port$2"
}
# body and status split api's output.
body() { sed '$d' <<<"$1"; }
status() { tail -n1 <<<"$1"; }
# field NAME JSON: the first string or number value of "NAME" in JSON (enough for the
# flat fields read here; no jq needed).
field() { grep -oE "\"$1\":(\"[^\"]*\"|[0-9]+)" <<<"$2" | head -n1 | cut -d: -f2- | tr -d '"'; }

log "building the images (docker build -f docker/{api,worker}.Dockerfile .)"
docker build -q -f docker/api.Dockerfile -t bookmarks-api . >/dev/null
docker build -q -f docker/worker.Dockerfile -t bookmarks-worker . >/dev/null

log "starting project $project (API on 127.0.0.1:$port)"
compose up -d --no-build --quiet-pull 2>&1 | sed 's/^/  /' >&2

deadline=$((SECONDS + timeout))
until [ "$(status "$(api GET /readyz 2>/dev/null || true)")" = 200 ]; do
  [ $SECONDS -lt $deadline ] || fail "GET /readyz did not answer 200 within ${timeout}s"
  sleep 1
done
log "the API is ready"

# Every endpoint but /healthz and /readyz needs a key: create one as a user would.
key=$(compose run --rm --no-deps -T api keys create --name "check-docker-$$" | tail -n1)
case $key in bmk_*) ;; *) fail "bookmarks-api keys create printed no key: $key" ;; esac
[ "$(status "$(api GET /bookmarks)")" = 200 ] || fail "GET /bookmarks with the new key did not answer 200"

out=$(api POST /bookmarks "{\"url\":\"$url\",\"tags\":[\"docker-check\"]}")
[ "$(status "$out")" = 201 ] || fail "POST /bookmarks answered $(status "$out"): $(body "$out")"
id=$(field id "$(body "$out")")
[ -n "$id" ] || fail "no id in $(body "$out")"
log "created bookmark $id for $url; waiting for the worker"

deadline=$((SECONDS + timeout))
while :; do
  out=$(api GET "/bookmarks/$id")
  [ "$(status "$out")" = 200 ] || fail "GET /bookmarks/$id answered $(status "$out"): $(body "$out")"
  b=$(body "$out")
  state=$(field fetch_status "$b")
  [ "$state" = pending ] || break
  [ $SECONDS -lt $deadline ] || fail "bookmark $id still pending after ${timeout}s: $b"
  sleep 1
done
printf '%s\n' "$b"
code=$(field fetch_error "$b")
case $state in
  fetched) log "OK: the worker fetched $url (page title: $(field page_title "$b"))" ;;
  failed)
    [ "$expect" = processed ] || fail "the fetch failed ($code); CHECK_DOCKER_EXPECT=fetched wants it fetched"
    [[ $code =~ ^[a-z_]+$ ]] || fail "fetch_error is not a reason code: '$code'"
    log "OK: the worker processed the bookmark: failed with reason code '$code' (this machine cannot fetch $url)" ;;
  *) fail "unexpected fetch_status '$state': $b" ;;
esac

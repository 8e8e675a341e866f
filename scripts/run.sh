#!/usr/bin/env bash
# run.sh: what `make run` runs inside `scripts/pg.sh with` (DATABASE_URL points at the
# project's cluster): create the bookmarks database, migrate it, create this run's API key
# (named make-run; each run replaces the previous run's), start the api and the worker,
# and keep them running until one of them exits, make is interrupted, or make itself goes
# away.
#
#   scripts/run.sh API_BIN WORKER_BIN ADDR [MAKE_PID]
#
# It prints the "ready" banner, with the key and a curl command ready to paste, only after
# GET /readyz answered 200, fails fast (exit 1)
# when a process exits or readiness does not come within 20s, and stops both processes
# on SIGINT, SIGTERM or SIGHUP, and when MAKE_PID (the make that started it) is gone: a
# script or an IDE signals make's PID, not its process group, and make does not pass a
# SIGTERM on to its children.
set -uo pipefail
api_bin=$1 worker_bin=$2 addr=$3 make_pid=${4:-}
log() { printf 'run: %s\n' "$*" >&2; }

DATABASE_URL=$("$(dirname "$0")/app-db-url.sh") || exit 1
export DATABASE_URL
"$api_bin" migrate || exit 1
# The API requires a key on every endpoint but the probes. This run's key is printed in the
# banner; --replace revokes the previous run's, so they do not pile up. It also opens the
# operations dashboard at /ops (--ops write: a development key).
key_err=$(mktemp)
dev_key=$("$api_bin" keys create --name make-run --replace --ops write 2>"$key_err") \
  || { cat "$key_err" >&2; rm -f "$key_err"; log "could not create the development API key"; exit 1; }
rm -f "$key_err"

export BOOKMARKS_API_ADDR=$addr
"$api_bin" & api=$!
"$worker_bin" & worker=$!

stopped=
stop() {
  [ -n "$stopped" ] && return
  stopped=1
  trap - INT TERM HUP
  log "stopping the api and the worker"
  kill -TERM "$api" "$worker" 2>/dev/null
  wait "$api" "$worker" 2>/dev/null
  log "stopped"
}
trap 'stop; exit 130' INT
trap 'stop; exit 143' TERM HUP

alive() { kill -0 "$1" 2>/dev/null; }
# first_gone names the first process that is gone, or prints nothing.
first_gone() {
  alive "$api" || { echo api; return; }
  alive "$worker" || { echo worker; return; }
  [ -z "$make_pid" ] || alive "$make_pid" || echo make
}

ready=
for _ in $(seq 100); do # 20s
  gone=$(first_gone)
  if [ -n "$gone" ]; then
    log "the $gone exited before the api was ready"
    stop; exit 1
  fi
  if [ "$(curl -s --max-time 1 -o /dev/null -w '%{http_code}' "http://$addr/readyz")" = 200 ]; then
    ready=1; break
  fi
  sleep 0.2
done
if [ -z "$ready" ]; then
  log "the api did not answer 200 on http://$addr/readyz within 20s"
  stop; exit 1
fi

# The processes' metrics endpoints: their defaults unless set (set and empty: none).
api_metrics=${BOOKMARKS_METRICS_ADDR-127.0.0.1:9464} worker_metrics=${BOOKMARKS_WORKER_METRICS_ADDR-127.0.0.1:9465}
cat <<BANNER

bookmarks API ready: http://$addr   (Ctrl-C stops the api, the worker and PostgreSQL)
API key of this run (named make-run; the next make run replaces it; make keys ARGS='create --name me' makes your own):
      $dev_key
try:  curl -s -X POST http://$addr/bookmarks -H "Authorization: Bearer $dev_key" -H "Content-Type: application/json" -d '{"url":"https://example.com/","tags":["demo"]}'
then: curl -s http://$addr/bookmarks/<id> -H "Authorization: Bearer $dev_key"
dashboard: http://$addr/ops/   (sign in with any user name and the key as the password)
metrics (Prometheus, unauthenticated, loopback): ${api_metrics:+http://$api_metrics/metrics (api) }${worker_metrics:+http://$worker_metrics/metrics (worker)}

BANNER
# The worker logs a warning for these too; repeat it under the banner, where it is seen.
test_only=$(env | grep -E '^BOOKMARKS_FETCH_(ALLOW_LOOPBACK_PORT|STATIC_HOSTS)=.' | tr '\n' ' ')
if [ -n "$test_only" ]; then
  printf 'WARNING: the worker runs with TEST-ONLY settings: %s\n         (they let it fetch addresses it refuses in production; never use them there)\n\n' "$test_only"
fi

while gone=$(first_gone); [ -z "$gone" ]; do sleep 0.5; done
case $gone in
  make) log "make is gone"; stop; exit 143 ;;
  *) wait "$([ "$gone" = api ] && echo "$api" || echo "$worker")"; rc=$?
     log "the $gone exited (status $rc)"; stop; exit $(( rc == 0 ? 1 : rc )) ;;
esac

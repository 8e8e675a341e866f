#!/usr/bin/env bash
# check-run.sh: `make run` never lies. Checks, against the project's PostgreSQL:
#   1. with the api's port taken, make run fails within 30s and prints no "ready" banner;
#   2. otherwise it prints the banner only once /readyz answers 200, with an API key that
#      works and a curl command that, pasted as it is, creates a bookmark;
#   3. SIGTERM sent to make's PID alone (as a script or an IDE sends it) stops the api and
#      the worker.
# Run from the repository root (make test/run does). Bounded: every wait has a deadline.
set -euo pipefail
cd "$(dirname "$0")/.."
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
fail() { printf 'check-run: FAIL: %s\n' "$*" >&2; [ -n "${log:-}" ] && tail -20 "$log" >&2; exit 1; }
log=$(mktemp)
# The processes' metrics endpoints on free ports too: their defaults (9464, 9465) may be
# taken on a shared machine.
BOOKMARKS_METRICS_ADDR=127.0.0.1:$(free_port) BOOKMARKS_WORKER_METRICS_ADDR=127.0.0.1:$(free_port)
export BOOKMARKS_METRICS_ADDR BOOKMARKS_WORKER_METRICS_ADDR
# A check that fails while make run is up stops it as a user's Ctrl-C would (SIGTERM to make
# stops the api and the worker: check 3), so that no app outlives the check.
trap 'rm -f "$log"; [ -n "${holder:-}" ] && kill "$holder" 2>/dev/null
      if [ -n "${make_pid:-}" ] && kill -TERM "$make_pid" 2>/dev/null; then
        for _ in $(seq 40); do kill -0 "$make_pid" 2>/dev/null || break; sleep 0.25; done
      fi; true' EXIT

# The binaries first: the timed runs below measure make run, not a cold build.
make --no-print-directory build/app >/dev/null

# 1. Port taken.
port=$(free_port)
python3 -c 'import socket,sys,time; s=socket.socket(); s.bind(("127.0.0.1",int(sys.argv[1]))); s.listen(1); time.sleep(120)' "$port" &
holder=$!
sleep 0.5
rc=0; timeout 60 make --no-print-directory run APP_ADDR=127.0.0.1:$port >"$log" 2>&1 || rc=$?
kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null || true; holder=
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "make run with its port taken exited $rc (want a fast failure)"
! grep -q "API ready" "$log" || fail "make run printed the ready banner although the api died"
grep -q "exited before the api was ready" "$log" || fail "make run did not say why it failed"
echo "check-run: port taken: make run failed fast (exit $rc), no banner"

# 2 and 3. Ready, then SIGTERM to make alone.
port=$(free_port)
make --no-print-directory run APP_ADDR=127.0.0.1:$port >"$log" 2>&1 &
make_pid=$!
for _ in $(seq 120); do grep -q "API ready" "$log" && break; kill -0 "$make_pid" 2>/dev/null || fail "make run exited"; sleep 0.5; done
grep -q "API ready" "$log" || fail "no ready banner within 60s"
[ "$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz")" = 200 ] \
  || fail "banner printed but /readyz is not 200"
key=$(grep -o 'bmk_[A-Za-z0-9_-]*' "$log" | head -1)
[ -n "$key" ] || fail "the banner shows no API key"
[ "$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $key" "http://127.0.0.1:$port/bookmarks")" = 200 ] \
  || fail "the banner's API key is refused"
[ "$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/bookmarks")" = 401 ] \
  || fail "GET /bookmarks without a key is not 401"
try=$(sed -n 's/^try:  //p' "$log")
[ -n "$try" ] || fail "the banner has no try: line"
created=$(eval "$try --max-time 5") || fail "the banner's curl failed: $try"
# The response is the bookmark as committed and re-read: its fetch may already have run (a
# machine without DNS fails it at once), so any fetch status shows the bookmark created.
case $created in *'"id":"'*'"fetch_status":"'*) ;; *) fail "the banner's curl did not create a bookmark: $created" ;; esac
echo "check-run: the banner's key works and its curl, pasted, creates a bookmark"
for m in "$BOOKMARKS_METRICS_ADDR" "$BOOKMARKS_WORKER_METRICS_ADDR"; do
  grep -q "http://$m/metrics" "$log" || fail "the banner does not show the metrics endpoint $m"
  # The whole response first, then the match: `curl | grep -q` fails under pipefail when
  # grep quits at its match before curl has written a response larger than the pipe.
  scraped=
  for _ in $(seq 10); do
    scraped=$(curl -s --max-time 5 "http://$m/metrics" || true)
    case $scraped in *$'\n'go_goroutines\ *) break ;; esac
    sleep 1
  done
  case $scraped in *$'\n'go_goroutines\ *) ;; *) fail "no metrics at http://$m/metrics" ;; esac
done
echo "check-run: the banner's metrics endpoints serve metrics"
kill -TERM "$make_pid"
for _ in $(seq 60); do
  curl -s --max-time 1 -o /dev/null "http://127.0.0.1:$port/readyz" || break
  sleep 0.5
done
! curl -s --max-time 1 -o /dev/null "http://127.0.0.1:$port/readyz" || fail "the api still answers 30s after SIGTERM to make"
for _ in $(seq 60); do grep -q "^run: stopped" "$log" && break; sleep 0.5; done
grep -q "^run: stopped" "$log" || fail "run.sh did not stop the api and the worker"
wait "$make_pid" 2>/dev/null || true
make_pid=
echo "check-run: ready banner after a 200; SIGTERM to make stopped the api and the worker"
echo "check-run: PASS"

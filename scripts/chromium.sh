#!/usr/bin/env bash
# chromium.sh: find a headless-capable Chromium for the dashboard's browser tests.
#
#   scripts/chromium.sh path     print the browser's path (installing it when missing)
#   scripts/chromium.sh with -- CMD…
#                                run CMD with CHROMIUM_PATH set to the browser's path
#
# CHROMIUM_PATH, when set and executable, wins. Otherwise the script looks for chromium,
# chromium-browser, google-chrome and google-chrome-stable on PATH. If none is found on a
# Debian machine and we are root, the Debian package `chromium` is installed (apt-get), as
# scripts/pg.sh does for PostgreSQL. When no browser can be found or installed the script
# fails: the browser tests never skip (in CI, CI=true, a missing browser fails the run).
set -euo pipefail

log() { printf 'chromium.sh: %s\n' "$*" >&2; }
die() { printf 'chromium.sh: error: %s\n' "$*" >&2; exit 1; }

find_browser() {
  if [ -n "${CHROMIUM_PATH:-}" ] && [ -x "$CHROMIUM_PATH" ]; then
    echo "$CHROMIUM_PATH"
    return
  fi
  local b
  for b in chromium chromium-browser google-chrome google-chrome-stable; do
    if command -v "$b" >/dev/null 2>&1; then
      command -v "$b"
      return
    fi
  done
  return 1
}

ensure_browser() {
  if browser=$(find_browser); then return; fi
  if [ "$(id -u)" = 0 ] && [ -f /etc/debian_version ] && command -v apt-get >/dev/null; then
    log "no Chromium found; installing the Debian package 'chromium'"
    # Lock::Timeout: two make test runs on one machine wait for each other's dpkg lock.
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
      --no-install-recommends chromium fonts-dejavu-core >&2
    browser=$(find_browser) || die "installed 'chromium' but still found no browser on PATH"
    return
  fi
  die "no Chromium found (chromium, chromium-browser, google-chrome). Install it
  (Debian/Ubuntu: sudo apt-get install chromium; macOS: brew install --cask chromium),
  or set CHROMIUM_PATH to the browser's executable."
}

case "${1:-}" in
path)
  ensure_browser
  echo "$browser"
  ;;
with)
  shift
  [ "${1:-}" = "--" ] && shift
  [ $# -gt 0 ] || die "usage: chromium.sh with -- CMD..."
  ensure_browser
  export CHROMIUM_PATH=$browser
  exec "$@"
  ;;
*)
  die "usage: chromium.sh path | with -- CMD..."
  ;;
esac

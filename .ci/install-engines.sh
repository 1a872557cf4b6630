#!/usr/bin/env bash
# The real engines the engine tests (test/engines/, test/support/engines/) start privately on
# free loopback ports: redis-server (cluster mode), redis-sentinel, pgbouncer and nginx (the edge
# proxy's template, test/engines/nginx.test.ts), from Debian's packages. Idempotent and quiet: installs only what is missing (apt-get update only when a first
# attempt fails), then stops the daemons the install itself started (a pgbouncer on 6432, a sentinel
# on 26379, an nginx on 80), since the tests run their own. Processes that were running before it are never
# touched: the Redis on 6379 that CI shares stays up. Exits non-zero on failure.
set -euo pipefail

declare -A wanted=([redis-server]=redis-server [redis-sentinel]=redis-sentinel [pgbouncer]=pgbouncer [nginx-light]=nginx)
# pgbouncer and nginx are in /usr/sbin, which a non-login PATH may lack.
have() { command -v "$1" > /dev/null || [ -x "/usr/sbin/$1" ]; }
missing=()
for package in "${!wanted[@]}"; do
  have "${wanted[$package]}" || missing+=("$package")
done
[ "${#missing[@]}" -eq 0 ] && exit 0

# The daemons' processes now: whatever appears after the install, the install started.
daemons() { pgrep -x 'pgbouncer|redis-server|redis-sentinel|nginx' | sort || true; }
before="$(daemons)"

export DEBIAN_FRONTEND=noninteractive
install() { apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null 2>&1; }
if ! install; then
  apt-get update -qq > /dev/null
  apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
fi

for pid in $(comm -13 <(echo "$before") <(daemons)); do
  args="$(ps -o args= -p "$pid" 2> /dev/null)" || continue
  # Only the packages' own daemons: tests running meanwhile start pgbouncers and redis-servers of
  # their own, on other ports and with other configs, and those are not this script's to stop.
  case "$args" in
    *pgbouncer*/etc/pgbouncer/*) service=pgbouncer ;;
    *:26379*) service=redis-sentinel ;;
    # The package's own (a test's runs with -p and its own directory; workers go with their master).
    *'nginx: master process /usr/sbin/nginx -g daemon on'*) service=nginx ;;
    # A plain redis-server the install started is the one on 6379, which CI may use: left alone.
    *) continue ;;
  esac
  kill -TERM "$pid" 2> /dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2> /dev/null || true
  # Nor may it come back at boot.
  if [ -d /run/systemd/system ]; then
    systemctl disable --now -q "$service" 2> /dev/null || true
  else
    update-rc.d -f "$service" disable > /dev/null 2>&1 || true
  fi
done

for package in "${missing[@]}"; do
  have "${wanted[$package]}" || { echo "install-engines: $package did not install ${wanted[$package]}" >&2; exit 1; }
done

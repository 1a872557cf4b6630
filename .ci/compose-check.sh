#!/usr/bin/env bash
# Builds the image from the Dockerfile as written and brings docker-compose.yml up as written, for
# real, on a machine with no Docker engine and no registry: podman serves the Docker API and
# docker-compose drives it; the public base images are stood in for by images built here from
# Debian packages (.ci/standins), tagged with the names the project's files use. Then it checks the
# stack through nginx, as a user of the compose setup would. Stand-ins are cached between runs.
#
# Usage: bash .ci/compose-check.sh   (root; uses port 8080, as the compose file publishes)
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE=/var/cache/pet-store-ci
RUN_DIR="$(mktemp -d)"
PROJECT="petsci$$"
SOCKET="unix://$RUN_DIR/podman.sock"
export DOCKER_HOST="$SOCKET"
BASE=http://127.0.0.1:8080
service_pid=""
health_pid=""
load_pid=""

say() { echo "compose: $*"; }
not_checked() {
  say "NOT CHECKED: $*"
  exit 0
}
fail() {
  say "FAILED: $*"
  docker-compose -p "$PROJECT" logs --no-color --tail=30 2> /dev/null | tail -n 60 || true
  exit 1
}
cleanup() {
  docker-compose -p "$PROJECT" down -v --remove-orphans > /dev/null 2>&1 || true
  [ -z "$health_pid" ] || kill "$health_pid" 2> /dev/null || true
  [ -z "$load_pid" ] || kill "$load_pid" 2> /dev/null || true
  [ -z "$service_pid" ] || kill "$service_pid" 2> /dev/null || true
  rm -rf "$RUN_DIR"
}
trap cleanup EXIT

if ! command -v podman > /dev/null || ! command -v debootstrap > /dev/null || ! command -v docker-compose > /dev/null; then
  (apt-get install -y -qq podman debootstrap docker-compose > /dev/null 2>&1 ||
    (apt-get update -qq && apt-get install -y -qq podman debootstrap docker-compose > /dev/null 2>&1)) ||
    not_checked "podman, debootstrap or docker-compose cannot be installed from Debian's packages here"
fi
# Podman's default OCI runtime, crun, refuses every container where cgroups are hybrid ("cgroups in
# hybrid mode not supported"); runc runs them.
source .ci/podman-runtime.sh
if [ "$(cgroup_mode)" = hybrid ]; then
  if ! command -v runc > /dev/null; then
    (apt-get install -y -qq runc > /dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq runc > /dev/null 2>&1)) ||
      not_checked "the cgroups here are hybrid, which crun refuses, and runc cannot be installed from Debian's packages"
  fi
  mkdir -p /etc/containers
  set_runtime /etc/containers/containers.conf runc
  say "cgroups are hybrid here: podman runs containers with runc"
fi
# Without these, every container start fails with "error setting rlimit type 7".
if ! grep -q default_ulimits /etc/containers/containers.conf 2> /dev/null; then
  printf '[containers]\ndefault_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]\n' >> /etc/containers/containers.conf
fi
# Podman lists the host's DNS server after its own in every container; a lookup that stalls waits
# 5 s per server by default, as long as pg waits for a connection. One second, tried three times.
if ! grep -q dns_options /etc/containers/containers.conf; then
  printf 'dns_options = ["timeout:1", "attempts:3"]\n' >> /etc/containers/containers.conf
fi
# What a run that was killed outright (no trap ran) left behind would hold port 8080.
for leftover in $(podman ps -a --format '{{index .Labels "com.docker.compose.project"}}' 2> /dev/null | grep '^petsci' | sort -u); do
  podman ps -aq --filter "label=com.docker.compose.project=$leftover" | xargs -r podman rm -f --time 5 > /dev/null 2>&1 || true
  podman network rm -f "${leftover}_default" > /dev/null 2>&1 || true
  podman volume rm -f "${leftover}_postgres-data" > /dev/null 2>&1 || true
done
if ss -ltn 'sport = :8080' | grep -q LISTEN; then fail "port 8080, which docker-compose.yml publishes, is taken"; fi

# Debian roots, made once and kept: bookworm for most stand-ins, forky for an nginx with `resolve`.
mkdir -p "$CACHE"
for suite in bookworm forky; do
  podman image exists "localhost/debian:$suite" && continue
  if [ ! -f "$CACHE/$suite.done" ]; then
    rm -rf "${CACHE:?}/$suite-root"
    script=""
    [ "$suite" = forky ] && script=/usr/share/debootstrap/scripts/sid
    debootstrap --variant=minbase "$suite" "$CACHE/$suite-root" http://deb.debian.org/debian $script > "$CACHE/$suite.log" 2>&1 ||
      not_checked "debootstrap $suite failed (see $CACHE/$suite.log)"
    touch "$CACHE/$suite.done"
  fi
  tar -C "$CACHE/$suite-root" -c . | podman import - "localhost/debian:$suite" > /dev/null 2>&1
done

# The stand-ins, rebuilt when their recipe or the Node binary changes.
node_bin="$(command -v node)"
npm_dir="$(dirname "$(dirname "$(readlink -f "$(command -v npm)")")")"
recipe="$( (cat .ci/standins/*; node --version; cat "$npm_dir/package.json") | sha256sum | cut -c1-16)"
if [ "$(cat "$CACHE/standins.recipe" 2> /dev/null)" != "$recipe" ]; then
  context="$RUN_DIR/standins"
  cp -r .ci/standins "$context"
  cp "$node_bin" "$context/node"
  cp -r "$npm_dir" "$context/npm"
  cp /etc/ssl/certs/ca-certificates.crt "$context/ca-certificates.crt"
  for image in node:24-bookworm-slim postgres:17-alpine redis:7-alpine nginx:1.28-alpine; do
    podman build --network host --format docker -t "docker.io/library/$image" -f "$context/${image%%:*}.Dockerfile" "$context" > "$RUN_DIR/build.log" 2>&1 ||
      { tail -n 20 "$RUN_DIR/build.log"; fail "the stand-in for $image did not build"; }
  done
  echo "$recipe" > "$CACHE/standins.recipe"
fi
say "stand-ins for node, postgres, redis and nginx ready"

podman system service --time=0 "$SOCKET" > "$RUN_DIR/podman.log" 2>&1 &
service_pid=$!
for _ in $(seq 50); do [ -S "$RUN_DIR/podman.sock" ] && break; sleep 0.1; done
# No systemd here to run the images' HEALTHCHECKs, which compose waits on: this loop plays the engine's part.
(while true; do
  for id in $(podman ps -q); do podman healthcheck run "$id" > /dev/null 2>&1 || true; done
  sleep 2
done) &
health_pid=$!

started=$(date +%s)
podman build --network host --format docker -t pet-store:local . > "$RUN_DIR/build.log" 2>&1 ||
  { tail -n 30 "$RUN_DIR/build.log"; fail "the Dockerfile did not build"; }
say "image built from the Dockerfile in $(($(date +%s) - started)) s"
# The image leaves the embedded database out: without DATABASE_URL it says so and exits 1.
set +e
podman run --rm --network none pet-store:local > "$RUN_DIR/no-url.log" 2>&1
no_url=$?
set -e
[ "$no_url" = 1 ] && grep -q 'DATABASE_URL is not set, and this install has no embedded database' "$RUN_DIR/no-url.log" ||
  { cat "$RUN_DIR/no-url.log"; fail "the image without DATABASE_URL exited $no_url instead of 1 with a clear message"; }
say "without DATABASE_URL the image exits 1: $(grep -o 'DATABASE_URL is not set, and this install has no embedded database' "$RUN_DIR/no-url.log")"
docker-compose -p "$PROJECT" up -d --no-build > "$RUN_DIR/up.log" 2>&1 || { cat "$RUN_DIR/up.log"; fail "docker-compose up failed"; }
# Ready means both replicas reach PostgreSQL (each one's /readyz, asked inside its container: nginx
# does not pass /readyz on) and nginx reaches both: a public path answers 200 several times in a
# row, round robin.
ready_inside() { podman exec "$1" node -e "fetch('http://127.0.0.1:3000/readyz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))" > /dev/null 2>&1; }
status() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
in_a_row=0
for _ in $(seq 120); do
  ready=1
  for id in $(docker-compose -p "$PROJECT" ps -q api); do ready_inside "$id" || ready=""; done
  if [ -n "$ready" ] && curl -fsS "$BASE/v1/openapi.json" > /dev/null 2>&1; then in_a_row=$((in_a_row + 1)); else in_a_row=0; fi
  [ "$in_a_row" -ge 6 ] && break
  sleep 0.5
done
[ "$in_a_row" -ge 6 ] || fail "the replicas were not ready, or not reached through nginx, within 60 s"
say "stack up (postgres, redis, migrate, 2 api replicas, nginx) in $(($(date +%s) - started)) s"

# The edge as a client meets it: nginx's own request id whatever the client sends (the service
# believes nginx's header), no version in Server, and no health or readiness from outside.
curl -s -D "$RUN_DIR/chosen.headers" -o /dev/null -H 'X-Request-Id: client-chosen-id-123' "$BASE/v1/openapi.json"
given="$(tr -d '\r' < "$RUN_DIR/chosen.headers" | sed -n 's/^x-request-id: //Ip')"
[[ "$given" =~ ^[0-9a-f]{32}$ ]] || fail "with X-Request-Id: client-chosen-id-123 sent, the response's id was '$given', not nginx's own"
replayed="$(curl -s -D - -o /dev/null -H "X-Request-Id: $given" "$BASE/v1/openapi.json" | tr -d '\r' | sed -n 's/^x-request-id: //Ip')"
[[ "$replayed" =~ ^[0-9a-f]{32}$ ]] && [ "$replayed" != "$given" ] || fail "an earlier request's id sent again came back as '$replayed'"
# The replicas' logs are read into a file, then searched: grep -q on a pipe would end the pipe
# early and fail it under pipefail. A log line is written just after its response: waited for.
api_logs() { docker-compose -p "$PROJECT" logs --no-color api > "$RUN_DIR/api.log" 2> /dev/null || true; }
for _ in $(seq 50); do
  api_logs
  grep -q "\"reqId\":\"$given\"" "$RUN_DIR/api.log" && break
  sleep 0.2
done
grep -q "\"reqId\":\"$given\"" "$RUN_DIR/api.log" || fail "no replica logged the request under nginx's id $given"
if grep -q 'client-chosen-id-123' "$RUN_DIR/api.log"; then fail "a client's X-Request-Id reached a replica's log"; fi
server_header="$(tr -d '\r' < "$RUN_DIR/chosen.headers" | sed -n 's/^server: //Ip')"
[ "$server_header" = nginx ] || fail "nginx announces itself as '$server_header'"
for path in /healthz /readyz; do
  [ "$(status "$BASE$path")" = 404 ] || fail "GET $path through nginx answered $(status "$BASE$path"), not 404"
done
say "nginx: its own request id whatever the client sends, Server without a version, /healthz and /readyz not public"

# For the first seconds after `up`, new connections to PostgreSQL by name often time out under
# podman's network (seen here for up to ~20 s; never once settled); retries go through.
new_key() {
  local name="$1"
  shift
  [ "$#" -gt 0 ] || set -- --plan free
  for _ in $(seq 10); do
    docker-compose -p "$PROJECT" exec -T --index=1 api node dist/cli/keys.js create "$@" --name "$name" > "$RUN_DIR/key.out" 2>&1 &&
      { tail -n 1 "$RUN_DIR/key.out"; return; }
    sleep 2
  done
  cat "$RUN_DIR/key.out" >&2
}
# A burst must fall within one UTC minute window for exact counts.
wait_for_fresh_minute() { while [ "$(date +%-S)" -gt 40 ]; do sleep 1; done; }

key="$(new_key create)"
[[ "$key" =~ ^psk_[0-9A-Za-z]{49}$ ]] || fail "docker-compose exec keys create printed no key"
say "a key made with docker-compose exec"

# A 503 (a replica's first connections to PostgreSQL can stall under podman's network) is retried,
# as the service's Retry-After asks every client to.
for _ in $(seq 10); do
  created="$(status -X POST "$BASE/v1/pets" -H "Authorization: Bearer $key" -H 'content-type: application/json' -d '{"name":"Rex","categoryId":1}')"
  [ "$created" = 503 ] || break
  sleep 2
done
[ "$created" = 201 ] || fail "POST /v1/pets through nginx answered $created"
say "POST /v1/pets through nginx: 201"

# A create sent twice with one Idempotency-Key through nginx, so to both replicas in turn: one pet,
# the second answer the first replayed. A 503 is retried with the same key, as a client would.
post_once() {
  local code
  for _ in $(seq 10); do
    code="$(curl -s -D "$RUN_DIR/$1.headers" -o "$RUN_DIR/$1.body" -w '%{http_code}' -X POST "$BASE/v1/pets" \
      -H "Authorization: Bearer $key" -H 'content-type: application/json' -H "Idempotency-Key: \"compose-$PROJECT\"" \
      -d '{"name":"Once","categoryId":1}')"
    [ "$code" = 503 ] || break
    sleep 2
  done
  echo "$code"
}
[ "$(post_once first)" = 201 ] && [ "$(post_once retry)" = 201 ] || fail "POST /v1/pets with an Idempotency-Key did not answer 201 twice"
cmp -s "$RUN_DIR/first.body" "$RUN_DIR/retry.body" && grep -qi '^idempotent-replayed: true' "$RUN_DIR/retry.headers" ||
  fail "a retry with the same Idempotency-Key was not the first response replayed: $(cat "$RUN_DIR/first.body") then $(cat "$RUN_DIR/retry.body")"
say "a create retried with its Idempotency-Key through nginx: replayed, one pet"

# A revalidation through nginx: the ETag one replica sent is current on the other too.
revalidated=""
for _ in $(seq 5); do
  etag="$(curl -s -D - -o /dev/null -H "Authorization: Bearer $key" "$BASE/v1/pets" | tr -d '\r' | sed -n 's/^etag: //Ip')"
  revalidated="$(status -H "Authorization: Bearer $key" -H "If-None-Match: $etag" "$BASE/v1/pets")"
  [ "$revalidated" = 304 ] && break
done
[ "$revalidated" = 304 ] || fail "GET /v1/pets with If-None-Match: its ETag through nginx answered $revalidated"
say "GET /v1/pets revalidated through nginx: 304"

free="$(new_key limits)"
wait_for_fresh_minute
statuses=""
for _ in $(seq 70); do statuses="$statuses $(status -H "Authorization: Bearer $free" "$BASE/v1/pets")"; done
ok=$(echo $statuses | tr ' ' '\n' | grep -c '^200$' || true)
limited=$(echo $statuses | tr ' ' '\n' | grep -c '^429$' || true)
[ "$ok" = 60 ] && [ "$limited" = 10 ] || fail "a Free key got, in order: $statuses (not 60 x 200 then 10 x 429)"
replicas_serving="$(docker-compose -p "$PROJECT" logs --no-color api 2> /dev/null | grep '"route":"/v1/pets"' | cut -d'|' -f1 | sort -u | wc -l)"
[ "$replicas_serving" -ge 2 ] || fail "only $replicas_serving replica logged requests; nginx should spread them over both"
say "a Free key: exactly 60 of 70 across both replicas"

unauthorized=0
refused=0
for i in $(seq 70); do
  case "$(status -H "X-Forwarded-For: 10.0.$((i / 250)).$((i % 250))" "$BASE/v1/pets")" in
    401) unauthorized=$((unauthorized + 1)) ;;
    429) refused=$((refused + 1)) ;;
  esac
done
# One budget of 60 for the host's address, whatever the header says (a key's first request on each
# replica above was charged to it too, so a few may be spent already); with the header believed,
# all 70 would be 401s.
[ "$unauthorized" -le 60 ] && [ "$refused" -ge 10 ] && [ $((unauthorized + refused)) = 70 ] ||
  fail "forged X-Forwarded-For: $unauthorized x 401 and $refused x 429 of 70; one address may have 60 at most"
say "a forged X-Forwarded-For is still limited per address: $unauthorized x 401, then $refused x 429"

docker-compose -p "$PROJECT" exec -T --index=1 api node -e \
  "fetch('http://127.0.0.1:9464/metrics').then((r) => r.text()).then((t) => process.exit(t.includes('http_request_duration_seconds') ? 0 : 1), () => process.exit(1))" ||
  fail "the metrics endpoint did not answer inside the container"
say "Prometheus metrics on port 9464 inside the container"

# A rolling restart under steady load through nginx: each replica in turn is stopped as an
# orchestrator stops it (SIGTERM, then the compose file's stop_grace_period of 20 s before a
# SIGKILL), started again, and waited for until its /readyz answers 200; the next one goes at once.
# Clients send lists and creates, each create with an Idempotency-Key of its own, over keep-alive
# connections, and count anything but a 200 or 201 as a failure. Not one may fail, and no key may
# have made two pets (nginx passes a keyed create on to the other replica: deploy/nginx.conf.template).
cat > "$RUN_DIR/load.mjs" << 'LOAD'
import { existsSync, writeFileSync } from 'node:fs';
const [base, authorization, clients, minimum, stopFile] = process.argv.slice(2);
const counts = {};
const failures = [];
const created = [];
let total = 0;
let replayed = 0;
const started = Date.now();
async function send(client, seq) {
  const create = seq % 2 === 1;
  const method = create ? 'POST' : 'GET';
  const key = `roll-${process.pid}-${client}-${seq}`;
  let status = 'error';
  try {
    const response = await fetch(create ? `${base}/v1/pets` : `${base}/v1/pets?limit=5`, {
      method,
      headers: create ? { authorization, 'content-type': 'application/json', 'idempotency-key': key } : { authorization },
      body: create ? JSON.stringify({ name: key, categoryId: 1 }) : undefined,
      signal: AbortSignal.timeout(30_000),
    });
    const body = await response.text();
    status = String(response.status);
    if (response.status === 201) created.push({ key, id: JSON.parse(body).id });
    if (response.headers.get('idempotent-replayed') === 'true') replayed++;
    if (response.status !== (create ? 201 : 200)) failures.push(`${method} ${status} at ${Date.now() - started} ms: ${body.replace(/\s+/g, " ").slice(0, 120)}`);
  } catch (error) {
    failures.push(`${method} ${error.cause?.code ?? error.message} at ${Date.now() - started} ms`);
  }
  counts[`${method} ${status}`] = (counts[`${method} ${status}`] ?? 0) + 1;
  total++;
}
await Promise.all(
  Array.from({ length: Number(clients) }, async (_, client) => {
    for (let seq = 0; !existsSync(stopFile) || total < Number(minimum); seq++) await send(client, seq);
  }),
);
console.log(JSON.stringify({ total, seconds: (Date.now() - started) / 1000, counts, replayed, failures, created }));
LOAD
roller="$(new_key rolling --plan enterprise --per-minute 1000000000 --per-day 2000000000)"
[[ "$roller" =~ ^psk_ ]] || fail "no enterprise key for the rolling restart"
replicas="$(docker-compose -p "$PROJECT" ps -q api)"
for id in $replicas; do ready_inside "$id" || fail "replica ${id:0:12} not ready before the rolling restart"; done
node "$RUN_DIR/load.mjs" "$BASE" "Bearer $roller" 6 2000 "$RUN_DIR/load.stop" > "$RUN_DIR/load.json" 2> "$RUN_DIR/load.err" &
load_pid=$!
sleep 3
restarts=""
for id in $replicas; do
  stop_started=$(date +%s%N)
  podman stop --time 20 "$id" > /dev/null
  stop_ms=$((($(date +%s%N) - stop_started) / 1000000))
  code="$(podman inspect --format '{{.State.ExitCode}}' "$id")"
  [ "$code" = 0 ] || fail "a replica stopped with SIGTERM during the rolling restart exited with $code"
  podman start "$id" > /dev/null
  ready=""
  for _ in $(seq 120); do
    if ready_inside "$id"; then ready=1 && break; fi
    sleep 0.5
  done
  [ -n "$ready" ] || fail "replica ${id:0:12} was not ready within 60 s of its restart"
  restarts="$restarts ${id:0:12} exit 0 after ${stop_ms} ms, ready $((($(date +%s%N) - stop_started) / 1000000)) ms after its SIGTERM;"
done
# Long enough for nginx to look the last replica up again; the load goes on to 2,000 requests at least.
sleep 6
touch "$RUN_DIR/load.stop"
wait "$load_pid" || { cat "$RUN_DIR/load.err"; fail "the load of the rolling restart did not finish"; }
say "rolling restart:$restarts"
summary="$(node -e '
const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
const counts = Object.entries(r.counts).map(([k, v]) => `${v} x ${k}`).join(", ");
console.log(`${r.total} requests in ${r.seconds.toFixed(0)} s by 6 clients (${counts}): ${r.failures.length} failed, ${r.replayed} replayed`);
for (const failure of r.failures.slice(0, 20)) console.log(`  ${failure}`);
process.exit(r.failures.length === 0 && r.total >= 2000 ? 0 : 1);
' "$RUN_DIR/load.json")" || {
  # What nginx met (its error log) and what the replicas answered other than 200 or 201.
  docker-compose -p "$PROJECT" logs --no-color nginx api 2> /dev/null | grep -E '\[(error|warn)\]|"status":(5|4)[0-9][0-9]|"level":(40|50)' | tail -n 40 || true
  fail "rolling restart: $summary"
}
# Every key that got its 201 made one pet, under the id its response gave, and no key made two.
node -e '
const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
for (const line of r.created.map(({ key, id }) => `${key} ${id}`).sort()) console.log(line);
' "$RUN_DIR/load.json" > "$RUN_DIR/created.expected"
docker-compose -p "$PROJECT" exec -T postgres psql -U pets -d pets -Atc \
  "SELECT name || ' ' || id FROM pets WHERE name LIKE 'roll-%'" | tr -d '\r' | LC_ALL=C sort > "$RUN_DIR/created.stored"
LC_ALL=C sort -o "$RUN_DIR/created.expected" "$RUN_DIR/created.expected"
duplicates="$(cut -d' ' -f1 "$RUN_DIR/created.stored" | uniq -d | wc -l)"
[ "$duplicates" = 0 ] || fail "rolling restart: $duplicates Idempotency-Keys made two pets or more"
cmp -s "$RUN_DIR/created.expected" "$RUN_DIR/created.stored" ||
  fail "rolling restart: the stored pets are not exactly the 201s: $(diff "$RUN_DIR/created.expected" "$RUN_DIR/created.stored" | head -n 5 | tr '\n' ' ')"
# What nginx met at the replicas and passed on (its error log: refused connections, replicas left out).
upstream_errors="$(docker-compose -p "$PROJECT" logs --no-color nginx 2> /dev/null | grep -c 'upstream' || true)"
say "rolling restart under load through nginx: $summary; $(wc -l < "$RUN_DIR/created.stored") pets stored, one per key, as answered; nginx logged $upstream_errors upstream errors, passed on"

replica="$(docker-compose -p "$PROJECT" ps -q api | tail -n 1)"
podman stop --time 20 "$replica" > /dev/null
code="$(podman inspect --format '{{.State.ExitCode}}' "$replica")"
[ "$code" = 0 ] || fail "a replica stopped with SIGTERM exited with $code"
reader="$(new_key reader)"
# nginx looks the replicas up again every 5 s (the template's resolver); after that it no longer
# tries the stopped one at all. Before it, a GET meant for it takes up to 2 s to fail over.
sleep 6
for _ in $(seq 10); do
  answer="$(status -H "Authorization: Bearer $reader" "$BASE/v1/pets")"
  [ "$answer" = 200 ] || fail "with one replica stopped, GET /v1/pets through nginx answered $answer"
done
say "a replica stopped with exit 0 while the other served 10 of 10"
say "image built, stack up, 11 checks passed in $(($(date +%s) - started)) s"

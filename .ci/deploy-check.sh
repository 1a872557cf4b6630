#!/usr/bin/env bash
# Checks the deployment files in deploy/ (besides the compose stack, which .ci/compose-check.sh runs):
#   1. the Prometheus rules: promtool check rules, and their unit tests (promtool test rules);
#      the monitoring profile's Prometheus configuration: promtool check config;
#   2. each Kubernetes overlay rendered with kubectl kustomize, every object validated offline
#      against the Kubernetes API types (kubernetes-types, compiled with the project's TypeScript:
#      an unknown field, a wrong type or a missing required field fails);
#   3. every metric name in the rules and in the Grafana dashboard's queries is one the built
#      server really exports: it is started on free ports, used, and its /metrics scraped.
# Quiet on success: a few lines starting with `deploy:`. Exits non-zero on any failure.
#
# Usage: bash .ci/deploy-check.sh   (root, for apt-get; needs node and npm on PATH, as .ci/run sets)
# Installs, when missing: Debian's prometheus package (for promtool; its daemon is not started),
# and kubernetes-types and yaml into a cache directory outside the repository.
# The server runs on a throwaway database of the PostgreSQL at PGHOST (127.0.0.1:5432, user
# postgres, as .ci/run starts it) when one answers, so the pool metric exists; else on the
# embedded database, and says that the PostgreSQL-only metric was not checked.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "deploy: $*"; }
fail() {
  say "FAILED: $*"
  exit 1
}

CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/pet-store-ci/deploy-check"
KUBERNETES_TYPES=kubernetes-types@1.30.0
YAML=yaml@2.9.1
RUN_DIR="$(mktemp -d)"
server=""
database=""
PGHOST="${PGHOST:-127.0.0.1}"
PGPORT="${PGPORT:-5432}"
cleanup() {
  if [ -n "$server" ]; then
    kill "$server" 2> /dev/null || true
    wait "$server" 2> /dev/null || true
  fi
  [ -z "$database" ] || psql -h "$PGHOST" -p "$PGPORT" -U postgres -qc "DROP DATABASE IF EXISTS $database WITH (FORCE)" > /dev/null 2>&1 || true
  rm -rf "$RUN_DIR"
}
trap cleanup EXIT

# --- tools -------------------------------------------------------------------------------------
if ! command -v promtool > /dev/null; then
  # Debian's package would start the daemon where an init system runs; only promtool is wanted.
  policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    policy=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy"
  fi
  installed=1
  apt-get install -y -qq prometheus > "$RUN_DIR/apt.log" 2>&1 ||
    (apt-get update -qq && apt-get install -y -qq prometheus > "$RUN_DIR/apt.log" 2>&1) || installed=""
  [ -z "$policy" ] || rm -f "$policy"
  [ -n "$installed" ] || { tail -n 20 "$RUN_DIR/apt.log"; fail "Debian's prometheus package (promtool) could not be installed"; }
fi
command -v kubectl > /dev/null || {
  (apt-get install -y -qq kubectl > "$RUN_DIR/apt.log" 2>&1 || (apt-get update -qq && apt-get install -y -qq kubectl > "$RUN_DIR/apt.log" 2>&1)) ||
    fail "kubectl (for kustomize) is missing and could not be installed"
}
if [ "$(node -p 'require(process.argv[1] + "/node_modules/kubernetes-types/package.json").version' "$CACHE" 2> /dev/null)" != "${KUBERNETES_TYPES#*@}" ] ||
  [ ! -f "$CACHE/node_modules/yaml/package.json" ]; then
  mkdir -p "$CACHE"
  npm install --prefix "$CACHE" --no-save --no-audit --no-fund --no-package-lock "$KUBERNETES_TYPES" "$YAML" > "$RUN_DIR/npm.log" 2>&1 ||
    { tail -n 20 "$RUN_DIR/npm.log"; fail "npm could not install $KUBERNETES_TYPES and $YAML into $CACHE"; }
fi
[ -x node_modules/.bin/tsc ] || npm ci --no-audit --no-fund > "$RUN_DIR/npm-ci.log" 2>&1 || { tail -n 20 "$RUN_DIR/npm-ci.log"; fail "npm ci"; }

# --- 1. Prometheus rules ------------------------------------------------------------------------
promtool check rules deploy/prometheus/alerts.yml > "$RUN_DIR/promtool.log" 2>&1 || { cat "$RUN_DIR/promtool.log"; fail "promtool check rules"; }
rules="$(sed -n 's/.*SUCCESS: \([0-9]*\) rules found.*/\1/p' "$RUN_DIR/promtool.log")"
promtool test rules deploy/prometheus/alerts.test.yml > "$RUN_DIR/promtool-test.log" 2>&1 || { cat "$RUN_DIR/promtool-test.log"; fail "promtool test rules"; }
promtool check config deploy/prometheus/prometheus.yml > "$RUN_DIR/promtool-config.log" 2>&1 ||
  { cat "$RUN_DIR/promtool-config.log"; fail "promtool check config deploy/prometheus/prometheus.yml"; }
alerts_tested="$(grep -c 'alertname:' deploy/prometheus/alerts.test.yml)"
say "prometheus: $rules rules valid, their unit tests pass ($alerts_tested alert evaluations), monitoring config valid"

# --- 2. Kubernetes overlays, rendered and validated offline ------------------------------------------
# Each object becomes an object literal typed with its kubernetes-types interface (generated from the
# Kubernetes OpenAPI document); tsc's excess-property check rejects unknown fields at any depth.
cat > "$RUN_DIR/to-typescript.mjs" << 'EOF'
import { createRequire } from 'node:module';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
const [cache, out, ...inputs] = process.argv.slice(2);
const require = createRequire(join(cache, 'node_modules', 'x.js'));
const YAML = require('yaml');
const typesDir = join(cache, 'node_modules', 'kubernetes-types');
const lines = ['/* Generated by .ci/deploy-check.sh: one rendered Kubernetes object per line. */'];
const names = {};
const errors = [];
for (const input of inputs) {
  const [environment, file] = input.split('=');
  for (const document of YAML.parseAllDocuments(readFileSync(file, 'utf8'))) {
    if (document.errors.length) errors.push(`${environment}: ${document.errors[0].message}`);
    const object = document.toJS();
    if (!object) continue;
    const [group, version] = object.apiVersion.includes('/') ? object.apiVersion.split('/') : ['core', object.apiVersion];
    const module = `${group.split('.')[0]}/${version}`;
    const id = `${environment} ${object.kind}/${object.metadata?.name}`;
    const declarations = join(typesDir, `${module}.d.ts`);
    if (!existsSync(declarations) || !new RegExp(`export interface ${object.kind} \\{`).test(readFileSync(declarations, 'utf8'))) {
      errors.push(`${id}: no Kubernetes type for apiVersion ${object.apiVersion}, kind ${object.kind}`);
      continue;
    }
    lines.push(`export const o${lines.length}: import('kubernetes-types/${module}').${object.kind} = ${JSON.stringify(object)};`);
    names[lines.length] = id;
  }
}
writeFileSync(join(out, 'objects.ts'), lines.join('\n') + '\n');
writeFileSync(join(out, 'objects.json'), JSON.stringify(names));
if (errors.length) {
  console.error(errors.join('\n'));
  process.exit(1);
}
console.log(Object.keys(names).length);
EOF
check_dir="$CACHE/check"
mkdir -p "$check_dir"
rm -f "$check_dir"/objects.*
renders=()
for overlay in deploy/kubernetes/overlays/*/; do
  environment="$(basename "$overlay")"
  kubectl kustomize "$overlay" > "$RUN_DIR/$environment.yaml" 2> "$RUN_DIR/kustomize.log" || { cat "$RUN_DIR/kustomize.log"; fail "kubectl kustomize $overlay"; }
  renders+=("$environment=$RUN_DIR/$environment.yaml")
done
[ "${#renders[@]}" -ge 2 ] || fail "expected overlays production and staging under deploy/kubernetes/overlays"
objects="$(node "$RUN_DIR/to-typescript.mjs" "$CACHE" "$check_dir" "${renders[@]}")" || fail "the rendered overlays are not Kubernetes objects (above)"
cat > "$check_dir/tsconfig.json" << 'EOF'
{
  "compilerOptions": {
    "strict": true,
    "noEmit": true,
    "target": "es2022",
    "module": "esnext",
    "moduleResolution": "bundler",
    "types": []
  },
  "files": ["objects.ts"]
}
EOF
if ! node_modules/.bin/tsc -p "$check_dir/tsconfig.json" --pretty false > "$RUN_DIR/tsc.log" 2>&1; then
  # objects.ts(LINE,COLUMN): error TS...: message -> the object on that line, the message, and the
  # JSON around that column (where the field is).
  node -e '
    const fs = require("fs");
    const names = require(process.argv[1]);
    const source = fs.readFileSync(process.argv[2], "utf8").split("\n");
    for (const line of fs.readFileSync(process.argv[3], "utf8").split("\n")) {
      const match = /^.*objects\.ts\((\d+),(\d+)\): error TS\d+: (.*)$/.exec(line);
      if (!match) {
        if (line.trim()) console.log(`deploy:     ${line.trim()}`);
        continue;
      }
      const [, row, column, message] = match;
      const near = source[row - 1].slice(Math.max(0, column - 60), Number(column) + 40);
      console.log(`deploy:   ${names[row] ?? "line " + row}: ${message}\ndeploy:     near: ...${near}...`);
    }' "$check_dir/objects.json" "$check_dir/objects.ts" "$RUN_DIR/tsc.log"
  fail "a rendered Kubernetes object does not match the Kubernetes API types (above)"
fi
say "kubernetes: ${#renders[@]} overlays rendered, $objects objects valid against the Kubernetes API types ($KUBERNETES_TYPES)"

# --- 3. metric names used by the rules and the dashboard, against the running service ---------------
npm run --silent build > "$RUN_DIR/build.log" 2>&1 || { tail -n 30 "$RUN_DIR/build.log"; fail "npm run build"; }
port="$(node --import tsx harness/free-port.ts)"
metrics_port="$(node --import tsx harness/free-port.ts)"
[ "$port" != "$metrics_port" ] || metrics_port="$(node --import tsx harness/free-port.ts)"
data_dir="$RUN_DIR/data"
database_url=""
if command -v psql > /dev/null && psql -h "$PGHOST" -p "$PGPORT" -U postgres -qtAc 'SELECT 1' > /dev/null 2>&1; then
  database="pets_deploy_check_$$"
  psql -h "$PGHOST" -p "$PGPORT" -U postgres -qc "CREATE DATABASE $database" > /dev/null
  database_url="postgres://postgres@$PGHOST:$PGPORT/$database"
fi
# REDIS_URL as the caller set it (CI: its Redis); unset, a closed port: the limiter then falls back
# to memory, and its fallback gauge is exported all the same.
redis_url="${REDIS_URL:-redis://127.0.0.1:$(node --import tsx harness/free-port.ts)}"
# The primary named as its own replica, so that the replica metrics are exported: not in recovery,
# it never takes a read, and every read stays on the primary. Usage webhooks and the hourly export on
# (to a closed port; no event occurs), so that their metrics are exported too.
PORT="$port" METRICS_PORT="$metrics_port" DATA_DIR="$data_dir" DATABASE_URL="$database_url" REDIS_URL="$redis_url" \
  DATABASE_REPLICA_URLS="$database_url" REDIS_KEY_PREFIX="deploy-check:$$:" LOG_LEVEL=warn USAGE_EXPORT=hourly \
  WEBHOOK_URL="http://127.0.0.1:$(node --import tsx harness/free-port.ts)/hooks" WEBHOOK_SECRET="deploy-check-secret-0123456789abcdef" \
  node dist/server.js > "$RUN_DIR/server.log" 2>&1 &
server=$!
for _ in $(seq 60); do
  curl -fsS "http://127.0.0.1:$port/readyz" > /dev/null 2>&1 && break
  kill -0 "$server" 2> /dev/null || { tail -n 20 "$RUN_DIR/server.log"; fail "the server exited at start"; }
  sleep 0.5
done
curl -fsS "http://127.0.0.1:$port/healthz" > /dev/null || { tail -n 20 "$RUN_DIR/server.log"; fail "the server did not answer /healthz"; }
if [ -n "$database_url" ]; then
  key="$(DATABASE_URL="$database_url" node dist/cli/keys.js create --plan free --name deploy-check 2> /dev/null < /dev/null | tail -n 1)"
else
  for _ in $(seq 20); do grep -q '^  psk_' "$RUN_DIR/server.log" && break; sleep 0.5; done
  key="$(sed -n 's/^  \(psk_[A-Za-z0-9_-]*\)$/\1/p' "$RUN_DIR/server.log" | head -n 1)"
fi
[ -n "$key" ] || fail "no API key to exercise the server with"
api() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
created="$(api -X POST "http://127.0.0.1:$port/v1/pets" -H "Authorization: Bearer $key" -H 'content-type: application/json' -d '{"name":"Deploy","categoryId":1}')"
listed="$(api -H "Authorization: Bearer $key" "http://127.0.0.1:$port/v1/pets")"
unknown="$(api -H 'Authorization: Bearer psk_unknown' "http://127.0.0.1:$port/v1/pets")"
[ "$created" = 201 ] && [ "$listed" = 200 ] && [ "$unknown" = 401 ] || fail "the server answered POST $created, GET $listed, unknown key $unknown (wanted 201, 200, 401)"
curl -fsS "http://127.0.0.1:$metrics_port/metrics" > "$RUN_DIR/metrics.txt" || fail "no /metrics on the metrics port"
kill -TERM "$server"
wait "$server" || fail "the server did not exit cleanly on SIGTERM"
server=""

cat > "$RUN_DIR/metric-names.mjs" << 'EOF'
// Prints `file: name` for every metric name a PromQL expression in the rules or the dashboard uses.
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
const [cache, rulesFile, dashboardFile] = process.argv.slice(2);
const YAML = createRequire(join(cache, 'node_modules', 'x.js'))('yaml');
const KEYWORDS = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'bool', 'and', 'or', 'unless', 'offset', 'inf', 'nan']);
function metricNames(expression) {
  const names = new Set();
  let text = expression
    .replace(/label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)[^)]*\)/g, (_, name) => (names.add(name), ''))
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""')
    .replace(/\{[^}]*\}/g, '') // label matchers
    .replace(/\[[^\]]*\]/g, '') // ranges and subqueries
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, '') // label lists
    .replace(/\$\{?[A-Za-z_][A-Za-z0-9_]*\}?/g, ''); // dashboard variables ($__rate_interval, ${instance})
  for (const match of text.matchAll(/([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?/g)) {
    const [, name, call] = match;
    if (call || KEYWORDS.has(name.toLowerCase()) || /^[0-9]/.test(name)) continue;
    // Durations and numbers (5m, 1e3) are not names: only what starts a token counts.
    const before = text[match.index - 1];
    if (before && /[0-9.]/.test(before)) continue;
    names.add(name);
  }
  return names;
}
const used = [];
for (const group of YAML.parse(readFileSync(rulesFile, 'utf8')).groups) {
  for (const rule of group.rules) for (const name of metricNames(rule.expr)) used.push(`${rulesFile}: ${name}`);
}
const dashboard = JSON.parse(readFileSync(dashboardFile, 'utf8'));
// Queries are in panels' targets (expr) and in the query variables (query, or query.query).
const visit = (node) => {
  if (Array.isArray(node)) return node.forEach(visit);
  if (!node || typeof node !== 'object') return;
  const queries = [node.expr];
  if (node.type === 'query') queries.push(typeof node.query === 'string' ? node.query : node.query?.query);
  for (const query of queries.filter((query) => typeof query === 'string')) {
    for (const name of metricNames(query)) used.push(`${dashboardFile}: ${name}`);
  }
  Object.values(node).forEach(visit);
};
visit(dashboard);
console.log([...new Set(used)].join('\n'));
EOF
node "$RUN_DIR/metric-names.mjs" "$CACHE" deploy/prometheus/alerts.yml deploy/grafana/pet-store.json > "$RUN_DIR/used.txt" || fail "could not read the rules or the dashboard"
# What the service exports, from its # TYPE lines (a labelled metric with no series yet has one too):
# a counter or gauge by its name; a histogram as name_bucket, name_sum and name_count; a summary as
# name, name_sum and name_count. So a _bucket/_sum/_count name is accepted only on the right type.
awk '$1 == "#" && $2 == "TYPE" {
  if ($4 == "histogram") { print $3 "_bucket"; print $3 "_sum"; print $3 "_count" }
  else if ($4 == "summary") { print $3; print $3 "_sum"; print $3 "_count" }
  else print $3
}' "$RUN_DIR/metrics.txt" | sort -u > "$RUN_DIR/exported.txt"
[ "$(wc -l < "$RUN_DIR/exported.txt")" -gt 10 ] || fail "the service's /metrics listed almost nothing"
# Exported only on PostgreSQL (src/platform/observability/metrics.ts; the replicas' with DATABASE_REPLICA_URLS): checked when the server ran on it.
postgres_only="db_pool_connections
db_reads_total
db_replica_lag_seconds
db_replica_available
db_replica_refused"
missing=""
not_checked=""
while IFS= read -r line; do
  name="${line##*: }"
  grep -qxF "$name" "$RUN_DIR/exported.txt" && continue
  if [ -z "$database_url" ] && grep -qxF "$name" <<< "$postgres_only"; then
    not_checked="$not_checked $name"
    continue
  fi
  missing="$missing\n  $line"
done < "$RUN_DIR/used.txt"
[ -z "$missing" ] || fail "metric names the running service does not export:$(echo -e "$missing")"
used_count="$(cut -d' ' -f2 "$RUN_DIR/used.txt" | sort -u | wc -l)"
unchecked_count="$(echo $not_checked | tr ' ' '\n' | sort -u | grep -c . || true)"
where="on PostgreSQL"
[ -n "$database_url" ] || where="on the embedded database"
say "metrics: $((used_count - unchecked_count)) of $used_count metric names in the rules and the dashboard checked: all exported by the running server ($where, $(wc -l < "$RUN_DIR/exported.txt") names)"
[ -z "$not_checked" ] || say "NOT CHECKED (no PostgreSQL reachable at $PGHOST:$PGPORT; exported on PostgreSQL only): $(echo $not_checked | tr ' ' '\n' | sort -u | tr '\n' ' ')"

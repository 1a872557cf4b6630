# Sourced by compose-check.sh, and by test/podman-runtime.test.ts: which OCI runtime podman can use
# here, and setting it in containers.conf.

# The cgroup layout as crun tells it apart (the filesystem at /sys/fs/cgroup, then at its unified/):
# unified (cgroup2 alone), hybrid (v1 controllers plus a cgroup2 mount at /sys/fs/cgroup/unified) or
# legacy (v1 alone). Of several mounts on one point, the last listed is the one on top.
cgroup_mode() {
  awk '{ for (i = 7; i < NF && $i != "-"; i++); type[$5] = $(i + 1) }
    END { print type["/sys/fs/cgroup"] == "cgroup2" ? "unified" : type["/sys/fs/cgroup/unified"] == "cgroup2" ? "hybrid" : "legacy" }' \
    "${1:-/proc/self/mountinfo}"
}

# Sets [engine] runtime in a containers.conf. A new [engine] table goes before every other table:
# compose-check.sh appends keys of [containers] to the end of the file.
set_runtime() {
  local conf="$1" runtime="$2"
  if grep -q '^runtime *=' "$conf" 2> /dev/null; then
    sed -i "s/^runtime *=.*/runtime = \"$runtime\"/" "$conf"
  elif grep -q '^\[engine\]' "$conf" 2> /dev/null; then
    sed -i "/^\[engine\]/a runtime = \"$runtime\"" "$conf"
  else
    { printf '[engine]\nruntime = "%s"\n\n' "$runtime" && { [ ! -f "$conf" ] || cat "$conf"; }; } > "$conf.new"
    mv "$conf.new" "$conf"
  fi
}

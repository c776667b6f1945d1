#!/usr/bin/env bash
# The sandbox image, built and run here with podman (issue 14 item 4): build-image from
# BUILD_DIR (cached by its inputs; podman's layer cache rebuilds only the switchboard layer
# for a new build), start it with a fresh SANDBOX_TOKEN, and drive sandboxd inside it from
# the executor outside — `switchboard exec --backend sandbox --sandbox-url …` — for a command,
# the toolchains' versions, a deadline (124), a stop, and the build check; the walls attacks
# (deploy/tests/image_walls_spec.lua, the same as tests/e2e/walls_spec.lua's) against it; an
# instance's death healing (`kill -9 -1`, then a memory-limit kill: each followed by the
# thread's next command finding its files, and sandboxd's log naming the reason); then the
# HEALTHCHECK and a clean TERM; the same heal in the Kubernetes manifest's shape after it. The
# container runs walled, with the flags docs/deploy.md gives ("The wall in a container":
# sb_walls_flags in deploy/sandbox/podman-env), never --no-walls. Skipped (77) with the reason
# when podman cannot run here.
#   deploy/tests/image_smoke.sh BUILD_DIR
. "$(dirname "$0")/lib.sh"
build="$(cd "${1:?BUILD_DIR}" && pwd)"
need_root "the image smoke test"
command -v podman >/dev/null || skip "podman is not installed (scripts/bootstrap installs podman and runc)"
command -v debootstrap >/dev/null || skip "debootstrap is not installed (scripts/bootstrap installs it)"
. "$DEPLOY_DIR/sandbox/podman-env"
podman_setup
sb_podman info >/dev/null 2>&1 || skip "podman cannot run containers here: $(sb_podman info 2>&1 | tail -1)"

# A tag of this build tree's own: several checkouts on one machine build at once.
tag="$("$DEPLOY_DIR/sandbox/build-image" "$build" \
  "localhost/switchboard-sandbox:test-$(echo "$build" | sha256sum | cut -c1-12)")"
ok "the image builds: $tag"

name="switchboard-smoke-$$-$RANDOM"
uname="$name-userns"
export SANDBOX_TOKEN="smoke-$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')"
work="$(mktemp -d)"
cleanup() {
  local n
  for n in "$name" "$uname"; do sb_podman rm -f -v -t 0 "$n" >/dev/null 2>&1 || true; sb_walls_release "$n"; done
  rm -rf "$work"
}
trap cleanup EXIT
[ -e /sys/fs/cgroup/memory/cgroup.procs ] \
  || fail "the walls' flags here delegate cgroup v1 controllers; this host has no cgroup v1 memory controller (docs/deploy.md)"
mapfile -t walls_flags < <(sb_walls_flags "$name") || fail "cannot make the delegated cgroup subtree"
# A small memory limit, so that filling /dev/shm reaches it in a moment (the heal below, as
# package_systemd.sh gives its sandboxd): a policy overlay bound over the image's own
# isolation.lua, its lines kept — the way an operator sets a policy in a read-only container.
# loop_devices_kept = 0: no device kept in the pool, so every retired instance's loop device is
# given back and the removal is seen working under the container's own privileges (below).
MEMORY_OVERLAY=$'memory_bytes = 96 * MiB\nloop_devices_kept = 0'
chmod 0755 "$work"
sb_podman run --rm --entrypoint cat "$tag" /etc/switchboard/policies/isolation.lua >"$work/isolation-root.lua" \
  || fail "cannot read the image's own policies/isolation.lua"
grep -q '^hostname = ""$' "$work/isolation-root.lua" || fail "the image's isolation.lua has no hostname line: $(cat "$work/isolation-root.lua")"
printf '%s\n' "$MEMORY_OVERLAY" >>"$work/isolation-root.lua"
chmod 0644 "$work/isolation-root.lua"
echo "podman run ${walls_flags[*]} -v …/isolation.lua:/etc/switchboard/policies/isolation.lua:ro -e SANDBOX_TOKEN $tag"
# -e NAME without a value: the token goes from this environment, never through argv.
# (podman says it cannot schedule the HEALTHCHECK without systemd; it is run by hand below)
sb_podman run -d --name "$name" "${walls_flags[@]}" -v "$work/isolation-root.lua:/etc/switchboard/policies/isolation.lua:ro" \
  -e SANDBOX_TOKEN -p 127.0.0.1::8080 "$tag" >/dev/null 2>"$work/run.log" || fail "podman run $tag: $(cat "$work/run.log")"
port="$(sb_podman port "$name" 8080 | head -1 | sed 's/.*://')"
[ -n "$port" ] || fail "no published port for 8080"
url="http://127.0.0.1:$port"

healthz() {
  python3 -c 'import os, sys, urllib.request as u
r = u.urlopen(u.Request(sys.argv[1] + "/healthz", headers={"authorization": "Bearer " + os.environ["SANDBOX_TOKEN"]}), timeout=4)
print(r.read().decode())' "$url" 2>/dev/null
}
for _ in $(seq 1 120); do health="$(healthz)" && break; sleep 0.5; done
[ -n "${health:-}" ] || { sb_podman logs "$name" >&2; fail "sandboxd in the container never answered /healthz"; }
ok "sandboxd answers /healthz inside the container"
# (the log read whole first: grep -q ending the pipe early fails it under pipefail)
sb_podman logs "$name" >"$work/logs" 2>&1 || true
grep -q '"walls":"cgroup v1"' "$work/logs" \
  || { cat "$work/logs" >&2; fail "sandboxd in the container is not walled (no walls=\"cgroup v1\" on its listening line)"; }
ok "sandboxd in the container runs walled (cgroup v1, in the delegated subtree)"

sx() { "$build/switchboard" exec --backend sandbox --sandbox-url "$url" --thread smoke "$@"; }

# ---- an instance's death heals: the next command finds its files --------------------------
# The cases package_systemd.sh runs under systemd, here in the container as shipped: in a thread
# of its own each, a file written; then `kill -9 -1` (every process of the instance, its init
# and spawner too), or /dev/shm filled past the overlay's memory limit (the kernel kills the
# command, and the tmpfs keeps the memory full). sandboxd retires the instance, logging why
# (sandboxd.instance_retired reason=dead, reason=memory), and the thread's next command runs in
# a fresh instance on the same /workspace files.
#   heal CONTAINER
retired() { # CONTAINER REASON: how many sandboxd.instance_retired lines of REASON its log holds
  sb_podman logs "$1" >"$work/heal-logs" 2>&1 || true
  grep -c "\"event\":\"sandboxd.instance_retired\".*\"reason\":\"$2\"" "$work/heal-logs" || true
}
heal() {
  local c="$1" n=0 reason attack thread before out status
  for attack in "dead:kill -9 -1; sleep 5" "memory:head -c 1G /dev/zero > /dev/shm/fill"; do
    n=$((n + 1)) reason="${attack%%:*}" attack="${attack#*:}" thread="heal-$n"
    out="$("$build/switchboard" exec --backend sandbox --sandbox-url "$url" --thread "$thread" -- \
      "echo kept-$n > kept.txt && echo started" 2>"$work/err")" || fail "$c: the thread's first command: $out $(cat "$work/err")"
    expect_eq started "$out" "$c: a thread's first command writes kept.txt"
    before="$(retired "$c" "$reason")"
    set +e
    out="$("$build/switchboard" exec --backend sandbox --sandbox-url "$url" --thread "$thread" -- "$attack" 2>&1)"; status=$?
    set -e
    [ "$status" != 0 ] || fail "$c: \`$attack\` exited 0: $out"
    for _ in $(seq 1 300); do [ "$(retired "$c" "$reason")" -gt "$before" ] && break; sleep 0.2; done
    [ "$(retired "$c" "$reason")" -gt "$before" ] \
      || fail "$c: after \`$attack\` (exit $status: $out) sandboxd logged no sandboxd.instance_retired reason=$reason: $(grep instance_ "$work/heal-logs" | tail -5)"
    ok "$c: \`$attack\` ended the instance (exit $status); sandboxd logged sandboxd.instance_retired reason=$reason"
    out="$("$build/switchboard" exec --backend sandbox --sandbox-url "$url" --thread "$thread" -- \
      'cat kept.txt' 2>"$work/err")" || fail "$c: after \`$attack\` the thread's next command failed: $out $(cat "$work/err")
$(tail -5 "$work/heal-logs")"
    expect_eq "kept-$n" "$out" "$c: after \`$attack\` the thread's next command runs in a fresh instance on the same files"
  done
}

# The loop devices of the instances the heal retired, given back by sandboxd with exactly the
# container's privileges (docs/isolation.md "Loop devices given back"): walls.loop_removed for
# each, never walls.loop_left.
#   loops_given_back CONTAINER
loops_given_back() {
  local c="$1" removed=0
  for _ in $(seq 1 150); do
    sb_podman logs "$c" >"$work/loop-logs" 2>&1 || true
    removed="$(grep -c '"event":"walls.loop_removed"' "$work/loop-logs" || true)"
    [ "$removed" -ge 2 ] && break
    sleep 0.2
  done
  [ "$removed" -ge 2 ] \
    || fail "$c: the retired instances' loop devices were not given back (walls.loop_removed ×$removed): $(grep -E 'walls\.loop|instance_retired' "$work/loop-logs" | tail -5)"
  if grep -q '"event":"walls.loop_left"' "$work/loop-logs"; then
    fail "$c: a loop device was left: $(grep '"event":"walls.loop_left"' "$work/loop-logs" | head -3)"
  fi
  ok "$c: the retired instances' loop devices were given back (walls.loop_removed ×$removed, none left)"
}

out="$(sx -- 'echo "in $(cat /etc/debian_version)"' 2>"$work/err")" || fail "exec through the sandbox: $out $(cat "$work/err")"
expect_match '^in 12\.' "$out" "a command runs through the executor in the Debian 12 container"

versions="$(sx -- 'node --version; npm --version; pnpm --version; git --version; gh --version | head -1; python3 --version; command -v docker' 2>"$work/err")" \
  || fail "versions: $versions $(cat "$work/err")"
pin() { sed -n "s/^ARG $1=//p" "$DEPLOY_DIR/sandbox/Containerfile"; }
expect_match "^v$(pin NODE_VERSION)\$" "$(echo "$versions" | sed -n 1p)" "node is the pinned $(pin NODE_VERSION)"
expect_match "^$(pin NPM_VERSION)\$" "$(echo "$versions" | sed -n 2p)" "npm is the pinned $(pin NPM_VERSION)"
expect_match "^$(pin PNPM_VERSION)\$" "$(echo "$versions" | sed -n 3p)" "pnpm is the pinned $(pin PNPM_VERSION)"
expect_match '^git version 2\.39\.5' "$(echo "$versions" | sed -n 4p)" "git is Debian's pinned 2.39.5"
expect_match '^gh version 2\.23\.0' "$(echo "$versions" | sed -n 5p)" "gh is Debian's pinned 2.23.0"
expect_match '^Python 3\.11\.2' "$(echo "$versions" | sed -n 6p)" "python3 is Debian's pinned 3.11.2"
expect_eq "/usr/local/bin/docker" "$(echo "$versions" | sed -n 7p)" "docker on PATH is the lazy wrapper"

t0=$(date +%s)
set +e
out="$(sx --timeout-ms 1500 -- 'sleep 60' 2>&1)"; status=$?
set -e
expect_eq 124 "$status" "a command past its deadline exits 124 through the container"
[ $(( $(date +%s) - t0 )) -lt 40 ] || fail "the deadline took $(( $(date +%s) - t0 )) s"
ok "the deadline ended the command long before its 60 s"

# A stop: TERM to the executor ends the request; sandboxd kills the command in the container.
"$build/switchboard" exec --backend sandbox --sandbox-url "$url" --thread smoke -- 'sleep 300; echo smoke-stop-marker' >/dev/null 2>&1 &
client=$!
for _ in $(seq 1 100); do
  sb_podman exec "$name" pgrep -f smoke-stop-marker >/dev/null 2>&1 && break
  sleep 0.2
done
sb_podman exec "$name" pgrep -f smoke-stop-marker >/dev/null 2>&1 || fail "the long command never started in the container"
kill -TERM "$client"
set +e; wait "$client"; status=$?; set -e
expect_eq 130 "$status" "TERM stops the executor (exit 130)"
for _ in $(seq 1 150); do
  sb_podman exec "$name" pgrep -f smoke-stop-marker >/dev/null 2>&1 || break
  sleep 0.2
done
if sb_podman exec "$name" pgrep -f smoke-stop-marker >/dev/null 2>&1; then fail "the stopped command still runs in the container"; fi
ok "the stopped command is gone from the container"

own="$("$build/switchboard" version --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["commit"])')"
theirs="$(echo "$health" | python3 -c 'import json, sys; print(json.load(sys.stdin)["build"]["commit"])')"
expect_eq "$own" "$theirs" "the container's sandboxd is this build (/healthz build.commit)"
log="$(sx -- true 2>&1)"
# a here-string, not a pipe: under pipefail a pipe's early end could hide the skew
if grep -q 'version-skew' <<<"$log"; then fail "the executor saw skew against its own image: $log"; fi
ok "the executor logs no version skew against the image of its own build"

heal "$name"
loops_given_back "$name"

# The walls attacks, from a command inside the container against the sandboxd beside it.
server_pid="$(sb_podman exec "$name" pgrep -o -x switchboard)" || fail "no sandboxd process in the container"
(cd "$REPO_DIR" && SB_BUILD_DIR="$build" SB_IMAGE_URL="$url" SB_IMAGE_PID="$server_pid" \
   timeout 600 busted --output=utfTerminal deploy/tests/image_walls_spec.lua) >"$work/walls.log" 2>&1 \
  || { cat "$work/walls.log" >&2; fail "a walls attack succeeded inside the container (deploy/tests/image_walls_spec.lua)"; }
ok "every walls attack fails inside the container: $(grep -o '[0-9]* success[a-z]*' "$work/walls.log")"

sb_podman healthcheck run "$name" >/dev/null 2>&1 || fail "the image's HEALTHCHECK fails on a running container"
ok "the HEALTHCHECK passes"

sb_podman stop -t 30 "$name" >/dev/null 2>&1
expect_eq 0 "$(sb_podman inspect --format '{{.State.ExitCode}}' "$name")" "TERM ends the container cleanly (sandboxd exits 0 under tini)"

# ---- the Kubernetes manifest's shape: the container in a user namespace of its own ----------
# (hostUsers: false; sb_walls_userns_flags): no MKNOD, the tun node bound in, the manifest's
# own policy overlay (its ConfigMap: instance uids the namespace maps). A block of host uids
# of this run's own, above every walled server's default.
base=$(( 3000000 + 65536 * (RANDOM % 256) ))
sed -n '/^  isolation.lua: |$/,/^---$/s/^    //p' "$DEPLOY_DIR/kubernetes/sandboxd.yaml" >"$work/isolation.lua"
grep -q '^uid_base = ' "$work/isolation.lua" || fail "no isolation.lua overlay in deploy/kubernetes/sandboxd.yaml's ConfigMap"
printf '%s\n' "$MEMORY_OVERLAY" >>"$work/isolation.lua" # (the heal's memory limit, as above)
chmod 0644 "$work/isolation.lua"
mkdir "$work/dev" && chmod 0755 "$work" "$work/dev"
mapfile -t userns_flags < <(sb_walls_userns_flags "$uname" "$work/dev" "$base") || fail "cannot prepare the user namespace's flags"
echo "podman run ${userns_flags[*]} -v …/isolation.lua:/etc/switchboard/policies/isolation.lua:ro -e SANDBOX_TOKEN $tag"
sb_podman run -d --name "$uname" "${userns_flags[@]}" -v "$work/isolation.lua:/etc/switchboard/policies/isolation.lua:ro" \
  -e SANDBOX_TOKEN -p 127.0.0.1::8080 "$tag" >/dev/null 2>"$work/run-userns.log" || fail "podman run (user namespace): $(cat "$work/run-userns.log")"
port="$(sb_podman port "$uname" 8080 | head -1 | sed 's/.*://')"
[ -n "$port" ] || fail "no published port for 8080 (user namespace)"
url="http://127.0.0.1:$port"
health=""
for _ in $(seq 1 120); do health="$(healthz)" && break; sleep 0.5; done
[ -n "$health" ] || { sb_podman logs "$uname" >&2; fail "sandboxd in the user-namespace container never answered /healthz"; }
expect_match "^0 +$base +65536\$" "$(sb_podman exec "$uname" cat /proc/self/uid_map | tr -s ' ' | sed 's/^ //')" \
  "the container's root is host uid $base, in a user namespace of its own"
sb_podman logs "$uname" >"$work/logs" 2>&1 || true
grep -q '"walls":"cgroup v1"' "$work/logs" \
  || { cat "$work/logs" >&2; fail "sandboxd in the user-namespace container is not walled"; }
ok "sandboxd in a user namespace of its own runs walled (its walls proof made an instance with pasta's network)"
net="$(sx -- 'id -u; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d " " | sort | tr "\n" " "; awk "\$2 == \"00000000\" { print \"default via \" \$1 }" /proc/net/route' 2>"$work/err")" \
  || fail "a command in the user-namespace container: $net $(cat "$work/err")"
expect_match '^1000 eth0 lo default via eth0$' "$(echo $net)" \
  "a command runs there with a network of its own through pasta (the bound tun node; no MKNOD)"
heal "$uname"
server_pid="$(sb_podman exec "$uname" pgrep -o -x switchboard)" || fail "no sandboxd process in the user-namespace container"
(cd "$REPO_DIR" && SB_BUILD_DIR="$build" SB_IMAGE_URL="$url" SB_IMAGE_PID="$server_pid" \
   timeout 600 busted --output=utfTerminal deploy/tests/image_walls_spec.lua) >"$work/walls-userns.log" 2>&1 \
  || { cat "$work/walls-userns.log" >&2; fail "a walls attack succeeded inside the user-namespace container"; }
ok "every walls attack fails inside the user-namespace container: $(grep -o '[0-9]* success[a-z]*' "$work/walls-userns.log")"
sb_podman stop -t 30 "$uname" >/dev/null 2>&1
expect_eq 0 "$(sb_podman inspect --format '{{.State.ExitCode}}' "$uname")" "TERM ends the user-namespace container cleanly"
echo "$checks passed, 0 failed"

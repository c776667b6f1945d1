#!/usr/bin/env bash
# The installed bot and its secrets (issue 21), the stage of deploy/tests/package.sh that
# starts what the package installed: ROOT is a Debian 12 root the package was installed into
# (package.sh makes one; this script runs alone against a kept one too). It puts random
# secrets into ROOT's /etc/switchboard/bot.env, then deploy/tests/package_bot.inner.sh, in
# mount, PID and network namespaces of its own (its network: loopback and a veth with a
# default route, the routable interface pasta copies into each instance), starts
# switchboard-sandboxd and switchboard-bot from their units' ExecStart= lines,
# EnvironmentFile=s, User= (sandboxd: root, with the unit's cut capability bounding set; the
# bot: switchboard) and directories, each with the installed root as its / (pivot_root, not
# chroot: the kernel refuses user namespaces to a chrooted process, and sandboxd's walls are
# user namespaces), and sends three mentions
# that read the bot's environment (/proc/$PPID/environ, /proc/*/environ, ps eww). Each must
# come back on a card that says it ran walled in the sandbox, and no secret (the Slack tokens,
# the signing secret, the model key, the GitHub token, the SANDBOX_TOKEN) may reach the Slack
# stand-in, either log, or any file the bot keeps. WORK keeps what each place saw.
#   deploy/tests/package_bot.sh ROOT WORK
. "$(dirname "$0")/lib.sh"
root="$(cd "${1:?ROOT}" && pwd)" work="$(mkdir -p "${2:?WORK}" && cd "$2" && pwd)"
need_root "the installed bot's stage"
[ -x "$root/usr/bin/switchboard" ] || fail "$root has no installed /usr/bin/switchboard"
# Run again on the same root: what an earlier run kept (the services' state, which the units'
# directories recreate) and the lines it appended go first.
rm -rf "$root/var/lib/switchboard" "$root/var/lib/switchboard-sandboxd" "$root/var/cache/switchboard"
sed -i '/^\(SLACK_BOT_TOKEN\|SLACK_APP_TOKEN\|SLACK_SIGNING_SECRET\|SLACK_API_URL\|ANTHROPIC_API_KEY\|GH_TOKEN\)=/d' \
  "$root/etc/switchboard/bot.env"
sandbox_token="$(sed -n 's/^SANDBOX_TOKEN=//p' "$root/etc/switchboard/sandboxd.env")"
[ -n "$sandbox_token" ] || fail "sandboxd.env holds no SANDBOX_TOKEN"

rnd() { od -An -tx1 -N12 /dev/urandom | tr -d ' \n'; }
export SB_SECRET_BOT="xoxb-$(rnd)" SB_SECRET_APP="xapp-$(rnd)" SB_SECRET_SIGNING="$(rnd)" \
       SB_SECRET_MODEL="sk-ant-$(rnd)" SB_SECRET_GH="ghp_$(rnd)"
{ printf 'SLACK_BOT_TOKEN=%s\nSLACK_APP_TOKEN=%s\nSLACK_SIGNING_SECRET=%s\n' "$SB_SECRET_BOT" "$SB_SECRET_APP" "$SB_SECRET_SIGNING"
  printf 'ANTHROPIC_API_KEY=%s\nGH_TOKEN=%s\n' "$SB_SECRET_MODEL" "$SB_SECRET_GH"
} >>"$root/etc/switchboard/bot.env"

# What the kernel must give the stage, else it is skipped with the reason: user namespaces
# (sandboxd's walls), a veth pair (the stage's namespace's routable interface, for pasta), the
# cgroup v1 controllers it delegates (the v2 form is not written here).
unshare --user true 2>/dev/null || skip "this kernel gives no user namespaces, which sandboxd's walls are made of"
unshare --net sh -c 'ip link add d0 type veth peer name d1' 2>/dev/null \
  || skip "this kernel cannot make a veth pair, the stage's stand-in for a host's network interface (pasta needs one)"
[ -e /sys/fs/cgroup/memory/cgroup.procs ] \
  || skip "the stage delegates cgroup v1 controllers (memory, pids, cpu); this host has no cgroup v1 memory controller"
# The units' Delegate=yes: a cgroup subtree for each service (cgroup v1: memory, pids, cpu),
# below this script's own cgroup (so whatever bounds this test bounds them too), made by root
# and handed to the unit's User= (root when it names none), as systemd does; the inner script
# moves each service into its own.
own_cgroup() { awk -F: -v c="$1" '{ n = split($2, a, ","); for (i = 1; i <= n; i++) if (a[i] == c) print $3 }' /proc/self/cgroup; }
cgroup_bases=()
for c in memory pids cpu; do cgroup_bases+=("/sys/fs/cgroup/$c$(own_cgroup "$c" | sed 's|/$||')/switchboard-package-$$"); done
release_cgroups() { # deepest first: a killed sandboxd leaves its instances' cgroups behind
  local b
  for b in "${cgroup_bases[@]}"; do [ -d "$b" ] && find "$b" -depth -type d -exec rmdir {} + 2>/dev/null; done
  return 0
}
trap release_cgroups EXIT
for unit in switchboard-sandboxd.service switchboard-bot.service; do
  user="$(sed -n 's/^User=//p' "$root/lib/systemd/system/$unit" | grep . || echo root)"
  ids="$(awk -F: -v u="$user" '$1 == u { print $3 ":" $4 }' "$root/etc/passwd")"
  [ -n "$ids" ] || fail "the installed root has no user $user ($unit's User=)"
  for b in "${cgroup_bases[@]}"; do
    mkdir -p "$b/$unit" && chown -R "$ids" "$b/$unit" || fail "cannot delegate the cgroup $b/$unit"
  done
done
export SB_CGROUP_BASES="${cgroup_bases[*]}"

for f in bot.log bot-refused.log sandboxd.log standin-state.json kept.txt; do rm -f "$work/$f"; done
# Every place is searched even when the stage failed (a leak is the first thing to report).
stage=0
timeout 600 unshare --mount --pid --net --fork --kill-child --propagation private \
  bash "$DEPLOY_DIR/tests/package_bot.inner.sh" "$root" "$work" "$REPO_DIR" >"$work/bot-stage.log" 2>&1 || stage=$?
cat "$work/bot-stage.log"
checks=$((checks + $(grep -c '^ok ' "$work/bot-stage.log")))
secrets=("$SB_SECRET_BOT" "$SB_SECRET_APP" "$SB_SECRET_SIGNING" "$SB_SECRET_MODEL" "$SB_SECRET_GH" "$sandbox_token")
for place in standin-state.json bot.log bot-refused.log sandboxd.log kept.txt; do
  if [ ! -s "$work/$place" ]; then
    [ "$stage" != 0 ] || fail "the stage left no $place to search"
    continue
  fi
  for s in "${secrets[@]}"; do
    ! grep -qF -- "$s" "$work/$place" || fail "a secret of the bot (${s:0:8}…) reached $place"
  done
  ok "no secret of the bot in $place"
done
[ "$stage" = 0 ] || fail "the installed bot's stage (exit $stage; log above)"
echo "$checks passed, 0 failed (the installed bot's stage)"

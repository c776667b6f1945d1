#!/usr/bin/env bash
# The Debian package under a real systemd (issue 38), the package test of record for what the
# units do: a Debian 12 container whose PID 1 is systemd (podman --systemd=always; the image is
# make-base's debootstrap root plus systemd, systemd-sysv, dbus and the package's Depends,
# cached by its inputs' hash), the .deb installed with apt-get, both units started with
# systemctl exactly as shipped (Type=notify, CapabilityBoundingSet=, DevicePolicy=,
# ProtectSystem=, PrivateTmp=, …). Then, against the Slack stand-in inside the container:
# three mentions that read the bot's environment (walled, no secret anywhere), the walls
# attacks against the installed sandboxd (deploy/tests/image_walls_spec.lua), `kill -9 -1` and a
# memory-limit kill each followed by a command that finds its files, `systemctl reload` with an
# overlay change, a 0600 overlay refused by `policy check` with the reason, the journal's lines,
# `systemctl stop` draining a command in flight, and the purge.
#
# The container gets what a host's systemd has and a container's lacks, nothing of the units':
# the capabilities the sandboxd unit's bounding set names (podman's default set lacks SYS_ADMIN,
# MKNOD, SYS_PTRACE), the host's tun and loop devices (--device: the container's own device
# cgroup, inside which the unit's DevicePolicy= is systemd's), an unmasked /proc (bwrap mounts
# one per instance), and its own cgroup v1 controllers writable (podman mounts them read-only
# for a systemd container; systemd then cannot delegate them nor apply DevicePolicy=) —
# remounted read-write in the container's mount namespace, below its own cgroup only
# (--cgroupns=private), and systemd re-executed so it sees them.
#   deploy/tests/package_systemd.sh BUILD_DIR
. "$(dirname "$0")/lib.sh"
build="$(cd "${1:?BUILD_DIR}" && pwd)"
need_root "the package test under systemd"
command -v podman >/dev/null || skip "podman is not installed (scripts/bootstrap installs podman and runc)"
command -v debootstrap >/dev/null || skip "debootstrap is not installed (scripts/bootstrap installs it)"
command -v cpack >/dev/null || skip "cpack is not installed"
. "$DEPLOY_DIR/sandbox/podman-env"
podman_setup
sb_podman info >/dev/null 2>&1 || skip "podman cannot run containers here: $(sb_podman info 2>&1 | tail -1)"
[ -e /sys/fs/cgroup/memory/cgroup.procs ] \
  || skip "this test remounts the container's cgroup v1 controllers; this host has no cgroup v1 memory controller"

work="$(mktemp -d /var/tmp/switchboard-systemd.XXXXXX)"
name="switchboard-systemd-$$-$RANDOM"
# systemd as PID 1 raises fs.file-max and fs.nr_open to the kernel's maximum when it starts and
# at each daemon-reexec, and the unmasked /proc it needs (above) lets it write the host's own
# (these sysctls are not namespaced). The host's values are put back as soon as the container's
# systemd has booted and again on every way out: a test must not change the host (specs beside it
# check the fleet against fs.file-max).
host_file_max="$(cat /proc/sys/fs/file-max)" host_nr_open="$(cat /proc/sys/fs/nr_open)"
restore_host_sysctls() {
  echo "$host_file_max" >/proc/sys/fs/file-max || true
  echo "$host_nr_open" >/proc/sys/fs/nr_open || true
}
cleanup() {
  sb_podman rm -f -t 0 "$name" >/dev/null 2>&1 || true
  restore_host_sysctls
  if [ "${SB_PACKAGE_KEEP:-0}" = 1 ]; then echo "kept: $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
mkdir "$work/in" "$work/empty"
(cd "$build" && cpack -G DEB -B "$work/deb" >"$work/cpack.log" 2>&1) || { cat "$work/cpack.log" >&2; fail "cpack -G DEB"; }
deb="$(ls "$work"/deb/switchboard_*.deb)"
cp "$deb" "$work/in/switchboard.deb"
cp "$REPO_DIR/tests/support/slack_standin.py" "$REPO_DIR/tests/support/watched.py" "$DEPLOY_DIR/tests/slack_mention.py" \
   "$DEPLOY_DIR/tests/slack_restart_mentions.py" "$work/in/"
chmod -R a+rX "$work/in"
ok "cpack -G DEB built $(basename "$deb")"

# ---- the image: Debian 12 with systemd as init and the package's Depends ------------------
# (Depends preinstalled: the container then installs the .deb without reaching the archive;
# git for the walls attacks' own work in a workspace.)
base_key="$("$DEPLOY_DIR/sandbox/make-base")"
depends="$(dpkg-deb -f "$deb" Depends | sed 's/([^)]*)//g; s/,/ /g; s/  */ /g')"
recipe="FROM debian:bookworm-slim
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \\
      systemd systemd-sysv dbus python3 python3-websockets curl iproute2 git $depends \\
 && rm -rf /var/lib/apt/lists/* \\
 && systemctl mask getty@tty1.service console-getty.service systemd-logind.service
"
key="$(printf '%s %s' "$base_key" "$recipe" | sha256sum | cut -c1-16)"
tag="localhost/switchboard-systemd:$key"
if ! sb_podman image exists "$tag"; then
  echo "package_systemd: podman build $tag (about a minute, once per base and Depends)" >&2
  printf '%s' "$recipe" | sb_podman build --network=host -t "$tag" -f - "$work/empty" >"$work/build.log" 2>&1 \
    || { tail -20 "$work/build.log" >&2; fail "podman build of the systemd image"; }
fi
ok "a Debian 12 image with systemd as init: $tag"

sb_podman run -d --name "$name" --systemd=always --cgroupns=private \
  --cap-add SYS_ADMIN,MKNOD,SYS_PTRACE --device /dev/net/tun --device /dev/loop-control \
  --device-cgroup-rule 'b 7:* rwm' --security-opt 'unmask=/proc/*' \
  -v "$work/in:/srv/test:ro" "$tag" /sbin/init >"$work/run.log" 2>&1 || fail "podman run: $(cat "$work/run.log")"
cpid="$(sb_podman inspect -f '{{.State.Pid}}' "$name")"
for c in cpu cpuacct cpuset memory pids devices blkio freezer; do
  nsenter -t "$cpid" -m mount -o remount,bind,rw "/sys/fs/cgroup/$c" || fail "cannot make the container's $c controller writable"
done
in_c() { sb_podman exec "$name" "$@"; }
state=""
for _ in $(seq 1 300); do
  state="$(in_c systemctl is-system-running 2>/dev/null || true)"
  case "$state" in running|degraded) break ;; esac
  sleep 0.2
done
in_c systemctl daemon-reexec || fail "systemctl daemon-reexec"
restore_host_sysctls
expect_eq "$host_file_max" "$(cat /proc/sys/fs/file-max)" "the host's fs.file-max is its own again after the container's systemd raised it"
expect_match '^(running|degraded)$' "$(in_c systemctl is-system-running 2>/dev/null || true)" \
  "systemd is PID 1 in the container and has booted (after: $state)"

in_c env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends /srv/test/switchboard.deb \
  >"$work/apt.log" 2>&1 || { tail -20 "$work/apt.log" >&2; fail "apt-get install ./switchboard.deb"; }
ok "apt-get install ./$(basename "$deb") under systemd"
token_of() { in_c sed -n 's/^SANDBOX_TOKEN=//p' "/etc/switchboard/$1"; }
sandbox_token="$(token_of sandboxd.env)"
expect_match '^[0-9a-f]{64}$' "$sandbox_token" "the postinst generated a SANDBOX_TOKEN in a container too (/run/.containerenv)"
expect_eq "$sandbox_token" "$(token_of bot.env)" "bot.env holds the same SANDBOX_TOKEN"

# ---- the bot's secrets, the Slack stand-in, a small memory limit -------------------------
rnd() { od -An -tx1 -N12 /dev/urandom | tr -d ' \n'; }
bot_token="xoxb-$(rnd)" app_token="xapp-$(rnd)" signing="$(rnd)" model="sk-ant-$(rnd)" gh="ghp_$(rnd)"
secrets=("$bot_token" "$app_token" "$signing" "$model" "$gh" "$sandbox_token")
printf 'SLACK_BOT_TOKEN=%s\nSLACK_APP_TOKEN=%s\n' "$bot_token" "$app_token" >"$work/standin.env"
sb_podman cp "$work/standin.env" "$name:/root/standin.env"
in_c systemd-run --unit slack-standin -p EnvironmentFile=/root/standin.env -p StandardOutput=file:/root/standin.out \
  -p WorkingDirectory=/srv/test /usr/bin/python3 /srv/test/slack_standin.py >/dev/null 2>&1 || fail "systemd-run the Slack stand-in"
port=""
for _ in $(seq 1 300); do port="$(in_c sed -n 's/^READY //p' /root/standin.out 2>/dev/null || true)"; [ -n "$port" ] && break; sleep 0.2; done
[ -n "$port" ] || fail "the Slack stand-in did not start: $(in_c journalctl -u slack-standin -o cat --no-pager | tail -5)"
{ printf 'SLACK_BOT_TOKEN=%s\nSLACK_APP_TOKEN=%s\nSLACK_SIGNING_SECRET=%s\n' "$bot_token" "$app_token" "$signing"
  printf 'ANTHROPIC_API_KEY=%s\nGH_TOKEN=%s\nSLACK_API_URL=http://127.0.0.1:%s/api\n' "$model" "$gh" "$port"
} >"$work/bot.env.add"
sb_podman cp "$work/bot.env.add" "$name:/root/bot.env.add"
in_c sh -c 'cat /root/bot.env.add >>/etc/switchboard/bot.env && rm /root/bot.env.add /root/standin.env'
# A small memory limit, so that filling /dev/shm reaches it in a moment (root's umask 022 here:
# the overlay is readable by the bot's group); loop_devices_kept = 0, so that every retired
# instance's loop device is given back, under the unit's own privileges (checked after the heal).
in_c sh -c 'umask 022; printf "memory_bytes = 96 * MiB\nloop_devices_kept = 0\n" >/etc/switchboard/policies/isolation.lua'

# ---- systemctl start, exactly as shipped ---------------------------------------------------
# Without SANDBOX_URL the bot's agents would go to the local executor's walls, which its
# User=switchboard cannot build (they need root): it refuses to start, exit 78, saying so and
# what to restore — never runs anyone's command unwalled, never sits ready running nothing.
in_c sed -i 's/^SANDBOX_URL=/#test# SANDBOX_URL=/' /etc/switchboard/bot.env
! in_c systemctl start switchboard-bot.service >/dev/null 2>&1 || fail "the bot without SANDBOX_URL started"
# (switchboard-bot.service failing stops the instance it started, which resets its ExecMainStatus:
# systemd's own journal line says how the bot exited)
expect_match 'Main process exited, code=exited, status=78' "$(in_c journalctl -u switchboard-bot@8081 -o cat --no-pager)" \
  "without SANDBOX_URL the bot's unit fails: exit 78"
expect_eq failed "$(in_c systemctl is-active switchboard-bot || true)" "… and so does switchboard-bot.service, which started it"
expect_match 'not root, and the walls need root.*set SANDBOX_URL and SANDBOX_TOKEN' "$(in_c journalctl -u 'switchboard-bot*' -o cat --no-pager)" \
  "… and its journal says why and what to restore"
in_c systemctl stop switchboard-bot.service switchboard-sandboxd.service
in_c systemctl reset-failed
in_c sed -i 's/^#test# SANDBOX_URL=/SANDBOX_URL=/' /etc/switchboard/bot.env
t0=$(date +%s)
in_c systemctl start switchboard-bot.service >"$work/start.log" 2>&1 \
  || fail "systemctl start switchboard-bot: $(cat "$work/start.log"); $(in_c journalctl -u switchboard-sandboxd -u 'switchboard-bot*' -o cat --no-pager | tail -20)"
journal() { in_c journalctl -u "$1" -o cat --no-pager; }
for unit in switchboard-sandboxd switchboard-bot switchboard-bot@8081; do
  state="$(in_c systemctl is-active "$unit" || true)"
  [ "$state" = active ] || fail "systemctl start: $unit is $state, not active: $(journal "$unit" | grep -E 'fatal|error' | tail -3)"
  ok "systemctl start: $unit is active (Type=notify: READY=1 said)"
done
ok "the bot (and the sandboxd it Wants) started and said READY=1 in $(( $(date +%s) - t0 )) s"
expect_match '"event":"sandboxd.listening".*"walls":"cgroup v1"' "$(journal switchboard-sandboxd)" \
  "journalctl -u switchboard-sandboxd: sandboxd listens walled"
expect_match '"event":"slack.connected"|"event":"slack\.ready"|socket' "$(journal 'switchboard-bot*')" \
  "journalctl -u 'switchboard-bot*': the bot connected to Slack"
# The capability bounding set the kernel applied is the unit's line, in both units.
for unit in switchboard-sandboxd switchboard-bot@8081; do
  main="$(in_c systemctl show -p MainPID --value "$unit")"
  bnd="$(in_c awk '/^CapBnd:/ { print $2 }' "/proc/$main/status")"
  file="${unit%%@*}${unit//[^@]/}"  # switchboard-bot@8081's file is switchboard-bot@.service
  want="$(in_c sh -c "sed -n 's/^CapabilityBoundingSet=//p' /lib/systemd/system/$file.service")"
  got="$(python3 -c '
import sys
names = ["chown","dac_override","dac_read_search","fowner","fsetid","kill","setgid","setuid","setpcap",
  "linux_immutable","net_bind_service","net_broadcast","net_admin","net_raw","ipc_lock","ipc_owner",
  "sys_module","sys_rawio","sys_chroot","sys_ptrace","sys_pacct","sys_admin","sys_boot","sys_nice",
  "sys_resource","sys_time","sys_tty_config","mknod","lease","audit_write","audit_control","setfcap"]
m = int(sys.argv[1], 16)
print(" ".join(sorted("CAP_" + n.upper() for i, n in enumerate(names) if m >> i & 1)))' "$bnd")"
  expect_eq "$(tr ' ' '\n' <<<"$want" | grep . | sort | tr '\n' ' ' | sed 's/ $//')" "$got" \
    "$unit's process has exactly the unit's CapabilityBoundingSet= ($bnd)"
done
devices="$(in_c cat /sys/fs/cgroup/devices/system.slice/switchboard-sandboxd.service/devices.list)"
expect_match '^b 7:\* rwm$' "$devices" "DevicePolicy=closed is applied to sandboxd, with the loop block devices allowed"
expect_match '^c 10:237 rw$' "$devices" "… and /dev/loop-control"
! grep -q '^a ' <<<"$devices" || fail "sandboxd's device cgroup allows every device: $devices"

mention() { in_c python3 /srv/test/slack_mention.py "$port" "$@"; }

# ---- the walls: the bot's environment stays out of reach ---------------------------------
n=0
for attack in "run \`tr '\\0' '\\n' &lt; /proc/\$PPID/environ\`" "run \`cat /proc/*/environ | tr '\\0' '\\n'\`" "run \`ps eww -A\`"; do
  n=$((n + 1))
  card="$(mention "17000003$n.000100" "$attack")" || fail "no final card for $attack"
  grep -q '· sandbox' <<<"$card" && ! grep -q unwalled <<<"$card" || fail "the command did not run walled in the sandbox: $card"
  ok "walled in the sandbox: $attack"
done
main="$(in_c systemctl show -p MainPID --value switchboard-sandboxd)"
sandbox_url="http://127.0.0.1:8080"
(cd "$REPO_DIR" && SB_BUILD_DIR="$build" SB_IMAGE_URL="$sandbox_url" SB_IMAGE_PID="$main" \
   SB_IMAGE_ROOT=/var/lib/switchboard-sandboxd SANDBOX_TOKEN="$sandbox_token" \
   timeout 600 nsenter --net="/proc/$cpid/ns/net" busted --output=utfTerminal deploy/tests/image_walls_spec.lua) \
  >"$work/walls.log" 2>&1 \
  || { cat "$work/walls.log" >&2; fail "a walls attack succeeded against the installed sandboxd (deploy/tests/image_walls_spec.lua)"; }
ok "every walls attack fails against the sandboxd systemd started: $(grep -o '[0-9]* success[a-z]*' "$work/walls.log")"

# ---- an instance's death heals: the next command finds its files ------------------------
for attack in "kill -9 -1; sleep 5" "head -c 1G /dev/zero > /dev/shm/fill"; do
  n=$((n + 1))
  thread="17000004$n.000100"
  card="$(mention "$thread" "run \`echo kept-$n > kept.txt && echo started\`")" || fail "no card for the thread's first command"
  grep -q 'started' <<<"$card" || fail "the thread's first command did not run: $card"
  mention "$thread" "run \`$attack\`" >"$work/attack.card" || fail "no card for $attack"
  card="$(mention "$thread" "run \`cat kept.txt\`")" || fail "no card after $attack"
  grep -q "kept-$n" <<<"$card" || fail "after $attack the thread's next command did not find its files: $card
$(journal switchboard-sandboxd | tail -5)"
  ok "after \`$attack\` the thread's next command runs in a fresh instance on the same files"
done
expect_match '"event":"sandboxd.instance_retired".*"reason":"memory"' "$(journal switchboard-sandboxd)" \
  "journalctl: the memory-limit kill was seen as such"
# the retired instances' loop devices, given back by the sandboxd systemd started (its
# CapabilityBoundingSet, its device rules): walls.loop_removed, never walls.loop_left
# (the journal read whole first: grep -q ending the pipe early fails it under pipefail)
removed=0
for _ in $(seq 1 150); do
  sandboxd_log="$(journal switchboard-sandboxd)"
  removed="$(grep -c '"event":"walls.loop_removed"' <<<"$sandboxd_log" || true)"
  [ "$removed" -ge 2 ] && break
  sleep 0.2
done
[ "$removed" -ge 2 ] || fail "the retired instances' loop devices were not given back (walls.loop_removed ×$removed): $(grep -E 'walls\.loop|instance_retired' <<<"$sandboxd_log" | tail -5)"
if grep -q '"event":"walls.loop_left"' <<<"$sandboxd_log"; then
  fail "a loop device was left: $(grep '"event":"walls.loop_left"' <<<"$sandboxd_log" | head -3)"
fi
ok "journalctl: the retired instances' loop devices were given back (walls.loop_removed ×$removed, none left)"

# ---- systemctl reload: an overlay change, and a 0600 overlay refused -------------------
before="$(journal 'switchboard-bot*' | grep -c '"event":"policy.reloaded"' || true)"
in_c sh -c 'umask 022; printf "bash.max_ms = 30 * minute\n" >/etc/switchboard/policies/timeouts.lua'
in_c systemctl reload switchboard-bot || fail "systemctl reload switchboard-bot"
for _ in $(seq 1 150); do
  [ "$(journal 'switchboard-bot*' | grep -c '"event":"policy.reloaded"' || true)" -gt "$before" ] && break; sleep 0.2
done
expect_match '"event":"policy.reloaded"' "$(journal 'switchboard-bot*' | grep '"event":"policy.reloaded"' | tail -n +"$((before + 1))")" \
  "systemctl reload switchboard-bot: the bot loaded the changed overlay"
expect_eq "active active" "$(in_c systemctl is-active switchboard-bot switchboard-bot@8081 | tr '\n' ' ' | sed 's/ $//' || true)" \
  "the bot is active after the reload"
in_c systemctl reload switchboard-sandboxd || fail "systemctl reload switchboard-sandboxd"
for _ in $(seq 1 150); do journal switchboard-sandboxd | grep -q '"event":"policy.changed".*"key":"bash.max_ms"' && break; sleep 0.2; done
expect_match '"event":"policy.changed".*"key":"bash.max_ms"' "$(journal switchboard-sandboxd)" \
  "systemctl reload switchboard-sandboxd: the journal names the changed setting (bash.max_ms)"
expect_eq active "$(in_c systemctl is-active switchboard-sandboxd || true)" "sandboxd is active after the reload"
in_c sh -c 'rm /etc/switchboard/policies/timeouts.lua; umask 077; printf "bash.max_ms = 20 * minute\n" >/etc/switchboard/policies/timeouts.lua'
check=0
out="$(in_c switchboard policy check /etc/switchboard/policies 2>&1)" || check=$?
[ "$check" != 0 ] || fail "policy check (as root) passed an overlay the service cannot read: $out"
expect_match 'timeouts\.lua:1: readable by its owner only \(mode 0600\).*Permission denied' "$out" \
  "policy check (as root) refuses a 0600 overlay the services could not read, saying why"
expect_match 'FAIL +policies +.*timeouts\.lua:1: readable by its owner only' "$(in_c switchboard doctor 2>&1 || true)" \
  "doctor (as root) fails the same overlay"
in_c chmod 0644 /etc/switchboard/policies/timeouts.lua  # readable again by the bot (the restarts below load it)

# ---- systemctl restart, and the package's upgrade: no deaf window -----------------------
# Mentions keep coming, the way Slack sends them (each on one of the app's open connections,
# sent again while nobody acks it; every 5th ack lost on its way), across two `systemctl
# restart switchboard-bot` and an upgrade (`dpkg -i` of the package over itself: its postinst
# try-restarts the bot). Each restart starts the idle instance, waits for its READY=1 and only
# then stops the other: the stand-in sees the new connection open before the old one closes,
# never none open, and every mention runs exactly once (the record both share).
# Each mention is its own thread, so its own instance: small workspaces, asleep 3 s after their
# command (sandboxd wakes at most timeouts sandbox.max_instances, 25: more would wait).
in_c sh -c 'umask 022; printf "workspace_max_bytes = 32 * MiB\n" >>/etc/switchboard/policies/isolation.lua
  printf "sandbox.sleep_after = \"3s\"\n" >>/etc/switchboard/policies/timeouts.lua'
in_c systemctl reload switchboard-sandboxd || fail "systemctl reload switchboard-sandboxd (small workspaces)"
serving() { for p in 8081 8082; do if in_c systemctl -q is-active "switchboard-bot@$p"; then printf '%s' "$p"; fi; done; }
sent() { grep -c '^sent' "$work/restart.log" 2>/dev/null || true; }
wait_sent() {
  for _ in $(seq 1 600); do [ "$(sent)" -ge "$1" ] && return 0; sleep 0.2; done
  fail "the mentions stopped coming: $(tail -3 "$work/restart.log")"
}
# First the upgrade from a package whose switchboard-bot.service ran the bot itself (before
# switchboard-bot@.service): that unit, made here from the template the way it read (the bot on
# 8081, no instance), runs the bot when the package is installed over it.
in_c systemctl stop switchboard-bot
in_c sh -c "sed 's/%i/8081/g; /^StopPropagatedFrom=/d' /lib/systemd/system/switchboard-bot@.service \
  >/lib/systemd/system/switchboard-bot.service && systemctl daemon-reload && systemctl start switchboard-bot"
[ -z "$(serving)" ] && [ "$(in_c systemctl show -p MainPID --value switchboard-bot)" != 0 ] \
  || fail "the bot did not run the old way: '$(serving)'"
in_c rm -f /root/restarts-done
in_c python3 /srv/test/slack_restart_mentions.py "$port" /root/restarts-done 1.5 >"$work/restart.json" 2>"$work/restart.log" &
mentions=$!
wait_sent 2
in_c env DEBIAN_FRONTEND=noninteractive dpkg -i /srv/test/switchboard.deb >"$work/restart-cmd.log" 2>&1 \
  || fail "dpkg -i over the old unit: $(cat "$work/restart-cmd.log")"
expect_eq "8081 0" "$(serving) $(in_c systemctl show -p MainPID --value switchboard-bot)" \
  "the first upgrade from the unit that ran the bot itself: switchboard-bot@8081 runs it, by way of @8082"
wait_sent $(( $(sent) + 2 ))
for how in "systemctl restart switchboard-bot" "systemctl restart switchboard-bot" \
           "env DEBIAN_FRONTEND=noninteractive dpkg -i /srv/test/switchboard.deb"; do
  was="$(serving)"
  # shellcheck disable=SC2086 # the command's words
  in_c $how >"$work/restart-cmd.log" 2>&1 \
    || fail "$how: $(cat "$work/restart-cmd.log"); $(in_c journalctl -u 'switchboard-bot*' --no-pager | tail -40)"
  now="$(serving)"
  case "$was/$now" in
    8081/8082|8082/8081) ok "$how: switchboard-bot@$now took over from switchboard-bot@$was" ;;
    *) fail "$how: the bot ran on '$was' before and on '$now' after (want the other instance): $(cat "$work/restart-cmd.log")" ;;
  esac
  wait_sent $(( $(sent) + 2 ))
done
# A restart while a command runs, and at once another: the first's old instance drains the
# command (its card ends as it would have); the second's next instance is that one, so its start
# waits for the drain to end while the middle one serves.
mention "1710900000.000100" "run \`echo warm\`" >/dev/null || fail "no card for the long command's thread"
# 15 s: long enough that the polls below (each a podman exec, seconds apart on a loaded host) see
# it running — a 5 s command once ran to its end between two of them — and within the drain's
# 25 s (slack.drain_ms − flush_ms) after the restart
mention "1710900000.000100" "run \`sleep 15 && echo drained-across\`" >"$work/long.card" 2>&1 &
long=$!
for _ in $(seq 1 300); do in_c pgrep -f '^sleep 15$' >/dev/null 2>&1 && break; sleep 0.1; done
in_c pgrep -f '^sleep 15$' >/dev/null 2>&1 || fail "the long command never started: $(cat "$work/long.card")"
was="$(serving)"
in_c systemctl restart switchboard-bot || fail "the restart with a command running: $(journal 'switchboard-bot*' | tail -10)"
mid="$(serving)"
in_c systemctl restart switchboard-bot || fail "the restart right after it: $(journal 'switchboard-bot*' | tail -10)"
now="$(serving)"
[ "$was" != "$mid" ] && [ "$now" = "$was" ] || fail "two restarts at once ran on '$was', '$mid', '$now'"
wait "$long" || fail "the command running across the restarts got no final card: $(cat "$work/long.card")"
expect_match 'drained-across' "$(cat "$work/long.card")" \
  "a restart with a command running, and another at once: the old instance drained it to its end ($was → $mid → $now)"
in_c touch /root/restarts-done
wait "$mentions" || fail "the mentions across the restarts: $(tail -5 "$work/restart.log")"
result="$(cat "$work/restart.json")"
echo "restarts: $result"
field() { python3 -c 'import json, sys; print(json.dumps(json.loads(sys.argv[1])[sys.argv[2]]))' "$result" "$1"; }
expect_eq "[] [] 0" "$(field lost) $(field twice) $(field given_up)" \
  "$(field sent) mentions across 4 restarts and two upgrades: 0 lost, 0 run twice, 0 given up ($(field acks_lost) acks lost, $(field redelivered) sent again)"
expect_eq 0 "$(field deaf_ms)" "the stand-in never had no connection open while the mentions came"
expect_match '^\[(\{"old": [0-9]+, "new": [0-9]+, "overlap_ms": [0-9]+\}(, )?){7,}\]$' "$(field handovers)" \
  "each old connection closed after the next instance's was open (old, new, overlap): $(field handovers)"

# A restart whose next instance cannot start (here an overlay it cannot read: exit 78) fails, and
# the unit's failure stops the instance that ran too (StopPropagatedFrom=): no bot is left
# running outside `systemctl stop switchboard-bot`'s reach. Then a start brings it back.
in_c chmod 0600 /etc/switchboard/policies/timeouts.lua
! in_c systemctl restart switchboard-bot >/dev/null 2>&1 || fail "a restart onto a bot that cannot start succeeded"
for _ in $(seq 1 300); do [ -z "$(serving)" ] && break; sleep 0.2; done
expect_eq "failed/" "$(in_c systemctl is-active switchboard-bot || true)/$(serving)" \
  "a restart whose next instance fails: the unit fails and no instance is left running"
in_c chmod 0644 /etc/switchboard/policies/timeouts.lua
in_c systemctl reset-failed
in_c systemctl start switchboard-bot || fail "systemctl start switchboard-bot after the failed restart"
expect_match '^808[12]$' "$(serving)" "… and systemctl start switchboard-bot starts one again"

# ---- systemctl stop drains a command in flight --------------------------------------------
thread="1700000500.000100"
mention "$thread" "run \`echo warm\`" >/dev/null || fail "no card for the drain's first command"
in_c python3 /srv/test/slack_mention.py "$port" "$thread" "run \`sleep 4 && echo drained\`" >"$work/drain.card" 2>&1 &
drain=$!
# (the command's own process in the container, sleeping: the request is in flight)
for _ in $(seq 1 300); do in_c pgrep -f '^sleep 4$' >/dev/null 2>&1 && break; sleep 0.1; done
in_c pgrep -f '^sleep 4$' >/dev/null 2>&1 || fail "the drain's command never started: $(cat "$work/drain.card")"
in_c systemctl stop switchboard-sandboxd || fail "systemctl stop switchboard-sandboxd"
wait "$drain" || fail "the command in flight during the stop got no final card: $(cat "$work/drain.card")"
expect_match 'drained' "$(cat "$work/drain.card")" "systemctl stop switchboard-sandboxd let the command in flight finish"
expect_eq inactive "$(in_c systemctl is-active switchboard-sandboxd || true)" "sandboxd stopped cleanly (inactive, not failed)"
in_c systemctl stop switchboard-bot || fail "systemctl stop switchboard-bot"
expect_eq "inactive inactive inactive" \
  "$(in_c systemctl is-active switchboard-bot switchboard-bot@8081 switchboard-bot@8082 | tr '\n' ' ' | sed 's/ $//' || true)" \
  "systemctl stop switchboard-bot stopped the bot (both instances) cleanly"
expect_match '"event":"slack.draining"' "$(journal 'switchboard-bot@*' | tail -20)" "… draining first (the journal's slack.draining)"

# ---- no secret anywhere -----------------------------------------------------------------
in_c journalctl -o cat --no-pager >"$work/journal.txt"
in_c sh -c 'find /var/lib/switchboard /var/cache/switchboard -type f -print0 | xargs -0 -r cat' >"$work/kept.txt"
in_c curl -fsS "http://127.0.0.1:$port/_control/state" >"$work/standin-state.json"
for place in journal.txt kept.txt standin-state.json; do
  for s in "${secrets[@]}"; do
    ! grep -qF -- "$s" "$work/$place" || fail "a secret (${s:0:8}…) reached $place"
  done
  ok "no secret of the bot in $place"
done

# ---- purge --------------------------------------------------------------------------------
in_c apt-get purge -y switchboard >"$work/purge.log" 2>&1 || { cat "$work/purge.log" >&2; fail "apt-get purge switchboard"; }
for p in /etc/switchboard/bot.env /etc/switchboard/sandboxd.env /var/lib/switchboard /var/lib/switchboard-sandboxd \
         /var/cache/switchboard /run/switchboard; do
  in_c test ! -e "$p" || fail "the purge left $p"
done
ok "the purge removed the environment files, the state, cache and runtime directories"
expect_eq "" "$(in_c systemctl list-unit-files 'switchboard-*' --no-legend)" "the purge removed both units"

echo "$checks passed, 0 failed"

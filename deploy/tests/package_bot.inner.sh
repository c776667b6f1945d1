#!/usr/bin/env bash
# The installed bot's stage (deploy/tests/package_bot.sh runs it inside new mount, PID and
# network namespaces, so the units' fixed ports are this stage's own, and everything it starts
# ends with it). ROOT is the root the package was installed into.
#   package_bot.inner.sh ROOT WORK REPO_DIR     (SB_SECRET_*, SB_CGROUP_BASES in the environment)
# Starts, from the installed files only: switchboard-sandboxd and switchboard-bot by their
# units' own ExecStart= lines and EnvironmentFile=s, as the units' User=, each in its delegated
# cgroup and with ROOT as its / through pivot_root (not chroot: the kernel gives no user
# namespace to a chrooted process, so sandboxd could not wall); the Slack stand-in on this
# namespace's loopback. Sends three mentions that try to read the bot's environment and leaves
# what each place saw in WORK for package_bot.sh to search: standin-state.json, bot.log,
# bot-refused.log, sandboxd.log, kept.txt (every file the bot keeps).
set -euo pipefail
root="$1" work="$2" repo="$3"
checks=0
ok() { checks=$((checks + 1)); echo "ok - $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

# This namespace's network: loopback (the units' fixed ports, the stand-in) and a veth pair
# whose d0 has an address and a default route, as a host's interface would (no peer beyond it:
# nothing leaves this namespace). pasta, which gives each walled instance its outbound network,
# copies that interface into the instance and refuses to start without one ("No external
# routable interface"); this kernel may lack the dummy module, so a veth, as
# tests/e2e/walls_net_spec.lua does.
ip link set lo up
ip link add d0 type veth peer name d1
ip link set d1 up
ip addr add 198.51.100.1/24 dev d0
ip link set d0 up
ip route add default via 198.51.100.254 dev d0
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"

# The Slack stand-in knows the two tokens the bot must present.
SLACK_BOT_TOKEN="$SB_SECRET_BOT" SLACK_APP_TOKEN="$SB_SECRET_APP" \
  /usr/bin/python3 "$repo/tests/support/slack_standin.py" >"$work/standin.out" 2>"$work/standin.err" &
for _ in $(seq 1 300); do grep -q '^READY' "$work/standin.out" && break; sleep 0.1; done
port="$(sed -n 's/^READY //p' "$work/standin.out")"
[ -n "$port" ] || fail "the Slack stand-in did not start: $(cat "$work/standin.err")"
printf 'SLACK_API_URL=http://127.0.0.1:%s/api\n' "$port" >>"$root/etc/switchboard/bot.env"

unit_line() { sed -n "s/^$2=//p" "$root/lib/systemd/system/$1"; }
# User= of a unit, or root (systemd's default); its uid and home in the installed root.
unit_user() { unit_line "$1" User | grep . || echo root; }
user_field() { awk -F: -v u="$1" -v f="$2" '$1 == u { print $f }' "$root/etc/passwd"; }
# LimitNOFILE=, up to what this test itself may raise to.
limit_nofile() {
  local n hard; n="$(unit_line "$1" LimitNOFILE)" hard="$(ulimit -Hn)"
  [ "$hard" = unlimited ] || [ -z "$n" ] || [ "$n" -le "$hard" ] || n="$hard"
  [ -z "$n" ] || echo "ulimit -n $n"
}
# CAP_A CAP_B … as setpriv's list: +a,+b
cap_list() { tr 'A-Z' 'a-z' | sed 's/cap_/+/g; s/ \+/,/g; s/^,//; s/,$//'; }
# CapabilityBoundingSet= and AmbientCapabilities= as setpriv flags (no bounding line: systemd's
# full set). A root unit keeps the bounding set's capabilities through exec; a User= unit only
# the ambient ones.
unit_caps() {
  grep -q '^CapabilityBoundingSet=' "$root/lib/systemd/system/$1" || return 0
  local bounding ambient
  bounding="$(unit_line "$1" CapabilityBoundingSet | cap_list)" ambient="$(unit_line "$1" AmbientCapabilities | cap_list)"
  echo "--bounding-set=-all${bounding:+,$bounding}${ambient:+ --inh-caps=$ambient --ambient-caps=$ambient}"
}
# User=/Group= as setpriv flags and the variables systemd sets for them (none: root, as systemd).
unit_creds() {
  local u g; u="$(unit_line "$1" User)" g="$(unit_line "$1" Group)"
  echo "${u:+--reuid=$u --init-groups}${g:+ --regid=$g}"
}
unit_user_env() {
  local u; u="$(unit_line "$1" User)"
  [ -z "$u" ] || echo "HOME=$(user_field "$u" 6) USER=$u LOGNAME=$u"
}
# start UNIT: what systemd does for the unit's ExecStart=, here: join the unit's delegated
# cgroups (Delegate=yes), take ROOT as / in a mount namespace of its own (pivot_root, then the
# old root detached), read the EnvironmentFile= as root, then, with the unit's User=/Group=,
# NoNewPrivileges=yes, CapabilityBoundingSet=/AmbientCapabilities=, UMask=0077 and
# LimitNOFILE=, exec the ExecStart= line. (ProtectSystem=, PrivateTmp=, DevicePolicy= and the
# like are systemd's extra fences around the service; the walls under test are sandboxd's own.)
start() {
  local unit="$1" b
  for b in $SB_CGROUP_BASES; do echo "$BASHPID" >"$b/$unit/cgroup.procs"; done
  exec unshare --mount --propagation private -- bash -c '
    set -e; root="$1"; shift
    mount --rbind "$root" "$root"; cd "$root"; pivot_root . mnt; cd /; umount -l /mnt
    exec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@"' _ "$root" \
    $(unit_user_env "$unit") $(unit_line "$unit" Environment) sh -c "
    set -a; . $(unit_line "$unit" EnvironmentFile); set +a; umask 0077; $(limit_nofile "$unit")
    exec setpriv $(unit_creds "$unit") --no-new-privs $(unit_caps "$unit") $(unit_line "$unit" ExecStart)"
}
# StateDirectory=, CacheDirectory=, RuntimeDirectory=: as systemd at each start, each named
# directory made (missing parents root's, 0755) with the unit's mode (0755 unless it says) and
# handed to User= — recursively when its top is another's (systemd.exec(5)).
unit_dirs() {
  local kind base d u ids; u="$(unit_user "$1")" ids="$(user_field "$(unit_user "$1")" 3):$(user_field "$(unit_user "$1")" 4)"
  for kind in State:/var/lib Cache:/var/cache Runtime:/run; do
    base="${kind#*:}" kind="${kind%%:*}"
    for d in $(unit_line "$1" "${kind}Directory"); do
      mkdir -p "$(dirname "$root$base/$d")" "$root$base/$d"
      [ "$(stat -c %u:%g "$root$base/$d")" = "$ids" ] || chown -R "$ids" "$root$base/$d"
      chmod "$(unit_line "$1" "${kind}DirectoryMode" | grep . || echo 0755)" "$root$base/$d"
    done
  done
}
# The capability names of a bounding set as /proc/PID/status's CapBnd mask (the ones a unit names).
cap_mask() {
  local n mask=0 bit
  for n in $(tr 'a-z' 'A-Z'); do
    case "${n#CAP_}" in
      CHOWN) bit=0 ;; DAC_OVERRIDE) bit=1 ;; FOWNER) bit=3 ;; KILL) bit=5 ;; SETGID) bit=6 ;;
      SETUID) bit=7 ;; NET_ADMIN) bit=12 ;; SYS_PTRACE) bit=19 ;; SYS_ADMIN) bit=21 ;; MKNOD) bit=27 ;;
      *) fail "cap_mask: add $n to the table" ;;
    esac
    mask=$((mask | (1 << bit)))
  done
  printf '%016x\n' "$mask"
}
# Without SANDBOX_URL the bot's agents would go to the local executor's walls, which its
# User=switchboard cannot build (they need root): it must refuse to start, exit 78, saying so
# and what to restore — never run anyone's command unwalled, never sit ready running nothing.
unit_dirs switchboard-bot.service
sed -i 's/^SANDBOX_URL=/#stage# SANDBOX_URL=/' "$root/etc/switchboard/bot.env"
(start switchboard-bot.service) >"$work/bot-refused.log" 2>&1 &
refusing=$!
for _ in $(seq 1 600); do kill -0 "$refusing" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$refusing" 2>/dev/null; then
  kill -KILL "$refusing"
  fail "the bot without SANDBOX_URL did not refuse to start within 60 s: $(tail -5 "$work/bot-refused.log")"
fi
refused=0
wait "$refusing" || refused=$?
sed -i 's/^#stage# SANDBOX_URL=/SANDBOX_URL=/' "$root/etc/switchboard/bot.env"
[ "$refused" = 78 ] && grep -q 'not root, and the walls need root' "$work/bot-refused.log" \
  && grep -q 'set SANDBOX_URL and SANDBOX_TOKEN' "$work/bot-refused.log" \
  || fail "the bot without SANDBOX_URL, as User=switchboard, did not refuse with exit 78 and the reason (exit $refused): $(cat "$work/bot-refused.log")"
ok "without SANDBOX_URL the installed bot refuses to start (78): $(grep -o 'this bot runs as uid [0-9]*, not root, and the walls need root' "$work/bot-refused.log" | head -1)"

unit_dirs switchboard-sandboxd.service
(start switchboard-sandboxd.service) >"$work/sandboxd.log" 2>&1 &
sandboxd=$!
unit_dirs switchboard-bot.service
(start switchboard-bot.service) >"$work/bot.log" 2>&1 &
bot=$!

# Ready: connected to Slack, policies loaded, the sandbox beside it answering (GET /readyz).
ready=""
for _ in $(seq 1 1200); do
  if ready="$(curl -fsS http://127.0.0.1:8081/readyz 2>/dev/null)"; then break; fi
  kill -0 "$bot" 2>/dev/null || fail "the bot exited: $(tail -20 "$work/bot.log"); sandboxd: $(tail -5 "$work/sandboxd.log")"
  ready=""
  sleep 0.1
done
[ -n "$ready" ] || fail "the bot's /readyz never answered 200: $(curl -sS http://127.0.0.1:8081/readyz 2>&1); $(tail -20 "$work/bot.log"); $(tail -5 "$work/sandboxd.log")"
ok "the installed bot is ready (Slack connected, policies loaded, sandboxd reachable): $ready"
grep -q '"sandboxd.listening".*"walls":"cgroup v[12]"' "$work/sandboxd.log" \
  || fail "the installed sandboxd is not walled (no walls on its sandboxd.listening line): $(cat "$work/sandboxd.log")"
ok "the installed sandboxd runs walled: $(grep -o '"walls":"[^"]*"' "$work/sandboxd.log" | head -1)"
for unit_pid in "switchboard-sandboxd.service $sandboxd" "switchboard-bot.service $bot"; do
  set -- $unit_pid
  u="$(unit_user "$1")"
  [ "$(awk '/^Uid:/ { print $2 }' "$root/proc/$2/status")" = "$(user_field "$u" 3)" ] || fail "$1 does not run as its user $u"
  want="$(unit_line "$1" CapabilityBoundingSet | cap_mask)"
  [ "$(awk '/^CapBnd:/ { print $2 }' "$root/proc/$2/status")" = "$want" ] \
    || fail "$1's capability bounding set is not the unit's ($want): $(grep ^Cap "$root/proc/$2/status" | tr '\n' ' ')"
  grep -q ":memory:.*/$1\$" "$root/proc/$2/cgroup" || fail "$1 is not in its delegated cgroup: $(cat "$root/proc/$2/cgroup")"
  ok "$1 runs as $u with the unit's capability bounding set ($want), in its delegated cgroup"
done

/usr/bin/python3 - "$port" "$work/standin-state.json" <<'PY'
# Sends the three mentions as Slack would (Socket Mode envelopes through the stand-in) and
# waits, bounded, for each thread's final card (no Stop button left).
import json, sys, time, urllib.request
port, out = int(sys.argv[1]), sys.argv[2]
base = "http://127.0.0.1:%d/_control/" % port
def control(path, body=None):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode() if body is not None else None,
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())
attacks = {
    "1700000201.000100": "run `tr '\\0' '\\n' &lt; /proc/$PPID/environ`",
    "1700000202.000100": "run `cat /proc/*/environ | tr '\\0' '\\n'`",
    "1700000203.000100": "run `ps eww -A`",
}
for i, (ts, text) in enumerate(attacks.items()):
    control("envelope", {"type": "events_api", "payload": {
        "type": "event_callback", "team_id": "T0ACME", "api_app_id": "A0APP", "event_id": "EvAttack%d" % i,
        "event_time": int(time.time()), "event": {"type": "app_mention", "user": "U0ANA", "channel": "C0GEN",
        "ts": ts, "text": "<@U0BOT> " + text}}})
def card_text(m):
    parts = []
    for b in m.get("blocks") or []:
        if isinstance(b.get("text"), dict): parts.append(b["text"].get("text", ""))
        for e in b.get("elements") or []:
            if e.get("type") == "mrkdwn": parts.append(e.get("text", ""))
            if e.get("type") == "button": parts.append("[" + e["text"]["text"] + "]")
    return "\n".join(parts)
deadline = time.time() + 300
while True:
    state = control("state")
    finals = {}
    for m in state["messages"].values():
        if m.get("thread_ts") in attacks and m.get("blocks") and "[Stop]" not in card_text(m):
            finals[m["thread_ts"]] = card_text(m)
    if len(finals) == len(attacks):
        break
    if time.time() > deadline:
        sys.exit("no final card for every attack within 300 s: %s" % sorted(finals))
    time.sleep(0.2)
json.dump(state, open(out, "w"))
for ts, text in sorted(finals.items()):
    if "· sandbox" not in text:
        sys.exit("the command did not run in the sandbox:\n" + text)
    if "unwalled" in text:
        sys.exit("the card says the command ran unwalled:\n" + text)
    if "exit" not in text:
        sys.exit("the command did not run:\n" + text)
    print("ok - %s ran in the sandbox: %s" % (attacks[ts], text.splitlines()[-1][:100]))
PY
checks=$((checks + 3))
kill -TERM "$bot"
wait "$bot" || true
# Every file the bot keeps (StateDirectory=, CacheDirectory=: record.db, transcripts, outputs).
find "$root/var/lib/switchboard" "$root/var/cache/switchboard" -type f -print0 \
  | xargs -0 -r cat >"$work/kept.txt"
ok "the bot stopped on TERM"

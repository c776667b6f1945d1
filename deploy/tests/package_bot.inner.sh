#!/usr/bin/env bash
# The installed bot's stage of deploy/tests/package.sh, run there inside new mount, PID and
# network namespaces (so the units' fixed ports are this stage's own, and everything it starts
# ends with it). ROOT is the clean root the package was installed into.
#   package_bot.inner.sh ROOT WORK REPO_DIR     (SB_SECRET_* in the environment)
# Starts, from the installed files only: switchboard-sandboxd and switchboard-bot by their
# units' own ExecStart= lines and EnvironmentFile=s, the bot as the unit's User=; the Slack
# stand-in on this namespace's loopback. Sends three mentions that try to read the bot's
# environment and leaves what each place saw in WORK for package.sh to search:
# standin-state.json, bot.log, sandboxd.log, kept.txt (every file the bot keeps).
set -euo pipefail
root="$1" work="$2" repo="$3"
checks=0
ok() { checks=$((checks + 1)); echo "ok - $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

ip link set lo up
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

unit_exec() { sed -n 's/^ExecStart=//p' "$root/lib/systemd/system/$1"; }
# What systemd does before ExecStart= here: StateDirectory= (owned by User=), EnvironmentFile=.
# 0711, not the unit's 0700: an instance's uid must traverse the parents of sandboxd's --root
# until issue 21 §2's fix (the workspace handle opened before privileges drop) is merged.
chroot "$root" install -d -o switchboard -g switchboard -m 0711 /var/lib/switchboard /var/lib/switchboard/sandboxd
# sandboxd runs as root here, not as User=switchboard: no systemd in this root delegates it
# a cgroup subtree (the unit's Delegate=yes); its walls are otherwise the same.
chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin sh -c \
  "set -a; . /etc/switchboard/sandboxd.env; set +a; exec $(unit_exec switchboard-sandboxd.service)" \
  >"$work/sandboxd.log" 2>&1 &
# As systemd does: the environment file read as root, then the unit's User=/Group=.
chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/var/lib/switchboard \
  SWITCHBOARD_STATE_DIR=/var/lib/switchboard sh -c "set -a; . /etc/switchboard/bot.env; set +a;
  exec setpriv --reuid=switchboard --regid=switchboard --init-groups $(unit_exec switchboard-bot.service)" \
  >"$work/bot.log" 2>&1 &
bot=$!

# Ready: connected to Slack, policies loaded, the sandbox beside it answering (GET /readyz).
ready=""
for _ in $(seq 1 1200); do
  if ready="$(curl -fsS http://127.0.0.1:8081/readyz 2>/dev/null)"; then break; fi
  kill -0 "$bot" 2>/dev/null || fail "the bot exited: $(tail -20 "$work/bot.log")"
  ready=""
  sleep 0.1
done
[ -n "$ready" ] || fail "the bot's /readyz never answered 200: $(curl -sS http://127.0.0.1:8081/readyz 2>&1); $(tail -20 "$work/bot.log"); $(tail -5 "$work/sandboxd.log")"
ok "the installed bot is ready (Slack connected, policies loaded, sandboxd reachable): $ready"

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
    if "exit" not in text:
        sys.exit("the command did not run:\n" + text)
    print("ok - %s ran in the sandbox: %s" % (attacks[ts], text.splitlines()[-1][:100]))
PY
checks=$((checks + 3))
kill -TERM "$bot"
wait "$bot" || true
# Every file the bot keeps (its state: outputs of cut cards, transcripts, caches).
find "$root/var/lib/switchboard" -path "$root/var/lib/switchboard/sandboxd" -prune -o -type f -print0 \
  | xargs -0 -r cat >"$work/kept.txt"
ok "the bot stopped on TERM"

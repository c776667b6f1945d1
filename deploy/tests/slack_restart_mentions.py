#!/usr/bin/python3
"""Mentions sent across restarts of the bot (deploy/tests/package_systemd.sh, "systemctl restart:
no deaf window"), the way Slack sends them: through the Slack stand-in's /_control/event, each
event on one of the app's open Socket Mode connections in turn and sent again while nobody acks
it (tests/support/slack_standin.py), every 5th ack lost on its way so that some are sent again,
maybe to the other process. One mention every EVERY_S seconds, each its own thread running
`echo restart-N`, until DONE_FILE exists, then two more; then it waits, bounded, for every
mention to be acked and its card final, and prints one JSON line:
  {"sent", "lost": [n…] (no final card), "twice": [n…] (more than one card), "given_up",
   "acks_lost", "redelivered", "handovers": [{"old", "new", "overlap_ms"}…] (each connection
   closed while mentions came, and the newer one that was already open when it closed),
   "deaf_ms" (the longest time with no connection open while mentions came)}
  slack_restart_mentions.py PORT DONE_FILE [EVERY_S]"""
import json, os, sys, time, urllib.request

port, done_file = int(sys.argv[1]), sys.argv[2]
every = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
base = "http://127.0.0.1:%d/_control/" % port


def control(path, body=None):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode() if body is not None else None,
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def ts_of(n):
    return "1710%06d.000100" % n


control("delivery", {"lose_every": 5})
start_ms = time.monotonic() * 1000  # the stand-in's clock: the same host's monotonic clock
sent, extra = 0, None
while extra is None or extra > 0:
    sent += 1
    ts = ts_of(sent)
    control("event", {"type": "events_api", "payload": {
        "type": "event_callback", "team_id": "T0ACME", "api_app_id": "A0APP", "event_id": "EvPkgRestart%d" % sent,
        "event_time": int(time.time()), "event": {"type": "app_mention", "user": "U0ANA", "channel": "C0GEN",
                                                  "ts": ts, "text": "<@U0BOT> run `echo restart-%d`" % sent}}})
    print("sent %d" % sent, file=sys.stderr, flush=True)
    if extra is None and os.path.exists(done_file):
        extra = 2
    elif extra is not None:
        extra -= 1
    time.sleep(every)
end_ms = time.monotonic() * 1000


def cards(state):
    out = {}
    for m in state["messages"].values():
        if m.get("blocks"):
            out.setdefault(m.get("thread_ts"), []).append(m)
    return out


def final(m):
    for b in m.get("blocks") or []:
        for e in b.get("elements") or []:
            if e.get("type") == "button" and e["text"]["text"] == "Stop":
                return False
    return True


deadline = time.time() + 240
while True:
    state = control("state")
    by_thread = cards(state)
    acked = all(d["acked_conn"] is not None or d["lost"] for d in state["deliveries"].values())
    finals = all(any(final(m) for m in by_thread.get(ts_of(n), [])) or state["deliveries"]["D%d" % n]["lost"]
                 for n in range(1, sent + 1))
    if (acked and finals) or time.time() > deadline:
        break
    time.sleep(0.5)
time.sleep(2)  # a card that would come twice has had its time
state = control("state")
by_thread = cards(state)
lost = [n for n in range(1, sent + 1) if not any(final(m) for m in by_thread.get(ts_of(n), []))]
twice = [n for n in range(1, sent + 1) if len(by_thread.get(ts_of(n), [])) > 1]
opened = {o["conn"]: o["at"] for o in state["opened"]}
closed = {c["conn"]: c["at"] for c in state["closed"]}
handovers = []
for conn, at in sorted(closed.items()):
    if not start_ms <= at <= end_ms:
        continue
    newer = [c for c in opened if c > conn and opened[c] <= at and closed.get(c, float("inf")) > at]
    handovers.append({"old": conn, "new": min(newer) if newer else None,
                      "overlap_ms": round(at - opened[min(newer)]) if newer else None})
# the longest time in [start, end] with no connection open
events = sorted([(t, 1) for t in opened.values()] + [(t, -1) for t in closed.values()])
open_now, deaf_ms, deaf_since = 0, 0.0, None
for t, d in events:
    if t > end_ms:
        break
    open_now += d
    if open_now == 0 and deaf_since is None:
        deaf_since = t
    elif open_now > 0 and deaf_since is not None:
        deaf_ms = max(deaf_ms, min(t, end_ms) - max(deaf_since, start_ms))
        deaf_since = None
if deaf_since is not None:
    deaf_ms = max(deaf_ms, end_ms - max(deaf_since, start_ms))
print(json.dumps({"sent": sent, "lost": lost, "twice": twice,
                  "given_up": sum(1 for d in state["deliveries"].values() if d["lost"]),
                  "acks_lost": state.get("acks_lost", 0),
                  "redelivered": sum(1 for d in state["deliveries"].values() if len(d["envelopes"]) > 1),
                  "handovers": handovers, "deaf_ms": round(max(deaf_ms, 0))}))

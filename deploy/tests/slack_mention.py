#!/usr/bin/python3
"""Sends one mention to the bot through the Slack stand-in (tests/support/slack_standin.py) as
Slack would (a Socket Mode events_api envelope) and waits, bounded, for the thread's next final
card (one more card with no Stop button than before); prints that card's text.
  slack_mention.py PORT THREAD_TS TEXT [TIMEOUT_S]
THREAD_TS is the thread's first message's ts: the first mention of a thread uses it as its own
ts, a later one replies in it (a ts of its own, thread_ts THREAD_TS)."""
import json, sys, time, urllib.request

port, thread, text = int(sys.argv[1]), sys.argv[2], sys.argv[3]
timeout = float(sys.argv[4]) if len(sys.argv) > 4 else 300
base = "http://127.0.0.1:%d/_control/" % port


def control(path, body=None):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode() if body is not None else None,
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def card_text(m):
    parts = []
    for b in m.get("blocks") or []:
        if isinstance(b.get("text"), dict):
            parts.append(b["text"].get("text", ""))
        for e in b.get("elements") or []:
            if e.get("type") == "mrkdwn":
                parts.append(e.get("text", ""))
            if e.get("type") == "button":
                parts.append("[" + e["text"]["text"] + "]")
    return "\n".join(parts)


def finals():
    out = []
    for ts, m in control("state")["messages"].items():
        if m.get("thread_ts") == thread and m.get("blocks") and "[Stop]" not in card_text(m):
            out.append((ts, card_text(m)))
    return sorted(out)


before = {ts for ts, _ in finals()}
seen = len(control("state")["messages"])
event_ts = thread if not before and seen >= 0 and not any(
    m.get("thread_ts") == thread for m in control("state")["messages"].values()) else "%.6f" % time.time()
event = {"type": "app_mention", "user": "U0ANA", "channel": "C0GEN", "ts": event_ts,
         "text": "<@U0BOT> " + text}
if event_ts != thread:
    event["thread_ts"] = thread
control("envelope", {"type": "events_api", "payload": {
    "type": "event_callback", "team_id": "T0ACME", "api_app_id": "A0APP", "event_id": "Ev" + event_ts.replace(".", ""),
    "event_time": int(time.time()), "event": event}})
deadline = time.time() + timeout
while True:
    new = [t for ts, t in finals() if ts not in before]
    if new:
        print(new[-1])
        break
    if time.time() > deadline:
        sys.exit("no new final card in thread %s within %d s" % (thread, timeout))
    time.sleep(0.2)

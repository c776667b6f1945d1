#!/usr/bin/python3
"""A loopback stand-in for Slack, speaking Slack's real protocols (api.slack.com: the Web API,
Socket Mode; what the bot uses of them is in docs/slack.md):

* the Web API over HTTP: POST /api/<method> with `Authorization: Bearer <token>` and a JSON or
  form-encoded body; every answer is HTTP 200 {"ok": true, ...} or {"ok": false, "error": ...},
  except a rate limit: HTTP 429 with `Retry-After: <seconds>`. auth.test, apps.connections.open
  (app token only), chat.postMessage, chat.update, reactions.add and reactions.remove, and the upload flow
  files.getUploadURLExternal → POST the bytes to upload_url → files.completeUploadExternal.
* Socket Mode over a real WebSocket (python3-websockets): a ticket URL from
  apps.connections.open, `hello` on connect, envelopes {envelope_id, type, payload,
  accepts_response_payload, retry_attempt, retry_reason}, acks {"envelope_id"}, `disconnect`
  {reason} messages, pings from the server.

Tests drive it over a control API on the same HTTP port (/_control/...):
  POST /_control/envelope {type, payload, conn?}  → {envelope_id}   send on the newest (or given) connection
  POST /_control/event {type, payload}            → {delivery}   Slack's own delivery: an envelope on one of
                                                  the app's open connections (in turn); one not acked
                                                  within ack_timeout_s (Slack: 3 s) — its connection
                                                  closed, or no connection open — is sent again
                                                  (retry_attempt 1…max_retries, a new envelope id, the
                                                  same event) on an open connection, then given up
                                                  (state.deliveries[id].lost)
  POST /_control/delivery {ack_timeout_s, max_retries, lose_every}   how /_control/event retries;
                                                  lose_every N: every Nth ack of such an envelope is
                                                  lost on its way (Slack never saw it: it sends the
                                                  event again, as it does when an ack is late)
  POST /_control/disconnect {reason}              send `disconnect` on every open connection
  POST /_control/drop                             close every connection without a close frame
  POST /_control/rate_limit {method, count, retry_after}   the next COUNT calls answer 429
  POST /_control/ping {count}                     ping the newest connection COUNT times → {rtt_ms}
  POST /_control/fail {method, error, count}      the next COUNT calls answer ok=false
  POST /_control/thread {channel, ts, messages}   a thread's earlier messages ({ts, user, text}),
                                                  for conversations.replies
  POST /_control/file {name, mimetype, content_b64, redirect?} → a file object as on a
                                                  message; its url_private(_download) serves the
                                                  bytes to the bot token only (else Slack's
                                                  sign-in HTML), or answers 302 to `redirect`
  GET  /_control/state                            everything it saw (calls, acks, connections)

Usage: SLACK_BOT_TOKEN=… SLACK_APP_TOKEN=… slack_standin.py [--watch PID]   (prints "READY <http port>")
The tokens it accepts come from the environment, so they never sit in argv.
"""
import argparse
import asyncio
import base64
import json
import os
import sys
import time
import urllib.parse
import uuid

import websockets

import watched  # tests/support/watched.py: --watch PID

BOT = os.environ["SLACK_BOT_TOKEN"]
APP = os.environ["SLACK_APP_TOKEN"]
TEAM, BOT_USER, BOT_ID, APP_ID = "T0ACME", "U0BOT", "B0BOT", "A0APP"

state = {
    "calls": [],          # {method, token_ok, body, at}
    "acks": [],           # {envelope_id, latency_ms, conn}
    "sent": {},           # envelope_id -> {at, conn}
    "hellos": 0,
    "connections_opened": 0,
    "opened": [],         # {conn, at}: at = monotonic ms (its hello sent)
    "closed": [],         # {conn, code, at}
    "uploads": {},        # file_id -> {filename, length, bytes, bytes_b64}
    "messages": {},       # ts -> {channel, thread_ts, text, blocks, updates}
    "reactions": [],
    "unacked_junk": [],   # frames from the client that were not acks
    "threads": {},        # "channel/ts" -> [message] seeded by a spec (conversations.replies)
    "downloads": [],      # {id, token}: every file fetch and the token it came with
    "deliveries": {},     # delivery id -> {event_id, envelopes: [{envelope_id, conn}], acked_conn, lost}
}
DELIVERY = {"ack_timeout_s": 3.0, "max_retries": 3, "lose_every": 0}
delivery_acks = [0]
envelope_delivery = {}  # envelope id -> delivery id (/_control/event)
turn = [0]
HOSTED = {}        # file id -> {name, mimetype, bytes} (url_private_download)
USERS = {
    "U0ANA": {"id": "U0ANA", "name": "ana", "real_name": "Ana Lima", "profile": {"display_name": "ana"}},
    "U0BEN": {"id": "U0BEN", "name": "ben", "real_name": "Ben Okafor", "profile": {"display_name": "ben"}},
}
rate_limits = {}   # method -> [count, retry_after]
failures = {}      # method -> [count, error]
tickets = set()
conns = {}         # conn id -> websocket
port_holder = {}
ts_counter = [1700000000.000100]


def new_ts():
    ts_counter[0] += 0.0001
    return "%.6f" % ts_counter[0]


def parse_body(headers, body):
    ctype = headers.get("content-type", "")
    if ctype.startswith("application/json"):
        return json.loads(body.decode() or "{}")
    if ctype.startswith("application/x-www-form-urlencoded"):
        return {k: v[-1] for k, v in urllib.parse.parse_qs(body.decode()).items()}
    return {}


def web_api(method, headers, body):
    auth = headers.get("authorization", "")
    token = auth[7:] if auth.startswith("Bearer ") else None
    args = parse_body(headers, body)
    call = {"method": method, "args": args, "at": time.monotonic() * 1000, "wall": time.time() * 1000,
            "token": "bot" if token == BOT else "app" if token == APP else "other"}
    state["calls"].append(call)
    rl = rate_limits.get(method)
    if rl and rl[0] > 0:
        rl[0] -= 1
        call["answer"] = 429
        return 429, {"retry-after": str(rl[1])}, {"ok": False, "error": "ratelimited"}
    fl = failures.get(method)
    if fl and fl[0] > 0:
        fl[0] -= 1
        call["answer"] = fl[1]
        return 200, {}, {"ok": False, "error": fl[1]}
    if method == "apps.connections.open":
        if token == BOT:
            return 200, {}, {"ok": False, "error": "not_allowed_token_type"}
        if token != APP:
            return 200, {}, {"ok": False, "error": "invalid_auth"}
        ticket = uuid.uuid4().hex
        tickets.add(ticket)
        url = "ws://127.0.0.1:%d/link/?ticket=%s&app_id=%s" % (port_holder["ws"], ticket, APP_ID)
        return 200, {}, {"ok": True, "url": url}
    if token is None:
        return 200, {}, {"ok": False, "error": "not_authed"}
    if token != BOT:
        return 200, {}, {"ok": False, "error": "invalid_auth"}
    if method == "auth.test":
        return 200, {}, {"ok": True, "url": "https://acme.slack.com/", "team": "Acme",
                         "user": "switchboard", "team_id": TEAM, "user_id": BOT_USER,
                         "bot_id": BOT_ID}
    if method == "chat.postMessage":
        if not args.get("channel"):
            return 200, {}, {"ok": False, "error": "channel_not_found"}
        if len(args.get("text", "")) > 40000:
            return 200, {}, {"ok": False, "error": "msg_too_long"}
        ts = new_ts()
        state["messages"][ts] = {"channel": args["channel"], "thread_ts": args.get("thread_ts"),
                                 "text": args.get("text"), "blocks": args.get("blocks"),
                                 "updates": 0}
        return 200, {}, {"ok": True, "channel": args["channel"], "ts": ts,
                         "message": {"text": args.get("text"), "ts": ts}}
    if method == "chat.update":
        m = state["messages"].get(args.get("ts"))
        if m is None or m["channel"] != args.get("channel"):
            return 200, {}, {"ok": False, "error": "message_not_found"}
        m["text"], m["blocks"] = args.get("text"), args.get("blocks")
        m["updates"] += 1
        return 200, {}, {"ok": True, "channel": args["channel"], "ts": args["ts"]}
    if method == "chat.getPermalink":
        if not args.get("channel") or not args.get("message_ts"):
            return 200, {}, {"ok": False, "error": "message_not_found"}
        return 200, {}, {"ok": True, "channel": args["channel"],
                         "permalink": "https://acme.slack.com/archives/%s/p%s"
                         % (args["channel"], args["message_ts"].replace(".", ""))}
    if method == "reactions.add":
        state["reactions"].append(args)
        return 200, {}, {"ok": True}
    if method == "reactions.remove":
        # as Slack: no_reaction when the bot has not put that emoji on that message
        for i, r in enumerate(state["reactions"]):
            if r.get("channel") == args.get("channel") and r.get("timestamp") == args.get("timestamp") \
                    and r.get("name") == args.get("name"):
                del state["reactions"][i]
                return 200, {}, {"ok": True}
        return 200, {}, {"ok": False, "error": "no_reaction"}
    if method == "conversations.replies":
        # the thread's messages, oldest first: the ones a spec seeded, then the bot's own posts
        channel, ts = args.get("channel"), args.get("ts")
        seeded = state["threads"].get("%s/%s" % (channel, ts))
        posted = [dict(type="message", ts=k, user=BOT_USER, bot_id=BOT_ID, text=m["text"], thread_ts=ts)
                  for k, m in state["messages"].items() if m["channel"] == channel and m["thread_ts"] == ts]
        if seeded is None and not posted:
            return 200, {}, {"ok": False, "error": "thread_not_found"}
        msgs = sorted((seeded or []) + posted, key=lambda m: float(m["ts"]))
        try:
            limit = int(args.get("limit") or 1000)
        except ValueError:
            return 200, {}, {"ok": False, "error": "invalid_arguments"}
        return 200, {}, {"ok": True, "messages": msgs[:limit], "has_more": len(msgs) > limit}
    if method == "users.info":
        u = USERS.get(args.get("user"))
        if u is None:
            return 200, {}, {"ok": False, "error": "user_not_found"}
        return 200, {}, {"ok": True, "user": u}
    if method == "files.getUploadURLExternal":
        try:
            length = int(args.get("length", ""))
        except ValueError:
            return 200, {}, {"ok": False, "error": "invalid_arguments"}
        if not args.get("filename"):
            return 200, {}, {"ok": False, "error": "invalid_arguments"}
        fid = "F" + uuid.uuid4().hex[:10].upper()
        state["uploads"][fid] = {"filename": args["filename"], "length": length, "bytes": None,
                                 "completed": False}
        return 200, {}, {"ok": True, "file_id": fid,
                         "upload_url": "http://127.0.0.1:%d/upload/%s" % (port_holder["http"], fid)}
    if method == "files.completeUploadExternal":
        files = args.get("files")
        if isinstance(files, str):
            files = json.loads(files)
        out = []
        for f in files or []:
            up = state["uploads"].get(f.get("id"))
            if up is None or up["bytes"] is None:
                return 200, {}, {"ok": False, "error": "file_not_found"}
            up["completed"] = True
            up["channel_id"] = args.get("channel_id")
            up["thread_ts"] = args.get("thread_ts")
            up["title"] = f.get("title")
            out.append({"id": f["id"], "title": f.get("title"),
                        "permalink": "https://acme.slack.com/files/%s/%s" % (BOT_USER, f["id"])})
        return 200, {}, {"ok": True, "files": out}
    return 200, {}, {"ok": False, "error": "unknown_method"}


async def send_envelope(args):
    cid = args.get("conn")
    live = [c for c in conns if conns[c].open]
    if cid is None:
        if not live:
            return 409, {"error": "no open connection"}
        cid = live[-1]
    ws = conns.get(cid)
    if ws is None or not ws.open:
        return 409, {"error": "connection %s is not open" % cid}
    eid = args.get("envelope_id") or str(uuid.uuid4())
    env = {"envelope_id": eid, "type": args["type"], "payload": args["payload"],
           "accepts_response_payload": False, "retry_attempt": 0, "retry_reason": ""}
    state["sent"][eid] = {"at": time.monotonic() * 1000, "conn": cid}
    await ws.send(json.dumps(env))
    return 200, {"envelope_id": eid, "conn": cid}


async def deliver(did, attempt):
    """One attempt of Slack's delivery of an event: on the next open connection in turn."""
    d = state["deliveries"][did]
    live = [c for c in conns if conns[c].open]
    if live:
        turn[0] += 1
        cid = live[turn[0] % len(live)]
        eid = str(uuid.uuid4())
        envelope_delivery[eid] = did
        env = {"envelope_id": eid, "type": d["type"], "payload": d["payload"],
               "accepts_response_payload": False, "retry_attempt": attempt,
               "retry_reason": "timeout" if attempt else ""}
        state["sent"][eid] = {"at": time.monotonic() * 1000, "conn": cid}
        d["envelopes"].append({"envelope_id": eid, "conn": cid})
        try:
            await conns[cid].send(json.dumps(env))
        except websockets.ConnectionClosed:
            pass
    await asyncio.sleep(DELIVERY["ack_timeout_s"])
    if d["acked_conn"] is not None:
        return
    if attempt >= DELIVERY["max_retries"]:
        d["lost"] = True
        return
    await deliver(did, attempt + 1)


async def control(method, path, body):
    args = json.loads(body.decode() or "{}") if body else {}
    if path == "/_control/state":
        return 200, dict(state, open_connections=[c for c in conns if conns[c].open])
    if path == "/_control/envelope":
        # Slack's timestamps follow time: what the bot posts after an event comes after it
        payload = args.get("payload")
        event = payload.get("event") if isinstance(payload, dict) else None
        try:
            ts_counter[0] = max(ts_counter[0], float(event.get("ts")))
        except (AttributeError, TypeError, ValueError):
            pass
        return await send_envelope(args)
    if path == "/_control/event":
        did = "D%d" % (len(state["deliveries"]) + 1)
        state["deliveries"][did] = {"type": args["type"], "payload": args["payload"], "envelopes": [],
                                    "event_id": args["payload"].get("event_id"), "acked_conn": None,
                                    "lost": False}
        asyncio.ensure_future(deliver(did, 0))
        return 200, {"delivery": did}
    if path == "/_control/delivery":
        for k in ("ack_timeout_s", "max_retries", "lose_every"):
            if k in args:
                DELIVERY[k] = args[k]
        return 200, {}
    if path == "/_control/disconnect":
        for ws in list(conns.values()):
            if ws.open:
                await ws.send(json.dumps({"type": "disconnect", "reason": args.get("reason", "refresh_requested"),
                                          "debug_info": {"host": "standin"}}))
        return 200, {}
    if path == "/_control/drop":
        for ws in list(conns.values()):
            if ws.open:
                ws.transport.abort()
        return 200, {}
    if path == "/_control/ping":
        live = [c for c in conns.values() if c.open]
        rtts = []
        for _ in range(args.get("count", 1)):
            t = time.monotonic()
            pong = await live[-1].ping()
            await pong
            rtts.append((time.monotonic() - t) * 1000)
        return 200, {"rtt_ms": rtts}
    if path == "/_control/thread":
        state["threads"]["%s/%s" % (args["channel"], args["ts"])] = [
            dict(type="message", **m) for m in args["messages"]]
        return 200, {}
    if path == "/_control/file":
        # a file as Slack describes it on a message: url_private(_download) need the bot token
        fid = "F" + uuid.uuid4().hex[:10].upper()
        data = base64.b64decode(args["content_b64"])
        HOSTED[fid] = {"name": args["name"], "mimetype": args["mimetype"], "bytes": data,
                       "redirect": args.get("redirect")}
        url = "http://127.0.0.1:%d/files-pri/%s-%s/%s" % (port_holder["http"], TEAM, fid, args["name"])
        return 200, {"id": fid, "name": args["name"], "title": args["name"], "mimetype": args["mimetype"],
                     "filetype": args.get("filetype", "binary"), "size": len(data),
                     "url_private": url, "url_private_download": url + "?download=1"}
    if path == "/_control/rate_limit":
        rate_limits[args["method"]] = [args.get("count", 1), args.get("retry_after", 1)]
        return 200, {}
    if path == "/_control/fail":
        failures[args["method"]] = [args.get("count", 1), args.get("error", "internal_error")]
        return 200, {}
    return 404, {"error": "no such control"}


async def http_conn(reader, writer):
    try:
        while True:
            line = await reader.readline()
            if not line:
                return
            method, target, _ = line.decode("latin-1").split(" ", 2)
            headers = {}
            while True:
                h = await reader.readline()
                if h in (b"\r\n", b"\n", b""):
                    break
                k, v = h.decode("latin-1").split(":", 1)
                headers[k.strip().lower()] = v.strip()
            n = int(headers.get("content-length", "0"))
            body = await reader.readexactly(n) if n else b""
            path = target.split("?", 1)[0]
            extra = {}
            if path.startswith("/_control/"):
                status, answer = await control(method, path, body)
                out = json.dumps(answer).encode()
                ctype = "application/json"
            elif path.startswith("/api/") and method == "POST":
                status, extra, answer = web_api(path[5:], headers, body)
                out = json.dumps(answer).encode()
                ctype = "application/json; charset=utf-8"
            elif path.startswith("/files-pri/") and method == "GET":
                # Slack serves a private file only with a token that may read it; without one the
                # answer is its sign-in page (HTML, 200), not the file
                fid = path.split("/")[2].split("-", 1)[-1]
                f = HOSTED.get(fid)
                auth = headers.get("authorization", "")
                state["downloads"].append({"id": fid, "token": "bot" if auth == "Bearer " + BOT else "other"})
                if f is None:
                    status, out, ctype = 404, b"file not found", "text/plain"
                elif f["redirect"]:
                    status, out, ctype = 302, b"", "text/plain"
                    extra = {"location": f["redirect"]}
                elif auth != "Bearer " + BOT:
                    status, out, ctype = 200, b"<!DOCTYPE html><html><body>Sign in to Slack</body></html>", "text/html; charset=utf-8"
                else:
                    status, out, ctype = 200, f["bytes"], f["mimetype"]
            elif path.startswith("/upload/") and method == "POST":
                fid = path[8:]
                up = state["uploads"].get(fid)
                if up is None:
                    status, out = 404, b"no such upload"
                else:
                    up["bytes"] = body.decode("utf-8", "replace")
                    up["received"] = len(body)
                    up["bytes_b64"] = base64.b64encode(body).decode()  # binary uploads (a screenshot)
                    status, out = 200, ("OK - %d" % len(body)).encode()
                ctype = "text/plain"
            else:
                status, out, ctype = 404, b"not found", "text/plain"
            reason = {200: "OK", 302: "Found", 404: "Not Found", 409: "Conflict", 429: "Too Many Requests"}.get(status, "X")
            head = "HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n" % (status, reason, ctype, len(out))
            for k, v in extra.items():
                head += "%s: %s\r\n" % (k, v)
            writer.write(head.encode() + b"\r\n" + out)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError, ValueError):
        pass
    finally:
        writer.close()


async def ws_handler(ws, path=None):
    path = path or ws.path
    q = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)
    ticket = (q.get("ticket") or [""])[0]
    if ticket not in tickets:
        await ws.close(4001, "invalid ticket")
        return
    tickets.discard(ticket)
    state["connections_opened"] += 1
    cid = state["connections_opened"]
    conns[cid] = ws
    await ws.send(json.dumps({"type": "hello", "num_connections": sum(1 for c in conns.values() if c.open),
                              "debug_info": {"host": "standin", "approximate_connection_time": 18060},
                              "connection_info": {"app_id": APP_ID}}))
    state["hellos"] += 1
    state["opened"].append({"conn": cid, "at": time.monotonic() * 1000})
    try:
        async for raw in ws:
            now = time.monotonic() * 1000
            try:
                msg = json.loads(raw)
            except ValueError:
                state["unacked_junk"].append(raw[:200])
                continue
            eid = msg.get("envelope_id") if isinstance(msg, dict) else None
            if eid and eid in state["sent"]:
                state["acks"].append({"envelope_id": eid, "conn": cid,
                                      "latency_ms": now - state["sent"][eid]["at"]})
                did = envelope_delivery.get(eid)
                if did:
                    delivery_acks[0] += 1
                    every = DELIVERY["lose_every"]
                    if every and delivery_acks[0] % every == 0:
                        state["acks_lost"] = state.get("acks_lost", 0) + 1
                    elif state["deliveries"][did]["acked_conn"] is None:
                        state["deliveries"][did]["acked_conn"] = cid
            else:
                state["unacked_junk"].append(str(raw)[:200])
    except websockets.ConnectionClosed:
        pass
    finally:
        state["closed"].append({"conn": cid, "code": ws.close_code, "at": time.monotonic() * 1000})


async def main():
    ap = argparse.ArgumentParser()
    watched.add_argument(ap)
    watched.end_with(ap.parse_args().watch)
    http = await asyncio.start_server(http_conn, "127.0.0.1", 0)
    port_holder["http"] = http.sockets[0].getsockname()[1]
    ws = await websockets.serve(ws_handler, "127.0.0.1", 0, ping_interval=5, ping_timeout=20)
    port_holder["ws"] = ws.sockets[0].getsockname()[1]
    print("READY %d" % port_holder["http"], flush=True)
    await asyncio.Future()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)

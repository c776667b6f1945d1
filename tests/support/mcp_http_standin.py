#!/usr/bin/env python3
"""A streamable-HTTP MCP server stand-in (JSON-RPC 2.0 over HTTP POST), for specs.

    mcp_http_standin.py --dir DIR --token TOKEN     writes DIR/port; logs requests to DIR/log

Like a real one it: requires Authorization: Bearer TOKEN (401 otherwise); requires Accept to
list both application/json and text/event-stream (406 otherwise); answers `initialize` with an
Mcp-Session-Id header and JSON; answers a notification with 202 and no body; refuses a later
request without that session id (400) or with another (404); answers tools/list as JSON and
tools/call as an SSE stream (a progress notification first, then the reply). Its one tool:
  lookup {key} → "value of KEY"
DIR/log gets one JSON line per request: {method, session, auth_ok} (never the token).
POST /_expire (no auth) forgets every session, as a server does when they expire or it restarts:
a later request with an old session id gets 404, and the client must initialize again.
"""
import argparse
import json
import os
import secrets
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SESSIONS = set()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body=b"", ctype="application/json", extra=None):
        self.send_response(status)
        if body:
            self.send_header("Content-Type", ctype)
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path == "/_expire":
            SESSIONS.clear()
            return self.reply(200, b"{}")
        msg = json.loads(raw)
        auth_ok = self.headers.get("Authorization") == "Bearer " + ARGS.token
        session = self.headers.get("Mcp-Session-Id")
        with open(os.path.join(ARGS.dir, "log"), "a") as f:
            f.write(json.dumps({"method": msg.get("method"), "session": session, "auth_ok": auth_ok,
                                "version": self.headers.get("MCP-Protocol-Version")}) + "\n")
        if not auth_ok:
            return self.reply(401, b'{"error":"unauthorized"}')
        accept = self.headers.get("Accept") or ""
        if "application/json" not in accept or "text/event-stream" not in accept:
            return self.reply(406, b'{"error":"not acceptable"}')
        method, mid = msg.get("method"), msg.get("id")
        if method == "initialize":
            body = {"jsonrpc": "2.0", "id": mid, "result": {
                "protocolVersion": "2025-03-26", "capabilities": {"tools": {}},
                "serverInfo": {"name": "lookup", "version": "1"}}}
            session = "sess-" + secrets.token_hex(8)
            SESSIONS.add(session)
            return self.reply(200, json.dumps(body).encode(), extra={"Mcp-Session-Id": session})
        if session is None:
            return self.reply(400, b'{"error":"no session"}')
        if session not in SESSIONS:
            return self.reply(404, b'{"error":"unknown session"}')
        if mid is None:
            return self.reply(202)
        if method == "tools/list":
            body = {"jsonrpc": "2.0", "id": mid, "result": {"tools": [{
                "name": "lookup", "description": "Look a key up.",
                "inputSchema": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}}]}}
            return self.reply(200, json.dumps(body).encode())
        if method == "tools/call":
            key = msg["params"]["arguments"].get("key")
            note = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}}
            answer = {"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": "value of %s" % key}]}}
            sse = "event: message\ndata: %s\n\nevent: message\ndata: %s\n\n" % (json.dumps(note), json.dumps(answer))
            return self.reply(200, sse.encode(), ctype="text/event-stream")
        body = {"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no method"}}
        return self.reply(200, json.dumps(body).encode())


ap = argparse.ArgumentParser()
ap.add_argument("--dir", required=True)
ap.add_argument("--token", required=True)
ARGS = ap.parse_args()
server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(os.path.join(ARGS.dir, "port.tmp"), "w") as f:
    f.write(str(server.server_address[1]))
os.rename(os.path.join(ARGS.dir, "port.tmp"), os.path.join(ARGS.dir, "port"))
server.serve_forever()

#!/usr/bin/env python3
"""A stand-in for Anthropic's Messages API (POST /v1/messages, streaming), scripted per test.

It speaks the real protocol: it checks x-api-key (401 authentication_error when wrong, as
Anthropic answers), anthropic-version and the JSON body, and streams the real server-sent
events — message_start, ping, content_block_start / content_block_delta (text_delta,
input_json_delta) / content_block_stop, message_delta, message_stop — cut into writes of a few
bytes so that events, lines and JSON fragments are split at awkward places.

    model_standin.py --dir DIR --key KEY    writes DIR/pid, then DIR/port (last)

Control routes (no key needed):
  PUT /_script     body: a JSON list of answers, served in order (replaces the queue)
  GET /_requests   the requests so far: [{headers, body (parsed JSON), t}]
An answer (all fields optional):
  content          [{"type": "text", "text": …} | {"type": "tool_use", "name", "input", "id"?}
                    | {"type": "<anything else>"} (a block type the client must skip)]
  stop_reason      default: "tool_use" when content has a tool_use, else "end_turn"
  usage            {"input_tokens", "output_tokens"} (defaults 100 / 20)
  split            characters per text_delta / input_json_delta fragment (default 3)
  chunk            bytes per socket write (default 7)
  hold_ms          pause after message_start (a long answer; `stop` lands in it)
  touch            a path created when the stream starts; with hold_ms, once the events
                   before the hold (message_start) are written to the client's socket
  cut_after        close the connection after this many events (a stream cut mid-answer)
  status, error, headers   an HTTP error instead: {"status": 429, "headers": {"retry-after": "1"},
                    "error": {"type": "rate_limit_error", "message": "…"}}
  sse_error        {"type", "message"}: an error event after message_start (mid-stream failure)
With the queue empty a request gets the text answer "(stand-in: no scripted answer)".
"""
import argparse
import hmac
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
SCRIPT = []
REQUESTS = []
KEY = ""
COUNTER = [0]


def sse(event, doc):
    return ("event: %s\ndata: %s\n\n" % (event, json.dumps(doc))).encode()


def events_for(answer, model):
    content = answer.get("content") or [{"type": "text", "text": "(stand-in: no scripted answer)"}]
    usage = answer.get("usage") or {}
    split = max(1, int(answer.get("split", 3)))
    has_tool = any(b.get("type") == "tool_use" for b in content)
    stop = answer.get("stop_reason") or ("tool_use" if has_tool else "end_turn")
    COUNTER[0] += 1
    out = [sse("message_start", {"type": "message_start", "message": {
        "id": "msg_standin_%d" % COUNTER[0], "type": "message", "role": "assistant",
        "model": model, "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": usage.get("input_tokens", 100), "output_tokens": 1}}})]
    out.append(("HOLD", None))
    if answer.get("sse_error"):
        out.append(sse("error", {"type": "error", "error": answer["sse_error"]}))
        return out
    out.append(sse("ping", {"type": "ping"}))
    out.append(sse("standin_future_event", {"type": "standin_future_event", "x": 1}))
    for i, b in enumerate(content):
        kind = b.get("type")
        if kind == "text":
            out.append(sse("content_block_start", {"type": "content_block_start", "index": i,
                                                   "content_block": {"type": "text", "text": ""}}))
            t = b.get("text", "")
            for k in range(0, len(t), split):
                out.append(sse("content_block_delta", {"type": "content_block_delta", "index": i,
                               "delta": {"type": "text_delta", "text": t[k:k + split]}}))
        elif kind == "tool_use":
            tid = b.get("id") or "toolu_standin_%d_%d" % (COUNTER[0], i)
            out.append(sse("content_block_start", {"type": "content_block_start", "index": i,
                           "content_block": {"type": "tool_use", "id": tid, "name": b["name"], "input": {}}}))
            raw = b["raw_input"] if "raw_input" in b else json.dumps(b.get("input", {}))
            for k in range(0, len(raw), split):
                out.append(sse("content_block_delta", {"type": "content_block_delta", "index": i,
                               "delta": {"type": "input_json_delta", "partial_json": raw[k:k + split]}}))
        else:
            out.append(sse("content_block_start", {"type": "content_block_start", "index": i,
                           "content_block": {"type": kind, "data": "opaque"}}))
            out.append(sse("content_block_delta", {"type": "content_block_delta", "index": i,
                           "delta": {"type": kind + "_delta", "x": "y"}}))
        out.append(sse("content_block_stop", {"type": "content_block_stop", "index": i}))
    out.append(sse("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": stop, "stop_sequence": None},
                                     "usage": {"output_tokens": usage.get("output_tokens", 20)}}))
    out.append(sse("message_stop", {"type": "message_stop"}))
    return out


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def _read(self):
        n = int(self.headers.get("content-length") or 0)
        return self.rfile.read(n) if n else b""

    def _send(self, status, doc, headers=None):
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.send_header("request-id", "req_standin")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status, kind, message, headers=None):
        self._send(status, {"type": "error", "error": {"type": kind, "message": message}}, headers)

    def _chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_GET(self):
        self._read()
        if self.path == "/_requests":
            with LOCK:
                return self._send(200, REQUESTS)
        self._error(404, "not_found_error", "no such route")

    def do_PUT(self):
        body = self._read()
        if self.path == "/_script":
            with LOCK:
                SCRIPT[:] = json.loads(body)
            return self._send(200, {})
        self._error(404, "not_found_error", "no such route")

    def do_POST(self):
        raw = self._read()
        if self.path != "/v1/messages":
            return self._error(404, "not_found_error", "no such route")
        key = self.headers.get("x-api-key") or ""
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        with LOCK:
            REQUESTS.append({"headers": {k.lower(): v for k, v in self.headers.items()},
                             "body": body, "t": time.monotonic()})
        if not hmac.compare_digest(key.encode(), KEY.encode()):
            return self._error(401, "authentication_error", "invalid x-api-key")
        if self.headers.get("anthropic-version") != "2023-06-01":
            return self._error(400, "invalid_request_error", "anthropic-version header is required")
        if not isinstance(body, dict) or not body.get("model") or not body.get("messages") \
                or not isinstance(body.get("max_tokens"), int):
            return self._error(400, "invalid_request_error", "model, max_tokens and messages are required")
        problem = check_tool_results(body["messages"])
        if problem:
            return self._error(400, "invalid_request_error", problem)
        with LOCK:
            answer = SCRIPT.pop(0) if SCRIPT else {}
        if answer.get("status"):
            err = answer.get("error") or {"type": "api_error", "message": "stand-in error"}
            return self._error(answer["status"], err["type"], err["message"], answer.get("headers"))
        if answer.get("touch") and not answer.get("hold_ms"):
            open(answer["touch"], "w").close()
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        stream = events_for(answer, body["model"])
        chunk = max(1, int(answer.get("chunk", 7)))
        sent = 0
        cut_after = answer.get("cut_after")
        pending = b""
        try:
            for item in stream:
                if isinstance(item, tuple):
                    if pending:
                        self._chunk(pending)
                        pending = b""
                    if answer.get("hold_ms"):
                        self.wfile.flush()
                        if answer.get("touch"):
                            open(answer["touch"], "w").close()
                        time.sleep(answer["hold_ms"] / 1000.0)
                    continue
                if cut_after is not None and sent >= cut_after:
                    if pending:
                        self._chunk(pending[: len(pending) // 2 or 1])
                    self.close_connection = True
                    return
                pending += item
                sent += 1
                while len(pending) >= chunk:
                    self._chunk(pending[:chunk])
                    pending = pending[chunk:]
            if pending:
                self._chunk(pending)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


def check_tool_results(messages):
    """Every tool_use of an assistant message has exactly one tool_result, in order, first in
    the next user message — as the real API requires (it answers 400 otherwise)."""
    for i, m in enumerate(messages):
        if m.get("role") != "assistant" or not isinstance(m.get("content"), list):
            continue
        ids = [b["id"] for b in m["content"] if b.get("type") == "tool_use"]
        if not ids:
            continue
        if i + 1 >= len(messages):
            return "tool_use ids without tool_result blocks: %s" % ids
        nxt = messages[i + 1].get("content")
        got = [b.get("tool_use_id") for b in nxt if isinstance(b, dict) and b.get("type") == "tool_result"] \
            if isinstance(nxt, list) else []
        if got != ids:
            return "tool_result blocks %s do not answer the tool_use ids %s in order" % (got, ids)
    return None


def main():
    global KEY
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--key", required=True)
    a = ap.parse_args()
    KEY = a.key
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    with open(os.path.join(a.dir, "pid"), "w") as f:
        f.write(str(os.getpid()))
    tmp = os.path.join(a.dir, "port.tmp")
    with open(tmp, "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(tmp, os.path.join(a.dir, "port"))
    srv.serve_forever()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A stand-in for an OpenAI-compatible Chat Completions endpoint (vLLM, Ollama, OpenRouter,
OpenAI): POST /v1/chat/completions with "stream": true, scripted per test.

It speaks the real wire format: `Authorization: Bearer KEY` (401 with OpenAI's error shape,
code invalid_api_key, when wrong), a JSON body checked as the API checks it, and an answer of
server-sent `data: {chat.completion.chunk}` events ending with `data: [DONE]`, cut into writes
of a few bytes so that events, lines and JSON fragments split at awkward places.

    chat_standin.py --dir DIR --key KEY [--watch PID]   writes DIR/pid, then DIR/port (last)

Refused with 400 invalid_request_error, as the API does:
  - a body that is not JSON, no model, messages not a non-empty list, stream not true
  - a message whose role is not system / user / assistant / tool
  - a tool message whose tool_call_id answers no tool call of the assistant message before it
    ("messages with role 'tool' must be a response to a preceding message with 'tool_calls'")
  - an assistant message with tool_calls not followed by a tool message for each id
  - a tool call whose function.arguments is not a string holding a JSON object
  - a tools entry that is not {"type": "function", "function": {"name", "parameters": {…}}}

Control routes (no key needed):
  PUT /_script     a JSON list of answers, served in order
  GET /_requests   [{headers, body, status}]
An answer: {"content": [{"type": "text", "text"} | {"type": "tool_use", "name", "input"}],
            "split": characters per delta (default 3), "chunk": bytes per write (default 7),
            "usage": {"prompt_tokens", "completion_tokens"} (default 100 / 20)}
"""
import argparse
import json
import threading
import uuid

import standin_http  # tests/support/standin_http.py: server, handler, control routes
import watched  # tests/support/watched.py: --watch PID

LOCK = threading.Lock()
SCRIPT = []
REQUESTS = []
KEY = None


def check_body(body):
    """None, or the API's reason for refusing the body."""
    if not isinstance(body, dict):
        return "We could not parse the JSON body of your request."
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "you must provide a model parameter"
    if body.get("stream") is not True:
        return "this stand-in answers streamed requests only (stream: true)"
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        return "'messages' must be a non-empty array"
    for i, t in enumerate(body.get("tools") or []):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(fn, dict) \
                or not isinstance(fn.get("name"), str) or not isinstance(fn.get("parameters"), dict):
            return "Invalid 'tools[%d]': expected {type: function, function: {name, parameters}}" % i
    waiting = set()
    for i, m in enumerate(msgs):
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ("system", "user", "assistant", "tool"):
            return "Invalid value for 'messages[%d].role': %r" % (i, role)
        if role == "tool":
            if m.get("tool_call_id") not in waiting:
                return ("Invalid parameter: messages with role 'tool' must be a response to a preceeding "
                        "message with 'tool_calls'. (messages[%d])" % i)
            waiting.discard(m["tool_call_id"])
            if not isinstance(m.get("content"), str):
                return "messages[%d].content of a tool message must be a string here" % i
            continue
        if waiting:
            return ("An assistant message with 'tool_calls' must be followed by tool messages responding "
                    "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
                    + ", ".join(sorted(waiting)))
        if role == "assistant":
            for c in m.get("tool_calls") or []:
                fn = c.get("function") or {}
                try:
                    args = json.loads(fn.get("arguments"))
                except (TypeError, ValueError):
                    return "messages[%d].tool_calls: arguments must be a JSON string" % i
                if not isinstance(args, dict) or c.get("type") != "function" or not c.get("id"):
                    return "messages[%d].tool_calls: each is {id, type: function, function: {name, arguments}}" % i
                waiting.add(c["id"])
    if waiting:
        return "the last assistant message's tool calls have no tool messages"
    return None


def chunks_of(answer, model):
    """The chat.completion.chunk documents of one scripted answer."""
    cid = "chatcmpl-" + uuid.uuid4().hex[:12]
    split = max(1, int(answer.get("split", 3)))

    def chunk(delta, finish=None):
        return {"id": cid, "object": "chat.completion.chunk", "created": 1700000000, "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    out = [chunk({"role": "assistant", "content": ""})]
    calls = 0
    for block in answer.get("content") or [{"type": "text", "text": "(stand-in: no scripted answer)"}]:
        if block["type"] == "text":
            text = block["text"]
            for i in range(0, len(text), split):
                out.append(chunk({"content": text[i:i + split]}))
        elif block["type"] == "tool_use":
            args = json.dumps(block.get("input") or {})
            out.append(chunk({"tool_calls": [{"index": calls, "id": "call_" + uuid.uuid4().hex[:10],
                                              "type": "function",
                                              "function": {"name": block["name"], "arguments": ""}}]}))
            for i in range(0, len(args), split):
                out.append(chunk({"tool_calls": [{"index": calls, "function": {"arguments": args[i:i + split]}}]}))
            calls += 1
    out.append(chunk({}, "tool_calls" if calls else "stop"))
    usage = answer.get("usage") or {"prompt_tokens": 100, "completion_tokens": 20}
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    out.append({"id": cid, "object": "chat.completion.chunk", "created": 1700000000, "model": model,
                "choices": [], "usage": usage})
    return out


class Handler(standin_http.Scripted):
    LOCK, SCRIPT, REQUESTS = LOCK, SCRIPT, REQUESTS

    def _error(self, record, status, message, kind="invalid_request_error", code=None):
        record["status"] = status
        self._send(status, {"error": {"message": message, "type": kind, "param": None, "code": code}})

    def do_GET(self):
        if not self._control("GET", self._read()):
            self._send(404, {"error": {"message": "no such route", "type": "invalid_request_error"}})

    def do_PUT(self):
        if not self._control("PUT", self._read()):
            self._send(404, {"error": {"message": "no such route", "type": "invalid_request_error"}})

    def do_POST(self):
        raw = self._read()
        record = self._record()
        if self.path != "/v1/chat/completions":
            return self._error(record, 404, "Invalid URL (POST %s)" % self.path)
        if self.headers.get("authorization") != "Bearer " + KEY:
            return self._error(record, 401, "Incorrect API key provided.", code="invalid_api_key")
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        record["body"] = body
        why = check_body(body)
        if why:
            return self._error(record, 400, why)
        answer = self._next_answer()
        stream = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks_of(answer, body["model"]))
        stream += b"data: [DONE]\n\n"
        self._stream("text/event-stream", stream, answer.get("chunk", 7))


def main():
    global KEY
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--key", required=True)
    watched.add_argument(ap)
    a = ap.parse_args()
    watched.end_with(a.watch)
    KEY = a.key
    standin_http.serve(Handler, a.dir)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A stand-in for Anthropic's Messages API (POST /v1/messages, streaming), scripted per test.

It speaks the real protocol: it checks x-api-key (401 authentication_error when wrong, as
Anthropic answers), anthropic-version and the JSON body, and streams the real server-sent
events — message_start, ping, content_block_start / content_block_delta (text_delta,
input_json_delta) / content_block_stop, message_delta, message_stop — cut into writes of a few
bytes so that events, lines and JSON fragments are split at awkward places.

    model_standin.py --dir DIR --key KEY    writes DIR/pid, then DIR/port (last)

Like the real API it refuses (400 invalid_request_error, the real error shape):
  - a body that is not valid UTF-8, or not JSON
  - a prompt over max_prompt_tokens (PUT /_config): "prompt is too long: N tokens > M maximum";
    tokens are counted as 1 per 4 bytes of the prompt's JSON (tools, system, messages)
  - a tool_use without its tool_result first in the next user message
  - with `thinking` enabled: budget_tokens < 1024 or ≥ max_tokens; a final assistant message
    of a tool loop that does not start with the thinking block it was given; a thinking block
    whose text or signature changed (the signature is an HMAC of the text, as a real one is
    checked by the API)
It reports usage as the API does: input_tokens (fresh), cache_creation_input_tokens and
cache_read_input_tokens from the request's cache_control breakpoints (a prefix up to a
breakpoint is cached when a request carries it; a later request reads the longest cached
prefix ending at one of its breakpoints or up to 20 blocks before it — a changed byte anywhere
before that is a miss: the prompt is hashed in the API's order, tools, system, messages, per
model; see cache_usage), output_tokens. With thinking enabled every answer starts with a thinking
block (the scripted `thinking` text, or a stand-in's).

Control routes (no key needed):
  PUT /_script     body: a JSON list of answers, served in order (replaces the queue); an
                   answer with "match": TEXT is not queued: it answers every request whose
                   last message has TEXT (the run's summary request, whenever it comes)
  PUT /_config     body: {"max_prompt_tokens": N} (default 200000), {"min_cache_tokens": N}
                   (default 0: the API's minimum cacheable prompt, 1024 for Sonnet)
  GET /_requests   the requests so far: [{headers, body (parsed JSON, null when unreadable),
                   t, bytes, status (of the answer), usage}]
An answer (all fields optional):
  content          [{"type": "text", "text": …} | {"type": "tool_use", "name", "input", "id"?}
                    | {"type": "<anything else>"} (a block type the client must skip)]
  stop_reason      default: "tool_use" when content has a tool_use, else "end_turn"
  usage            {"input_tokens", "output_tokens"} (default: counted from the request, 20 out)
  thinking         the text of a thinking block sent first (with thinking enabled)
  raw_input        a tool_use's input JSON as sent (a cut one: with stop_reason max_tokens)
                   A string of a tool_use's input "{{from_results:REGEX}}" is replaced by REGEX's
                   first group in the request's tool_result texts, the latest first (a model
                   reading an id a tool gave it); no match leaves it as it is
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
import hashlib
import hmac
import json
import os
import re
import threading
import time

import standin_http  # tests/support/standin_http.py: server, handler, control routes
import watched  # tests/support/watched.py: --watch PID

LOCK = threading.Lock()
SCRIPT = []
REQUESTS = []
KEY = ""
COUNTER = [0]
CONFIG = {"max_prompt_tokens": 200000}
MATCHERS = []
CACHE = {}           # sha256 of a prefix up to a breakpoint -> its tokens
SIGNING = os.urandom(16)


def sign(text):
    return hmac.new(SIGNING, text.encode(), hashlib.sha256).hexdigest()


def tokens(doc):
    return len(json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()) // 4


def strip_cache(b):
    return {k: v for k, v in b.items() if k != "cache_control"} if isinstance(b, dict) else b


def prompt_blocks(body):
    """The prompt in the API's cache order (tools, system, messages) as (block, marked) pairs."""
    out = [(strip_cache(t), "cache_control" in t) for t in body.get("tools") or []]
    system = body.get("system")
    if isinstance(system, str):
        out.append(({"type": "text", "text": system}, False))
    elif isinstance(system, list):
        out += [(strip_cache(b), isinstance(b, dict) and "cache_control" in b) for b in system]
    for m in body.get("messages") or []:
        c = m.get("content")
        if isinstance(c, str):  # the same tokens as one text block
            c = [{"type": "text", "text": c}]
        if isinstance(c, list):
            for i, b in enumerate(c):
                out.append(({"role": m.get("role"), "first": i == 0, "block": strip_cache(b)},
                            isinstance(b, dict) and "cache_control" in b))
    return out


LOOKBACK = 20  # blocks before a breakpoint the API checks for an earlier request's entry


def cache_usage(body):
    """(fresh input, cache written, cache read) for a request, as the API accounts them: the
    prompt is hashed block by block in its cache order (tools, system, messages), the model
    first; at each cache_control breakpoint the API looks for the longest prefix, ending at
    that breakpoint or up to LOOKBACK blocks before it, that an earlier request wrote — what
    it finds is read; the rest up to the last breakpoint is written (each breakpoint's prefix
    is then cached); what follows the last breakpoint is fresh. A prefix shorter than the
    config's min_cache_tokens is never cached, as the API's minimum cacheable length."""
    blocks = prompt_blocks(body)
    sizes = [len(json.dumps(b, ensure_ascii=False, separators=(",", ":")).encode()) for b, _ in blocks]
    total = (2 + sum(sizes) + max(0, len(sizes) - 1)) // 4

    def upto(i):  # tokens of the prompt's blocks 0..i, as tokens() counts them
        return (2 + sum(sizes[: i + 1]) + i) // 4

    h = hashlib.sha256(("model:%s\n" % body.get("model")).encode())
    prefix = []
    for b, _ in blocks:
        h.update(json.dumps(b, sort_keys=True).encode())
        prefix.append(h.copy().hexdigest())
    minimum = CONFIG.get("min_cache_tokens", 0)
    read = written_upto = 0
    marks = [i for i, (_, marked) in enumerate(blocks) if marked]
    for i in marks:
        for j in range(i, max(-1, i - LOOKBACK - 1), -1):
            if prefix[j] in CACHE:
                read = max(read, upto(j))
                break
        if upto(i) >= minimum:
            written_upto = max(written_upto, upto(i))
    for i in marks:
        if upto(i) >= minimum:
            CACHE[prefix[i]] = upto(i)
    written = max(0, written_upto - read)
    return max(0, total - read - written), written, read


FROM_RESULTS = re.compile(r"^\{\{from_results:(.*)\}\}$", re.S)


def result_texts(messages):
    """The text of every tool_result of the conversation, the latest first."""
    out = []
    for m in reversed(messages):
        for b in (m.get("content") if isinstance(m.get("content"), list) else []):
            if isinstance(b, dict) and b.get("type") == "tool_result":
                c = b.get("content")
                if isinstance(c, str):
                    out.append(c)
                elif isinstance(c, list):
                    out.extend(x.get("text", "") for x in c if isinstance(x, dict) and x.get("type") == "text")
    return out


def from_results(value, texts):
    if isinstance(value, dict):
        return {k: from_results(v, texts) for k, v in value.items()}
    if isinstance(value, list):
        return [from_results(v, texts) for v in value]
    m = FROM_RESULTS.match(value) if isinstance(value, str) else None
    if not m:
        return value
    for t in texts:
        found = re.search(m.group(1), t)
        if found:
            return found.group(1)
    return value


def with_results(answer, messages):
    """The answer with its tool_use inputs' {{from_results:…}} strings filled in."""
    content = answer.get("content")
    if not isinstance(content, list):
        return answer
    texts = None
    out = []
    for b in content:
        if isinstance(b, dict) and b.get("type") == "tool_use" and "input" in b:
            texts = texts if texts is not None else result_texts(messages)
            b = dict(b, input=from_results(b["input"], texts))
        out.append(b)
    return dict(answer, content=out)


def sse(event, doc):
    return ("event: %s\ndata: %s\n\n" % (event, json.dumps(doc))).encode()


def events_for(answer, model, counted, thinking):
    content = answer.get("content") or [{"type": "text", "text": "(stand-in: no scripted answer)"}]
    if thinking:
        content = [{"type": "thinking", "thinking": answer.get("thinking") or "(stand-in thinking)"}] + content
    usage = dict(counted)
    usage.update(answer.get("usage") or {})
    split = max(1, int(answer.get("split", 3)))
    has_tool = any(b.get("type") == "tool_use" for b in content)
    stop = answer.get("stop_reason") or ("tool_use" if has_tool else "end_turn")
    COUNTER[0] += 1
    out = [sse("message_start", {"type": "message_start", "message": {
        "id": "msg_standin_%d" % COUNTER[0], "type": "message", "role": "assistant",
        "model": model, "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": usage.get("input_tokens", 100),
                  "cache_creation_input_tokens": usage.get("cache_creation_input_tokens", 0),
                  "cache_read_input_tokens": usage.get("cache_read_input_tokens", 0),
                  "output_tokens": 1}}})]
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
        elif kind == "thinking":
            t = b.get("thinking", "")
            out.append(sse("content_block_start", {"type": "content_block_start", "index": i,
                           "content_block": {"type": "thinking", "thinking": "", "signature": ""}}))
            for k in range(0, len(t), split):
                out.append(sse("content_block_delta", {"type": "content_block_delta", "index": i,
                               "delta": {"type": "thinking_delta", "thinking": t[k:k + split]}}))
            out.append(sse("content_block_delta", {"type": "content_block_delta", "index": i,
                           "delta": {"type": "signature_delta", "signature": sign(t)}}))
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


class Handler(standin_http.Scripted):
    LOCK, SCRIPT, REQUESTS = LOCK, SCRIPT, REQUESTS
    SEND_HEADERS = {"request-id": "req_standin"}

    def _error(self, status, kind, message, headers=None):
        self._send(status, {"type": "error", "error": {"type": kind, "message": message}}, headers)

    def _refuse(self, record, status, kind, message):
        record["status"] = status
        record["error"] = message
        return self._error(status, kind, message)

    def _set_script(self, answers):
        SCRIPT[:] = [a for a in answers if not a.get("match")]
        MATCHERS[:] = [a for a in answers if a.get("match")]

    def do_GET(self):
        if not self._control("GET", self._read()):
            self._error(404, "not_found_error", "no such route")

    def do_PUT(self):
        body = self._read()
        if self._control("PUT", body):
            return
        if self.path == "/_config":
            with LOCK:
                CONFIG.update(json.loads(body))
            return self._send(200, {})
        self._error(404, "not_found_error", "no such route")

    def do_POST(self):
        raw = self._read()
        if self.path != "/v1/messages":
            return self._error(404, "not_found_error", "no such route")
        key = self.headers.get("x-api-key") or ""
        body, unreadable = None, None
        try:
            body = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            unreadable = "The request body is not valid UTF-8 (invalid byte at position %d)" % e.start
        except ValueError:
            unreadable = "The request body is not valid JSON"
        record = {"headers": {k.lower(): v for k, v in self.headers.items()},
                  "body": body, "t": time.monotonic(), "bytes": len(raw)}
        with LOCK:
            REQUESTS.append(record)
        if not hmac.compare_digest(key.encode(), KEY.encode()):
            return self._refuse(record, 401, "authentication_error", "invalid x-api-key")
        if self.headers.get("anthropic-version") != "2023-06-01":
            return self._refuse(record, 400, "invalid_request_error", "anthropic-version header is required")
        if unreadable:
            return self._refuse(record, 400, "invalid_request_error", unreadable)
        if not isinstance(body, dict) or not body.get("model") or not body.get("messages") \
                or not isinstance(body.get("max_tokens"), int):
            return self._refuse(record, 400, "invalid_request_error", "model, max_tokens and messages are required")
        problem = check_tool_results(body["messages"]) or check_thinking(body)
        if problem:
            return self._refuse(record, 400, "invalid_request_error", problem)
        with LOCK:
            size = tokens([b for b, _ in prompt_blocks(body)])
            limit = CONFIG["max_prompt_tokens"]
        if size > limit:
            return self._refuse(record, 400, "invalid_request_error",
                                "prompt is too long: %d tokens > %d maximum" % (size, limit))
        with LOCK:
            last = json.dumps(body["messages"][-1], ensure_ascii=False)
            matched = [a for a in MATCHERS if a["match"] in last]
            answer = matched[0] if matched else (SCRIPT.pop(0) if SCRIPT else {})
            answer = with_results(answer, body["messages"])
            record["matched"] = bool(matched)
            fresh, written, read = cache_usage(body)
        counted = {"input_tokens": fresh, "cache_creation_input_tokens": written,
                   "cache_read_input_tokens": read, "output_tokens": 20}
        record["status"] = answer.get("status") or 200
        record["usage"] = counted
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
        thinking = isinstance(body.get("thinking"), dict) and body["thinking"].get("type") == "enabled"
        stream = events_for(answer, body["model"], counted, thinking)
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


def check_thinking(body):
    """With thinking enabled, as the real API: a valid budget; the final assistant message of a
    tool loop starts with a thinking block; no thinking block altered (its signature)."""
    th = body.get("thinking")
    if not (isinstance(th, dict) and th.get("type") == "enabled"):
        return None
    budget = th.get("budget_tokens")
    if not isinstance(budget, int) or budget < 1024:
        return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
    if budget >= body["max_tokens"]:
        return "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size"
    msgs = body["messages"]
    for i, m in enumerate(msgs):
        for j, b in enumerate(m.get("content") if isinstance(m.get("content"), list) else []):
            if isinstance(b, dict) and b.get("type") == "thinking" and sign(b.get("thinking", "")) != b.get("signature"):
                return "messages.%d.content.%d: Invalid `signature` in `thinking` block" % (i, j)
    last = None
    for i, m in enumerate(msgs):
        if m.get("role") == "assistant":
            last = i
    if last is not None and last + 1 < len(msgs) and isinstance(msgs[last].get("content"), list):
        c = msgs[last]["content"]
        nxt = msgs[last + 1].get("content")
        loop = any(b.get("type") == "tool_use" for b in c) and isinstance(nxt, list) and \
            any(isinstance(b, dict) and b.get("type") == "tool_result" for b in nxt)
        if loop and (not c or c[0].get("type") not in ("thinking", "redacted_thinking")):
            return ("messages.%d.content.0.type: Expected `thinking` or `redacted_thinking`, but found `%s`. "
                    "When `thinking` is enabled, a final `assistant` message must start with a thinking block "
                    "(preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you "
                    "include thinking blocks from previous turns. To avoid this requirement, disable `thinking`. "
                    "Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
                    % (last, c[0].get("type") if c else "nothing"))
    return None


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

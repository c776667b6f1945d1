#!/usr/bin/env python3
"""A stand-in for Amazon Bedrock's InvokeModelWithResponseStream with an Anthropic model,
scripted per test (the same answers as model_standin.py).

It speaks the real wire format:
  - POST /model/{modelId}/invoke-with-response-stream, the modelId URL-encoded in the path
  - AWS Signature Version 4: the Authorization header's credential scope (date, region,
    service "bedrock"), its SignedHeaders (host and x-amz-date at least; x-amz-security-token
    when the key is temporary) and its Signature, recomputed here from the request as received
    with the secret key (403 with Bedrock's shape, {"message": …} and x-amzn-ErrorType, when
    it does not match — "The request signature we calculated does not match …")
  - the body: the Messages API's without model and stream, with anthropic_version
    "bedrock-2023-05-31" (400 ValidationException otherwise), tool results checked as the
    Messages API checks them (model_standin.py's checks)
  - the answer: application/vnd.amazon.eventstream frames (prelude with lengths and CRC32,
    string headers :event-type chunk, :content-type application/json, :message-type event,
    the payload {"bytes": base64 of one Messages API stream event, "p": padding}, CRC32 of the
    frame), cut into writes of a few bytes
  - an answer with "exception": {"type": "throttlingException", "message"} sends an exception
    frame after message_start instead of the rest

    bedrock_standin.py --dir DIR --key SECRET [--key-id ID] [--token TOKEN] [--region R] [--watch PID]

Control routes: PUT /_script, GET /_requests (as model_standin.py).
"""
import argparse
import base64
import datetime
import hashlib
import hmac
import json
import struct
import threading
import urllib.parse
import zlib

import model_standin as ms
import standin_http  # tests/support/standin_http.py: server, handler, control routes
import watched  # tests/support/watched.py: --watch PID

LOCK = threading.Lock()
SCRIPT = []
REQUESTS = []
CRED = {}


def frame(headers, payload):
    hb = b""
    for name, value in headers.items():
        n, v = name.encode(), value.encode()
        hb += struct.pack(">B", len(n)) + n + b"\x07" + struct.pack(">H", len(v)) + v
    total = 12 + len(hb) + len(payload) + 4
    prelude = struct.pack(">II", total, len(hb))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    body = prelude + hb + payload
    return body + struct.pack(">I", zlib.crc32(body))


def chunk_frame(doc):
    payload = json.dumps({"bytes": base64.b64encode(json.dumps(doc).encode()).decode(), "p": "abcdefgh"[:len(doc) % 8]})
    return frame({":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"}, payload.encode())


def check_signature(handler, raw_path, body):
    """None, or why the signature does not match (Bedrock's words)."""
    auth = handler.headers.get("authorization") or ""
    prefix = "AWS4-HMAC-SHA256 "
    if not auth.startswith(prefix):
        return "Authorization header requires 'Credential' parameter."
    parts = dict(p.strip().split("=", 1) for p in auth[len(prefix):].split(","))
    key_id, day, region, service, term = parts["Credential"].split("/")
    if key_id != CRED["key_id"]:
        return "The security token included in the request is invalid."
    if (region, service, term) != (CRED["region"], "bedrock", "aws4_request"):
        return "Credential should be scoped to a valid region / service 'bedrock'."
    amz_date = handler.headers.get("x-amz-date") or ""
    when = datetime.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.timezone.utc)
    if abs((datetime.datetime.now(datetime.timezone.utc) - when).total_seconds()) > 300 or amz_date[:8] != day:
        return "Signature expired or not yet current."
    signed = parts["SignedHeaders"].split(";")
    if "host" not in signed or "x-amz-date" not in signed:
        return "host and x-amz-date must be signed"
    if CRED.get("token"):
        if handler.headers.get("x-amz-security-token") != CRED["token"] or "x-amz-security-token" not in signed:
            return "The security token included in the request is invalid."
    canon = "".join("%s:%s\n" % (h, " ".join((handler.headers.get(h) or "").split())) for h in signed)
    path, _, query = raw_path.partition("?")
    canonical = "\n".join(["POST", urllib.parse.quote(path, safe="/~"), "&".join(sorted(query.split("&"))) if query else "",
                           canon, ";".join(signed), hashlib.sha256(body).hexdigest()])
    scope = "%s/%s/bedrock/aws4_request" % (day, region)
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    k = ("AWS4" + CRED["secret"]).encode()
    for part in (day, region, "bedrock", "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    want = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want, parts["Signature"]):
        return ("The request signature we calculated does not match the signature you provided. Check your "
                "AWS Secret Access Key and signing method.")
    return None


class Handler(standin_http.Scripted):
    LOCK, SCRIPT, REQUESTS = LOCK, SCRIPT, REQUESTS

    def _refuse(self, record, status, kind, message):
        record["status"] = status
        record["error"] = message
        self._send(status, {"message": message}, {"x-amzn-ErrorType": kind})

    def do_GET(self):
        if not self._control("GET", self._read()):
            self._send(404, {"message": "no such route"})

    def do_PUT(self):
        if not self._control("PUT", self._read()):
            self._send(404, {"message": "no such route"})

    def do_POST(self):
        raw = self._read()
        record = self._record(path=self.path)
        parts = self.path.split("/")
        if len(parts) != 4 or parts[1] != "model" or parts[3] != "invoke-with-response-stream":
            return self._refuse(record, 404, "UnknownOperationException", "no such operation: " + self.path)
        record["model"] = urllib.parse.unquote(parts[2])
        why = check_signature(self, self.path, raw)
        if why:
            return self._refuse(record, 403, "InvalidSignatureException", why)
        try:
            body = json.loads(raw)
        except ValueError:
            return self._refuse(record, 400, "ValidationException", "Malformed input request, please reformat your input and try again.")
        record["body"] = body
        if body.get("anthropic_version") != "bedrock-2023-05-31" or "model" in body or "stream" in body:
            return self._refuse(record, 400, "ValidationException",
                                "Malformed input request: #: required key [anthropic_version] not found, "
                                "extraneous key [model] is not permitted, extraneous key [stream] is not permitted")
        why = ms.check_tool_results(body.get("messages") or []) or ms.check_thinking(body)
        if why:
            return self._refuse(record, 400, "ValidationException", why)
        answer = self._next_answer()
        thinking = isinstance(body.get("thinking"), dict) and body["thinking"].get("type") == "enabled"
        frames = []
        for item in ms.events_for(answer, record["model"], {"input_tokens": 100}, thinking):
            if isinstance(item, tuple):
                continue
            doc = json.loads(item.decode().split("data: ", 1)[1])
            frames.append(chunk_frame(doc))
            if answer.get("exception") and doc["type"] == "message_start":
                e = answer["exception"]
                frames.append(frame({":exception-type": e["type"], ":content-type": "application/json",
                                     ":message-type": "exception"}, json.dumps({"message": e["message"]}).encode()))
                break
        self._stream("application/vnd.amazon.eventstream", b"".join(frames), answer.get("chunk", 7),
                     {"x-amzn-bedrock-content-type": "application/json"})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--key", required=True, help="the secret access key")
    ap.add_argument("--key-id", default="AKIASTANDIN000000001")
    ap.add_argument("--token", default="")
    ap.add_argument("--region", default="eu-west-3")
    watched.add_argument(ap)
    a = ap.parse_args()
    watched.end_with(a.watch)
    CRED.update(key_id=a.key_id, secret=a.key, token=a.token, region=a.region)
    standin_http.serve(Handler, a.dir)


if __name__ == "__main__":
    main()

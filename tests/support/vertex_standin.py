#!/usr/bin/env python3
"""A stand-in for Google's OAuth2 token endpoint and Vertex AI's streamRawPredict with an
Anthropic model, scripted per test (the same answers as model_standin.py).

It speaks the real wire formats:
  - POST /token, application/x-www-form-urlencoded, grant_type
    urn:ietf:params:oauth:grant-type:jwt-bearer and an assertion: a JWT whose RS256 signature is
    verified with the service account's public key, whose iss is the account's email (--key),
    aud this endpoint, scope cloud-platform, and whose exp is at most an hour after iat
    (400 {"error": "invalid_grant", "error_description"} otherwise, as Google answers);
    answers {"access_token", "expires_in": 3599, "token_type": "Bearer"}
  - POST /v1/projects/{project}/locations/{region}/publishers/anthropic/models/{model}:streamRawPredict
    with Authorization: Bearer and a token it issued (401 with Google's error shape,
    status UNAUTHENTICATED, otherwise); the body the Messages API's without model, with
    anthropic_version "vertex-2023-10-16" and stream true (400 INVALID_ARGUMENT otherwise), tool
    results and thinking checked as model_standin.py checks them; the answer the Messages API's
    server-sent events, cut into writes of a few bytes

    vertex_standin.py --dir DIR --key CLIENT_EMAIL --public-key PEM_FILE [--watch PID]

Control routes: PUT /_script, GET /_requests (as model_standin.py; a token request is recorded
with "token": true).
"""
import argparse
import base64
import json
import re
import threading
import time
import urllib.parse
import uuid
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding

import model_standin as ms
import standin_http  # tests/support/standin_http.py: server, handler, control routes
import watched  # tests/support/watched.py: --watch PID

LOCK = threading.Lock()
SCRIPT = []
REQUESTS = []
TOKENS = set()
CFG = {}
PREDICT = re.compile(r"^/v1/projects/([^/]+)/locations/([^/]+)/publishers/anthropic/models/([^/:]+):streamRawPredict$")


def b64url(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def check_assertion(jwt, audience):
    """None, or why Google would refuse it."""
    try:
        head, claims, sig = jwt.split(".")
        header = json.loads(b64url(head))
        body = json.loads(b64url(claims))
        CFG["public_key"].verify(b64url(sig), (head + "." + claims).encode(), padding.PKCS1v15(), hashes.SHA256())
    except (ValueError, InvalidSignature):
        return "Invalid JWT Signature."
    if header.get("alg") != "RS256":
        return "Invalid JWT: alg must be RS256"
    if body.get("iss") != CFG["email"]:
        return "Invalid JWT: unknown issuer"
    if body.get("aud") != audience:
        return "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe; bad audience"
    if body.get("scope") != "https://www.googleapis.com/auth/cloud-platform":
        return "Invalid JWT: scope"
    now = time.time()
    if not (body.get("iat", 0) - 300 <= now <= body.get("exp", 0)) or body["exp"] - body["iat"] > 3600:
        return "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe."
    return None


class Handler(standin_http.Scripted):
    LOCK, SCRIPT, REQUESTS = LOCK, SCRIPT, REQUESTS

    def _google_error(self, record, status, kind, message):
        record["status"] = status
        record["error"] = message
        self._send(status, {"error": {"code": status, "message": message, "status": kind}})

    def do_GET(self):
        if not self._control("GET", self._read()):
            self._send(404, {"error": {"code": 404, "message": "no such route", "status": "NOT_FOUND"}})

    def do_PUT(self):
        if not self._control("PUT", self._read()):
            self._send(404, {})

    def token(self, raw, record):
        record["token"] = True
        form = urllib.parse.parse_qs(raw.decode())
        if form.get("grant_type") != ["urn:ietf:params:oauth:grant-type:jwt-bearer"] or len(form.get("assertion", [])) != 1:
            record["status"] = 400
            return self._send(400, {"error": "unsupported_grant_type", "error_description": "Invalid grant_type"})
        why = check_assertion(form["assertion"][0], "http://%s/token" % self.headers.get("host"))
        if why:
            record["status"] = 400
            return self._send(400, {"error": "invalid_grant", "error_description": why})
        token = "ya29.standin-" + uuid.uuid4().hex
        with LOCK:
            TOKENS.add(token)
        self._send(200, {"access_token": token, "expires_in": 3599, "token_type": "Bearer"})

    def do_POST(self):
        raw = self._read()
        record = self._record(path=self.path)
        if self.path == "/token":
            return self.token(raw, record)
        m = PREDICT.match(self.path)
        if not m:
            return self._google_error(record, 404, "NOT_FOUND", "The requested URL %s was not found." % self.path)
        record["project"], record["region"], record["model"] = m.groups()
        auth = self.headers.get("authorization") or ""
        with LOCK:
            good = auth.startswith("Bearer ") and auth[7:] in TOKENS
        if not good:
            return self._google_error(record, 401, "UNAUTHENTICATED",
                                      "Request had invalid authentication credentials. Expected OAuth 2 access token.")
        try:
            body = json.loads(raw)
        except ValueError:
            return self._google_error(record, 400, "INVALID_ARGUMENT", "Invalid JSON payload received.")
        record["body"] = body
        if body.get("anthropic_version") != "vertex-2023-10-16" or "model" in body or body.get("stream") is not True:
            return self._google_error(record, 400, "INVALID_ARGUMENT",
                                      "anthropic_version: vertex-2023-10-16 is required; model is not permitted in the body")
        why = ms.check_tool_results(body.get("messages") or []) or ms.check_thinking(body)
        if why:
            return self._google_error(record, 400, "INVALID_ARGUMENT", why)
        answer = self._next_answer()
        thinking = isinstance(body.get("thinking"), dict) and body["thinking"].get("type") == "enabled"
        stream = b"".join(item for item in ms.events_for(answer, record["model"], {"input_tokens": 100}, thinking)
                          if not isinstance(item, tuple))
        self._stream("text/event-stream", stream, answer.get("chunk", 7))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--key", required=True, help="the service account's client_email")
    ap.add_argument("--public-key", required=True)
    watched.add_argument(ap)
    a = ap.parse_args()
    watched.end_with(a.watch)
    with open(a.public_key, "rb") as f:
        CFG["public_key"] = serialization.load_pem_public_key(f.read())
    CFG["email"] = a.key
    standin_http.serve(Handler, a.dir)


if __name__ == "__main__":
    main()

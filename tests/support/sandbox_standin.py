#!/usr/bin/env python3
"""A scripted stand-in for sandboxd, for the sandbox executor's specs: it answers each POST with
the next scripted answer and records every request, so a spec can make the server misbehave in
ways the real one never does (heartbeat forever, die mid-body, empty errors, fleet-busy).

    sandbox_standin.py --dir DIR        writes DIR/pid, then DIR/port (last: a spec waits for it)

Control routes:
  PUT /_script      body: a JSON list of answers, queued in order (replaces the queue)
  GET /_requests    the requests received so far: [{method, path, headers, body, t}]
An answer: {status=200, body=<string or JSON value>, beats=0, beat_ms=100, forever=false,
            die=false, hang=false}. beats > 0 (or forever) streams chunked spaces first; die kills
the whole process with SIGKILL after the beats; hang reads the request and never answers.
With the queue empty a POST gets 500 {"error": "stand-in: no scripted answer"}.
"""
import argparse
import json
import os
import signal
import threading
import time

import standin_http  # tests/support/standin_http.py: server, handler, control routes
import watched  # tests/support/watched.py: --watch PID

LOCK = threading.Lock()
SCRIPT = []
REQUESTS = []


class Handler(standin_http.Handler):
    def _send(self, status, body, ctype="application/json"):
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._read()
        if self.path == "/_requests":
            with LOCK:
                body = json.dumps(REQUESTS).encode()
            return self._send(200, body)
        self._send(404, b'{"error":"no such route"}')

    def do_PUT(self):
        body = self._read()
        if self.path == "/_script":
            with LOCK:
                SCRIPT[:] = json.loads(body)
            return self._send(200, b"{}")
        self._send(404, b'{"error":"no such route"}')

    def do_POST(self):
        body = self._read()
        with LOCK:
            REQUESTS.append({
                "method": self.command, "path": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": body.decode("utf-8", "replace"), "t": time.monotonic(),
            })
            answer = SCRIPT.pop(0) if SCRIPT else {"status": 500, "body": {"error": "stand-in: no scripted answer"}}
        if answer.get("hang"):
            while True:
                time.sleep(3600)
        doc = answer.get("body", {})
        payload = doc.encode() if isinstance(doc, str) else json.dumps(doc).encode()
        status = answer.get("status", 200)
        beats, beat_ms = answer.get("beats", 0), answer.get("beat_ms", 100)
        if beats or answer.get("forever") or answer.get("die"):
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            self.wfile.flush()
            n = 0
            while answer.get("forever") or n < beats:
                time.sleep(beat_ms / 1000.0)
                self._chunk(b" ")
                n += 1
            if answer.get("die"):
                os.kill(os.getpid(), signal.SIGKILL)
            self._chunk(payload)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        else:
            self._send(status, payload)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    watched.add_argument(ap)
    a = ap.parse_args()
    watched.end_with(a.watch)
    standin_http.serve(Handler, a.dir)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A sandboxd of another build, for version_skew_spec: GET /healthz answers
{"ok": true, "build": {"commit": COMMIT}} (or STATUS with no build when --healthz-status is
not 200); POST /exec runs nothing and answers a fixed success document. GET /_count tells how
many /healthz requests arrived. Writes DIR/port once listening.

    skewed_sandboxd.py --dir DIR --commit COMMIT [--healthz-status 200]
"""
import argparse
import threading

import standin_http  # tests/support/standin_http.py: server, handler, control routes
import watched  # tests/support/watched.py: --watch PID

LOCK = threading.Lock()
COUNT = {"healthz": 0}
ARGS = None


class Handler(standin_http.Handler):
    def do_GET(self):
        if self.path == "/_count":
            with LOCK:
                return self._send(200, dict(COUNT))
        if self.path == "/healthz":
            with LOCK:
                COUNT["healthz"] += 1
            if ARGS.healthz_status != 200:
                return self._send(ARGS.healthz_status, {"error": "not today"})
            return self._send(200, {"ok": True, "build": {"commit": ARGS.commit, "builtAt": "2020-01-01T00:00:00Z"}})
        self._send(404, {"error": "no such route"})

    def do_POST(self):
        self._read()
        self._send(200, {"stdout": "ran\n", "stderr": "", "exitCode": 0, "durationMs": 1})


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--healthz-status", type=int, default=200)
    watched.add_argument(ap)
    ARGS = ap.parse_args()
    watched.end_with(ARGS.watch)
    standin_http.serve(Handler, ARGS.dir, write_pid=False)


if __name__ == "__main__":
    main()

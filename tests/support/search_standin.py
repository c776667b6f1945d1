#!/usr/bin/env python3
"""A stand-in for Brave Search's web search API (GET /res/v1/web/search), for specs.

    search_standin.py --dir DIR --key KEY     writes DIR/port; DIR/log gets one line per request

Like the real API it requires the key in X-Subscription-Token (401 and its error shape
otherwise), reads q and count from the query string, and answers {"type": "search",
"query": {"original": q}, "web": {"type": "search", "results": [{title, url, description}]}}
with three results (descriptions carry <strong> markup and entities, as Brave's do), at most
count of them. A query "nothing" has no web results.
"""
import argparse
import json
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def send(self, status, doc):
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        u = urlparse(self.path)
        qs = parse_qs(u.query)
        q, count = qs.get("q", [""])[0], int(qs.get("count", ["20"])[0])
        ok = self.headers.get("X-Subscription-Token") == ARGS.key
        with open(os.path.join(ARGS.dir, "log"), "a") as f:
            f.write(json.dumps({"path": u.path, "q": q, "count": count, "key_ok": ok}) + "\n")
        if not ok:
            return self.send(401, {"type": "ErrorResponse", "error": {"code": "SUBSCRIPTION_TOKEN_INVALID", "status": 401}})
        results = [] if q == "nothing" else [
            {"title": "Result <strong>%d</strong> for %s" % (i, q), "url": "https://example.com/%d" % i,
             "description": "About <strong>%s</strong> &amp; more, number %d" % (q, i)} for i in range(1, 4)]
        self.send(200, {"type": "search", "query": {"original": q}, "web": {"type": "search", "results": results[:count]}})


ap = argparse.ArgumentParser()
ap.add_argument("--dir", required=True)
ap.add_argument("--key", required=True)
ARGS = ap.parse_args()
server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(os.path.join(ARGS.dir, "port.tmp"), "w") as f:
    f.write(str(server.server_address[1]))
os.rename(os.path.join(ARGS.dir, "port.tmp"), os.path.join(ARGS.dir, "port"))
server.serve_forever()

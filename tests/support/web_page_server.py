#!/usr/bin/env python3
"""A small web server for web_fetch specs: serves a fixed HTML page and redirects.

    web_page_server.py --bind ADDR --port PORT --dir DIR [--redirect-to URL]
      GET /            an HTML page (title, headings, a list, a link, code, a script)
      GET /moved       302 to /
      GET /away        302 to --redirect-to (e.g. a loopback URL that must be refused)
      GET /secret      text/plain "loopback secret" (the page a refused fetch must not show)
    writes DIR/ready when listening; one line per request to DIR/log (the path)
"""
import argparse
import os
from http.server import BaseHTTPRequestHandler, HTTPServer

PAGE = b"""<!doctype html><html><head><title>Test page</title><style>body { color: red }</style>
<script>document.write("never shown")</script></head><body>
<h1>Served &amp; converted</h1>
<p>A paragraph with <a href="/moved">a relative link</a> and <b>bold</b> text.</p>
<ul><li>first item</li><li>second item</li></ul>
<pre><code>if (a &lt; b) { return 1; }</code></pre>
</body></html>"""


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def send(self, status, body=b"", ctype="text/html; charset=utf-8", location=None):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        if location:
            self.send_header("Location", location)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        with open(os.path.join(ARGS.dir, "log"), "a") as f:
            f.write(self.path + "\n")
        if self.path == "/":
            self.send(200, PAGE)
        elif self.path == "/moved":
            self.send(302, location="/")
        elif self.path == "/away":
            self.send(302, location=ARGS.redirect_to)
        elif self.path == "/secret":
            self.send(200, b"loopback secret", ctype="text/plain")
        else:
            self.send(404, b"not here", ctype="text/plain")


ap = argparse.ArgumentParser()
ap.add_argument("--bind", required=True)
ap.add_argument("--port", type=int, required=True)
ap.add_argument("--dir", required=True)
ap.add_argument("--redirect-to", default="http://127.0.0.1/")
ARGS = ap.parse_args()
server = HTTPServer((ARGS.bind, ARGS.port), Handler)
open(os.path.join(ARGS.dir, "ready"), "w").close()
server.serve_forever()

#!/usr/bin/env python3
"""A loopback HTTP/1.1 peer for the HTTP client specs: real sockets, real HTTP, and the
misbehaviours a client must survive (silence, endless heartbeats, truncated bodies, death).

    http_peer.py --dir DIR [--unix] [--tls CERT_AND_KEY.pem]

Listens on 127.0.0.1 (an ephemeral port); with --unix also on DIR/peer.sock; with --tls also
serves HTTPS with that certificate on a second port (DIR/tls_port). Writes DIR/pid, then
DIR/port (atomically, last: a spec waits for it).

Routes (any method):
  /echo                    200 JSON {method, path, headers (lower-cased), header_names,
                           body, client_port}
  /status/N                status N, body "status N"
  /hang                    reads the request, never answers
  /heartbeat?ms=M          200 chunked, one space every M ms, forever
  /exec?beats=N&ms=M       200 chunked, N spaces M ms apart, then one JSON document
  /die?beats=N&ms=M        200 chunked, N spaces, then the whole server SIGKILLs itself
  /big?n=N                 200 with N bytes of "x" (content-length)
  /truncated-chunked       200 chunked, one chunk, then the connection closes
  /truncated-length        content-length 100, 10 bytes, then the connection closes
  /dup                     repeated and mixed-case response headers
"""
import argparse
import json
import os
import signal
import socketserver
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import watched  # tests/support/watched.py: --watch PID


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet: the specs read results, not logs
        pass

    def address_string(self):
        return "peer"

    def _body(self):
        n = int(self.headers.get("content-length") or 0)
        return self.rfile.read(n) if n else b""

    def _send(self, status, body, ctype="text/plain", extra=()):
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _start_chunked(self):
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self.wfile.flush()

    def _route(self):
        url = urlsplit(self.path)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        body = self._body()
        path = url.path
        if path == "/echo":
            doc = {
                "method": self.command,
                "path": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "header_names": [k for k in self.headers.keys()],
                "body": body.decode("latin-1"),
                "client_port": self.client_address[1] if isinstance(self.client_address, tuple) else None,
            }
            self._send(200, json.dumps(doc).encode(), "application/json")
        elif path.startswith("/status/"):
            code = int(path.split("/")[2])
            self._send(code, b"status %d" % code)
        elif path == "/hang":
            time.sleep(3600)
        elif path == "/heartbeat":
            ms = int(q.get("ms", "50"))
            self._start_chunked()
            while True:
                self._chunk(b" ")
                time.sleep(ms / 1000)
        elif path in ("/exec", "/die"):
            beats, ms = int(q.get("beats", "3")), int(q.get("ms", "20"))
            self._start_chunked()
            for _ in range(beats):
                self._chunk(b" ")
                time.sleep(ms / 1000)
            if path == "/die":
                os.kill(os.getpid(), signal.SIGKILL)
            self._chunk(json.dumps({"stdout": "hi\n", "stderr": "", "exitCode": 0}).encode())
            self.wfile.write(b"0\r\n\r\n")
        elif path == "/big":
            self._send(200, b"x" * int(q.get("n", "0")))
        elif path == "/truncated-chunked":
            self._start_chunked()
            self._chunk(b"partial")
            self.close_connection = True
        elif path == "/truncated-length":
            self.send_response(200)
            self.send_header("content-length", "100")
            self.end_headers()
            self.wfile.write(b"0123456789")
            self.close_connection = True
        elif path == "/dup":
            self._send(200, b"ok", extra=[("Set-Cookie", "a=1"), ("Set-Cookie", "b=2"),
                                          ("X-Mixed-Case", "Value")])
        else:
            self._send(404, b"no such route")

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _route

    def do_HEAD(self):
        self.send_response(200)
        self.send_header("content-length", "42")
        self.end_headers()


class Quiet:
    daemon_threads = True
    request_queue_size = 1024

    def handle_error(self, request, client_address):
        pass  # a client that hangs up mid-answer is what several specs do on purpose


class TCPServer(Quiet, ThreadingHTTPServer):
    pass


class UnixServer(Quiet, socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--unix", action="store_true")
    ap.add_argument("--tls")
    watched.add_argument(ap)
    args = ap.parse_args()
    watched.end_with(args.watch)
    tcp = TCPServer(("127.0.0.1", 0), Handler)
    servers = [tcp]
    if args.unix:
        servers.append(UnixServer(os.path.join(args.dir, "peer.sock"), Handler))
    if args.tls:
        tls = TCPServer(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.tls)
        tls.socket = ctx.wrap_socket(tls.socket, server_side=True)
        servers.append(tls)
        with open(os.path.join(args.dir, "tls_port"), "w") as f:
            f.write(str(tls.server_address[1]))
    for s in servers[1:]:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    with open(os.path.join(args.dir, "pid"), "w") as f:
        f.write(str(os.getpid()))
    tmp = os.path.join(args.dir, "port.tmp")
    with open(tmp, "w") as f:
        f.write(str(tcp.server_address[1]))
    os.rename(tmp, os.path.join(args.dir, "port"))
    tcp.serve_forever()


if __name__ == "__main__":
    sys.exit(main())

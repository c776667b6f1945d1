"""What the Python HTTP stand-ins share: the loopback server and its READY files, the quiet
HTTP/1.1 handler with JSON answers and chunked writes, and the scripted control routes
(PUT /_script, GET /_requests) with the request record they list.

Imported by its neighbours (a stand-in is started as `python3 tests/support/X.py`, so this
folder is first on sys.path).
"""
import json
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    SEND_HEADERS = {}  # headers every JSON answer carries (model_standin: request-id)

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
        for k, v in list(self.SEND_HEADERS.items()) + list((headers or {}).items()):
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _stream(self, content_type, stream, size, headers=None):
        """A 200 whose body is `stream` cut into chunked writes of `size` bytes, so that events,
        lines and JSON fragments split at awkward places."""
        self.send_response(200)
        self.send_header("content-type", content_type)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        size = max(1, int(size))
        for i in range(0, len(stream), size):
            self._chunk(stream[i:i + size])
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class Scripted(Handler):
    """A Handler with the control routes; a subclass sets LOCK, SCRIPT and REQUESTS (its
    module's own, so that its functions see the same lists)."""
    LOCK = None
    SCRIPT = None
    REQUESTS = None

    def _control(self, method, body):
        """True when the request was a control route (and has been answered)."""
        if method == "GET" and self.path == "/_requests":
            with self.LOCK:
                self._send(200, self.REQUESTS)
            return True
        if method == "PUT" and self.path == "/_script":
            with self.LOCK:
                self._set_script(json.loads(body))
            self._send(200, {})
            return True
        return False

    def _set_script(self, answers):
        self.SCRIPT[:] = answers

    def _record(self, **extra):
        """The record of this request, listed by GET /_requests (fill in body and status)."""
        record = {"headers": {k.lower(): v for k, v in self.headers.items()}, **extra, "body": None, "status": 200}
        with self.LOCK:
            self.REQUESTS.append(record)
        return record

    def _next_answer(self):
        with self.LOCK:
            return self.SCRIPT.pop(0) if self.SCRIPT else {}


def serve(handler, directory, write_pid=True):
    """Serve on a free loopback port: DIR/pid first (unless write_pid is false), then DIR/port,
    renamed into place last so that a reader never sees half a number. Never returns."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    if write_pid:
        with open(os.path.join(directory, "pid"), "w") as f:
            f.write(str(os.getpid()))
    tmp = os.path.join(directory, "port.tmp")
    with open(tmp, "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(tmp, os.path.join(directory, "port"))
    srv.serve_forever()

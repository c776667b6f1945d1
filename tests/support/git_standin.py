#!/usr/bin/env python3
"""A loopback GitHub stand-in for clones: git's own smart-HTTP server (`git http-backend`, run
as a CGI program per request) behind HTTP basic authentication, as github.com answers a clone
of a private repository: without the right password (the token) → 401 with
`WWW-Authenticate: Basic`, which makes git ask its credential helper.

    git_standin.py --dir DIR --root REPOS (--token TOKEN | --tokens-file FILE) [--port-with DIGITS]
        serves REPOS/OWNER/NAME.git; writes DIR/pid, then DIR/port (last)
        DIR/log gets one line per request: METHOD PATH STATUS auth=none|good|bad|read
    --token TOKEN        one token that may read and push
    --port-with DIGITS   listen on the first free loopback port whose number contains DIGITS
                         (a remote's address in git's words that looks like a status: 40399)
    --tokens-file FILE   the installation tokens the GitHub stand-in minted, one "SCOPE TOKEN"
                         per line, read at each request: any may clone and fetch; only a
                         "write" one may push — a push with a read token is answered 403, as
                         github.com answers a read-only installation token.
"""
import argparse
import base64
import hmac
import os
import subprocess
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ARGS = None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def _log(self, status, auth):
        with open(os.path.join(ARGS.dir, "log"), "a") as f:
            f.write("%s %s %d auth=%s\n" % (self.command, self.path.split("?")[0], status, auth))

    def _auth(self):
        h = self.headers.get("authorization") or ""
        if not h.lower().startswith("basic "):
            return "none"
        try:
            user, _, password = base64.b64decode(h[6:]).decode().partition(":")
        except ValueError:
            return "bad"
        for scope, token in self._tokens():
            if hmac.compare_digest(password.encode(), token.encode()):
                return "good" if scope == "write" else "read"
        return "bad"

    def _tokens(self):
        if ARGS.token:
            yield "write", ARGS.token
        if ARGS.tokens_file and os.path.exists(ARGS.tokens_file):
            with open(ARGS.tokens_file) as f:
                for line in f:
                    scope, _, token = line.strip().partition(" ")
                    if token:
                        yield scope, token

    def _refuse(self, status, msg, auth, challenge):
        msg = msg.encode()
        self.send_response(status)
        if challenge:
            self.send_header("www-authenticate", 'Basic realm="GitHub stand-in"')
        self.send_header("content-length", str(len(msg)))
        self.end_headers()
        self.wfile.write(msg)
        return self._log(status, auth)

    def _serve(self):
        n = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(n) if n else b""
        auth = self._auth()
        path, _, query = self.path.partition("?")
        if auth not in ("good", "read"):
            return self._refuse(401, "Authentication required\n", auth, True)
        pushing = path.endswith("/git-receive-pack") or "service=git-receive-pack" in query
        if pushing and auth != "good":
            # what github.com says to a token without contents:write
            return self._refuse(403, "remote: Permission to %s denied to switchboard[bot].\n"
                                % path.split("/info/")[0].split("/git-")[0].strip("/"), auth, False)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": ARGS.root, "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": path, "QUERY_STRING": query, "REQUEST_METHOD": self.command,
            "CONTENT_TYPE": self.headers.get("content-type") or "",
            "CONTENT_LENGTH": str(len(body)), "REMOTE_USER": "x-access-token", "REMOTE_ADDR": "127.0.0.1",
        }
        if self.headers.get("git-protocol"):
            env["GIT_PROTOCOL"] = self.headers["git-protocol"]
        if self.headers.get("content-encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["content-encoding"]
        out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True).stdout
        sep = out.find(b"\r\n\r\n")
        head, rest = (out[:sep], out[sep + 4:]) if sep >= 0 else out.split(b"\n\n", 1)
        status, headers = 200, []
        for line in head.decode("latin-1").splitlines():
            k, _, v = line.partition(":")
            if k.lower() == "status":
                status = int(v.split()[0])
            elif k:
                headers.append((k, v.strip()))
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("content-length", str(len(rest)))
        self.end_headers()
        self.wfile.write(rest)
        self._log(status, auth)

    do_GET = _serve
    do_POST = _serve


def listen(digits):
    """The server on a port the kernel picks, or on the first free one whose number contains
    digits (another test's server or a client's port may hold one: the next is tried)."""
    if not digits:
        return ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    for port in range(1024, 65536):
        if digits in str(port):
            try:
                return ThreadingHTTPServer(("127.0.0.1", port), Handler)
            except OSError:
                continue
    raise SystemExit("no free port with %s in it" % digits)


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--token")
    ap.add_argument("--tokens-file")
    ap.add_argument("--port-with")
    ARGS = ap.parse_args()
    srv = listen(ARGS.port_with)
    srv.daemon_threads = True
    with open(os.path.join(ARGS.dir, "pid"), "w") as f:
        f.write(str(os.getpid()))
    tmp = os.path.join(ARGS.dir, "port.tmp")
    with open(tmp, "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(tmp, os.path.join(ARGS.dir, "port"))
    srv.serve_forever()


if __name__ == "__main__":
    main()

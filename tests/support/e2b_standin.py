#!/usr/bin/env python3
"""A stand-in for E2B (the real one is unreachable from tests), speaking its real protocols on
one loopback listener:

  control plane (X-API-Key)       POST /sandboxes, POST /sandboxes/{id}/connect,
                                  POST /sandboxes/{id}/timeout, DELETE /sandboxes/{id},
                                  POST /sandboxes/{id}/pause, POST /sandboxes/{id}/resume
  envd, the in-sandbox daemon     POST /process.Process/Start   (Connect server stream, JSON)
  (X-Access-Token; the sandbox    POST /process.Process/SendSignal (Connect unary, JSON)
   named by E2b-Sandbox-Id, as    GET/POST /files?path=
   E2B_SANDBOX_URL mode sends it,
   or a 49983-<id>.<domain> Host)

Commands really run, on this host, in a directory per sandbox that stands for the VM's root
(an absolute path P in a request means <root>/<id>/P). Like E2B: a sandbox dies when its
timeout passes (its processes with it) — or, created with autoPause true, is paused: its files
kept, its processes frozen (SIGSTOP to their sessions), until a connect (201, its timeout anew)
or a resume (201) thaws it; a paused sandbox is 404 to /timeout and 409 to a second /pause,
a running one 409 to /resume, and envd's proxy answers 502 for it as for a missing one — a dropped Start stream leaves the process running,
SendSignal and the Connect-Timeout-Ms deadline signal the process's pid only, a missing sandbox
is 404 on the control plane and 502 "The sandbox was not found" from the proxy in front of
envd. Every envelope is written in pieces split at awkward places (inside the 5-byte header,
header and payload together, two frames in one write), each its own HTTP chunk.

    e2b_standin.py --dir DIR --api-key KEY [--split-delay-ms 1] [--watch PID]
        writes DIR/pid, then DIR/port (last: a spec waits for it)

Test-only routes (no key):
  PUT  /_standin/faults        a JSON list of faults, appended; each applies once, to the
                               first request of its route ("on"):
       {"on": "create"|"connect"|"timeout"|"pause"|"resume"|"delete"|"start"|"signal"|"files_get"|"files_post",
        "status": N, "body": {...}}                    answer this instead
       {..., "skip": N}                                 let N requests of the route pass first
       {"on": "start", "end_error": {"code", "message"}} the trailer carries this error (no end event)
       {"on": "start", "cut_after_ms": N}              drop the connection N ms after the start event
       {"on": "start", "cut_after_output": true}       drop it right after the first data event
       {"on": "start", "cut_mid_frame": true}          finish the HTTP body inside a frame
       {"on": "start", "bad_flags": N}                 a frame with these flags after the start event
       {"on": "start", "keepalives_first": N}          N keepalive events before the start event
       {"on": "start", "vanish_after_ms": N}           the sandbox dies N ms into the command
       {"on": "start", "stall": true}                  after the start event, never another byte
  POST /_standin/vanish/{id}   the sandbox dies now (as if E2B reclaimed it)
  POST /_standin/expire/{id}   a paused sandbox is dropped (E2B's retention of paused
                               sandboxes ran out): gone, 404 to connect
  GET  /_standin/requests      [{method, path, headers, body, body_b64, t}] (bodies cut at
                               64 KiB; the test-only routes are not recorded)
  GET  /_standin/sandboxes     [{id, alive, root, pids}]
"""
import argparse
import base64
import hmac
import json
import os
import queue
import secrets
import signal
import struct
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit, parse_qs

import watched  # tests/support/watched.py: --watch PID

ENVD_PORT = 49983
DOMAIN = "e2b.local"
LOCK = threading.Lock()
SANDBOXES = {}  # id -> Sandbox
FAULTS = []
REQUESTS = []
ARGS = None


class Sandbox:
    def __init__(self, sid, template, timeout_s, root):
        self.id = sid
        self.template = template
        self.token = secrets.token_hex(16)
        self.root = root
        self.expires = time.monotonic() + timeout_s
        self.alive = True
        self.paused = False
        self.auto_pause = False
        self.procs = {}  # pid -> Popen

    def path(self, vm_path):
        return os.path.join(self.root, vm_path.lstrip("/"))

    def freeze(self, sig):
        """Pause (SIGSTOP) or resume (SIGCONT) every process of the VM: a paused E2B sandbox's
        memory snapshot holds its processes where they were."""
        for pid in processes_in_sessions(set(self.procs)):
            try:
                os.kill(pid, sig)
            except OSError:
                pass

    def pause(self):
        self.paused = True
        self.freeze(signal.SIGSTOP)

    def resume(self, timeout_s):
        self.paused = False
        self.expires = time.monotonic() + timeout_s
        self.freeze(signal.SIGCONT)

    def die(self):
        """The VM is gone: everything in it dies, whatever process group a command's children
        moved to (the executor's wrapper puts each command in a group of its own with set -m).
        Each process here starts a session of its own, so the VM's processes are those of
        these sessions; a few rounds catch a fork under way."""
        self.alive = False
        if self.paused:
            self.paused = False
            self.freeze(signal.SIGCONT)  # a stopped process takes SIGKILL too; thawed, it is reaped
        sessions = set(self.procs)
        for _ in range(20):
            members = processes_in_sessions(sessions)
            if not members:
                return
            for pid in members:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass


def process_stats():
    """(pid, state, pgid, session) of every process, from /proc/PID/stat (one that ends while
    it is read is skipped)."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        yield int(name), fields[0], int(fields[2]), int(fields[3])


def processes_in_sessions(sessions):
    """The live (not zombie) processes whose session id is in `sessions`."""
    return [pid for pid, state, _, sid in process_stats() if state != "Z" and sid in sessions]


def group_exists(pgid):
    """Some process is in group pgid. (While one is, the kernel never hands that number out as
    a new pid, so signalling the group cannot reach a stranger that reused the leader's pid.)"""
    return any(group == pgid for _, _, group, _ in process_stats())


def take_fault(route):
    with LOCK:
        for i, f in enumerate(FAULTS):
            if f.get("on") == route:
                if f.get("skip", 0) > 0:  # let this many requests of the route pass first
                    f["skip"] -= 1
                    return None
                return FAULTS.pop(i)
    return None


def reaper():
    while True:
        time.sleep(0.05)
        now = time.monotonic()
        with LOCK:
            for sb in SANDBOXES.values():
                if sb.alive and not sb.paused and now >= sb.expires:
                    if sb.auto_pause:
                        sb.pause()
                    else:
                        sb.die()


def frame(flags, doc):
    payload = json.dumps(doc, separators=(",", ":")).encode()
    return struct.pack(">BI", flags, len(payload)) + payload


def split_awkwardly(data, n):
    """Pieces of one write: cut inside the header, then across the header/payload border."""
    cuts = [(1, 3), (2, 7), (4, 5), (3, 9)][n % 4]
    out, pos = [], 0
    for c in cuts:
        if pos + c < len(data):
            out.append(data[pos:pos + c])
            pos += c
    out.append(data[pos:])
    return [p for p in out if p]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # every piece goes out at once, as its own segment

    def log_message(self, fmt, *args):
        pass

    # ---- plumbing -------------------------------------------------------------------------
    def _read(self):
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("content-length") or 0)
        return self.rfile.read(n) if n else b""

    def _record(self, body):
        if self.path.startswith("/_standin/"):
            return
        with LOCK:
            REQUESTS.append({
                "method": self.command, "path": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": body[:65536].decode("utf-8", "replace"), "t": time.monotonic(),
                "body_b64": base64.b64encode(body[:65536]).decode(),
            })

    def _send(self, status, doc=None, raw=None, ctype="application/json"):
        body = raw if raw is not None else (b"" if doc is None else json.dumps(doc).encode())
        self.send_response(status)
        if status != 204:
            self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        if status != 204:
            self.wfile.write(body)

    def _chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _fault_answer(self, route):
        f = take_fault(route)
        if f is not None and "status" in f:
            self._send(f["status"], f.get("body", {"code": f["status"], "message": "stand-in fault"}))
            return None, True
        return f, False

    # ---- routing --------------------------------------------------------------------------
    def _route(self):
        body = self._read()
        self._record(body)
        u = urlsplit(self.path)
        parts = [p for p in u.path.split("/") if p]
        if parts[:1] == ["_standin"]:
            return self._standin(parts[1:], body)
        if parts[:1] == ["sandboxes"]:
            return self._control(parts[1:], body)
        if u.path.startswith("/process.Process/") or u.path == "/files":
            return self._envd(u, body)
        self._send(404, {"code": 404, "message": "no such route"})

    do_GET = do_POST = do_PUT = do_DELETE = lambda self: self._route()

    # ---- test-only ------------------------------------------------------------------------
    def _standin(self, parts, body):
        if parts == ["faults"] and self.command == "PUT":
            with LOCK:
                FAULTS.extend(json.loads(body))
            return self._send(200, {})
        if parts == ["requests"]:
            with LOCK:
                return self._send(200, list(REQUESTS))
        if parts == ["sandboxes"]:
            with LOCK:
                return self._send(200, [{"id": s.id, "alive": s.alive, "paused": s.paused,
                                         "auto_pause": s.auto_pause, "root": s.root,
                                         "pids": list(s.procs)} for s in SANDBOXES.values()])
        if len(parts) == 2 and parts[0] == "expire":
            with LOCK:
                sb = SANDBOXES.get(parts[1])
                ok = sb is not None and sb.paused
                if ok:
                    sb.die()
            return self._send(200 if ok else 404, {})
        if len(parts) == 2 and parts[0] == "vanish":
            with LOCK:
                sb = SANDBOXES.get(parts[1])
                if sb:
                    sb.die()
            return self._send(200 if sb else 404, {})
        self._send(404, {"code": 404, "message": "no such stand-in route"})

    # ---- control plane --------------------------------------------------------------------
    def _control(self, parts, body):
        key = self.headers.get("x-api-key", "")
        if not hmac.compare_digest(key.encode(), ARGS.api_key.encode()):
            return self._send(401, {"code": 401, "message": "Invalid API key, please visit https://e2b.dev/docs?reason=sdk-missing-api-key to get your API key."})
        try:
            doc = json.loads(body) if body else {}
        except ValueError:
            return self._send(400, {"code": 400, "message": "request body is not JSON"})
        if parts == [] and self.command == "POST":
            f, done = self._fault_answer("create")
            if done:
                return
            if not isinstance(doc.get("templateID"), str):
                return self._send(400, {"code": 400, "message": "templateID is required"})
            sid = "i" + secrets.token_hex(10)
            root = os.path.join(ARGS.root, sid)
            os.makedirs(os.path.join(root, "home", "user"))
            os.makedirs(os.path.join(root, "tmp"))  # the VM's /tmp: its TMPDIR (see _start)
            if "autoPause" in doc and not isinstance(doc["autoPause"], bool):
                return self._send(400, {"code": 400, "message": "autoPause must be a boolean"})
            sb = Sandbox(sid, doc["templateID"], int(doc.get("timeout") or 15), root)
            sb.auto_pause = doc.get("autoPause") is True
            with LOCK:
                SANDBOXES[sid] = sb
            return self._send(201, self._detail(sb))
        if len(parts) < 1:
            return self._send(405, {"code": 405, "message": "method not allowed"})
        with LOCK:
            sb = SANDBOXES.get(parts[0])
        alive = sb is not None and sb.alive
        paused = alive and sb.paused
        missing = {"code": 404, "message": "sandbox \"%s\" not found" % parts[0]}
        if len(parts) == 1 and self.command == "DELETE":
            f, done = self._fault_answer("delete")
            if done:
                return
            if not alive:
                return self._send(404, missing)
            sb.die()
            return self._send(204)
        if len(parts) == 2 and parts[1] == "pause" and self.command == "POST":
            f, done = self._fault_answer("pause")
            if done:
                return
            if not alive:
                return self._send(404, missing)
            with LOCK:
                if sb.paused:
                    return self._send(409, {"code": 409, "message": "Sandbox \"%s\" is already paused" % sb.id})
                sb.pause()
            return self._send(204)
        if len(parts) == 2 and parts[1] in ("timeout", "connect", "resume") and self.command == "POST":
            f, done = self._fault_answer(parts[1])
            if done:
                return
            if not alive or (paused and parts[1] == "timeout"):
                return self._send(404, missing)
            t = doc.get("timeout")
            if not isinstance(t, int) or t < 0:
                return self._send(400, {"code": 400, "message": "timeout must be a non-negative integer"})
            with LOCK:
                if parts[1] == "resume" and not sb.paused:
                    return self._send(409, {"code": 409, "message": "Sandbox \"%s\" is already running" % sb.id})
                if sb.paused:
                    # a connect or resume thaws a paused sandbox: 201, its timeout counted anew
                    if isinstance(doc.get("autoPause"), bool):
                        sb.auto_pause = doc["autoPause"]
                    sb.resume(t)
                    return self._send(201, self._detail(sb))
                if parts[1] == "timeout":
                    sb.expires = time.monotonic() + t
                    return self._send(204)
                # connect to a running sandbox: its timeout is only ever extended
                sb.expires = max(sb.expires, time.monotonic() + t)
            return self._send(200, self._detail(sb))
        self._send(404, {"code": 404, "message": "no such route"})

    def _detail(self, sb):
        return {"sandboxID": sb.id, "templateID": sb.template, "clientID": "standin",
                "envdVersion": "0.2.4", "envdAccessToken": sb.token, "domain": DOMAIN}

    # ---- envd -----------------------------------------------------------------------------
    def _sandbox_of_request(self):
        sid = self.headers.get("e2b-sandbox-id")
        if not sid:
            host = (self.headers.get("host") or "").split(":")[0]
            prefix = "%d-" % ENVD_PORT
            if host.startswith(prefix):
                sid = host[len(prefix):].split(".")[0]
        with LOCK:
            return sid, SANDBOXES.get(sid or "")

    def _envd(self, u, body):
        sid, sb = self._sandbox_of_request()
        if sb is None or not sb.alive or sb.paused:
            return self._send(502, {"sandboxId": sid, "message": "The sandbox was not found", "code": 502})
        tok = self.headers.get("x-access-token", "")
        if not hmac.compare_digest(tok.encode(), sb.token.encode()):
            return self._send(401, {"code": 401, "message": "unauthorized access, please provide a valid access token"})
        if u.path == "/process.Process/Start":
            return self._start(sb, body)
        if u.path == "/process.Process/SendSignal":
            return self._signal(sb, body)
        if u.path == "/files":
            return self._files(sb, u, body)
        self._send(404, {"code": "unimplemented", "message": "no such procedure"})

    def _files(self, sb, u, body):
        route = "files_get" if self.command == "GET" else "files_post"
        f, done = self._fault_answer(route)
        if done:
            return
        path = (parse_qs(u.query).get("path") or [""])[0]
        if not path.startswith("/"):
            return self._send(400, {"code": 400, "message": "path must be absolute"})
        real = sb.path(path)
        if self.command == "GET":
            if not os.path.exists(real):
                return self._send(404, {"code": 404, "message": "path '%s' does not exist" % path})
            if os.path.isdir(real):
                return self._send(400, {"code": 400, "message": "path '%s' is a directory" % path})
            with open(real, "rb") as fh:
                return self._send(200, raw=fh.read(), ctype="application/octet-stream")
        if self.command == "POST":
            if self.headers.get("content-type", "") != "application/octet-stream":
                return self._send(400, {"code": 400, "message": "expected application/octet-stream"})
            os.makedirs(os.path.dirname(real), exist_ok=True)
            with open(real, "wb") as fh:
                fh.write(body)
            return self._send(200, [{"name": os.path.basename(path), "type": "file", "path": path}])
        self._send(405, {"code": 405, "message": "method not allowed"})

    def _signal(self, sb, body):
        f, done = self._fault_answer("signal")
        if done:
            return
        if self.headers.get("content-type") != "application/json":
            return self._send(415, {"code": "invalid_argument", "message": "expected application/json"})
        doc = json.loads(body or b"{}")
        pid = (doc.get("process") or {}).get("pid")
        sig = {"SIGNAL_SIGKILL": signal.SIGKILL, "SIGNAL_SIGTERM": signal.SIGTERM}.get(doc.get("signal"))
        if sig is None:
            return self._send(400, {"code": "invalid_argument", "message": "unknown signal"})
        if pid not in sb.procs:
            return self._send(404, {"code": "not_found", "message": "process with pid %s not found" % pid})
        try:
            os.kill(pid, sig)  # the pid only, as envd does: its children are not reached
        except OSError:
            pass
        self._send(200, {})

    def _start(self, sb, body):
        if self.headers.get("content-type") != "application/connect+json":
            return self._send(415, {"code": "invalid_argument", "message": "expected application/connect+json"})
        if len(body) < 5:
            return self._send(400, {"code": "invalid_argument", "message": "no request envelope"})
        flags, n = struct.unpack(">BI", body[:5])
        req = json.loads(body[5:5 + n])
        f, done = self._fault_answer("start")
        if done:
            return
        f = f or {}
        proc_spec = req.get("process") or {}
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8",
               "HOME": sb.path("/home/user"), "USER": "user",
               # the VM's own /tmp, not the host's: the executor's wrapper keeps its marks there
               "TMPDIR": sb.path("/tmp")}
        env.update(proc_spec.get("envs") or {})
        cwd = sb.path(proc_spec.get("cwd") or "/home/user")
        timeout_ms = int(self.headers.get("connect-timeout-ms") or 0)
        ping_s = int(self.headers.get("keepalive-ping-interval") or 50)
        t0 = time.monotonic()
        try:
            p = subprocess.Popen([proc_spec["cmd"]] + list(proc_spec.get("args") or []), cwd=cwd, env=env,
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 start_new_session=True)  # its group and session: see Sandbox.die
        except OSError as e:
            self.send_response(200)
            self.send_header("content-type", "application/connect+json")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            self._chunk(frame(2, {"error": {"code": "internal", "message": "error starting process: %s" % e}}))
            self._chunk(b"")
            return
        sb.procs[p.pid] = p
        events = queue.Queue()

        def pump(stream, name):
            for chunk in iter(lambda: os.read(stream.fileno(), 4096), b""):
                events.put((name, chunk))
            events.put((name, None))
        for stream, name in ((p.stdout, "stdout"), (p.stderr, "stderr")):
            threading.Thread(target=pump, args=(stream, name), daemon=True).start()

        self.send_response(200)
        self.send_header("content-type", "application/connect+json")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        n_writes = [0]

        def write(data):
            for piece in split_awkwardly(data, n_writes[0]):
                self._chunk(piece)
                if ARGS.split_delay_ms:
                    time.sleep(ARGS.split_delay_ms / 1000)
            n_writes[0] += 1

        def reap_later():
            p.wait()

        try:
            for _ in range(int(f.get("keepalives_first", 0))):
                write(frame(0, {"event": {"keepalive": {}}}))
            if f.get("start_after_ms"):  # the process runs, its start event not sent yet
                time.sleep(f["start_after_ms"] / 1000)
            write(frame(0, {"event": {"start": {"pid": p.pid}}}))
            if f.get("stall"):
                threading.Thread(target=reap_later, daemon=True).start()
                while True:
                    time.sleep(3600)
            if "bad_flags" in f:
                write(struct.pack(">BI", f["bad_flags"], 2) + b"{}")
            open_streams, last_ping, pending = 2, time.monotonic(), b""
            deadline = t0 + timeout_ms / 1000 if timeout_ms > 0 else None
            cut_at = t0 + f["cut_after_ms"] / 1000 if "cut_after_ms" in f else None
            vanish_at = t0 + f["vanish_after_ms"] / 1000 if "vanish_after_ms" in f else None
            while open_streams > 0:
                now = time.monotonic()
                if cut_at and now >= cut_at:
                    threading.Thread(target=reap_later, daemon=True).start()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if vanish_at and now >= vanish_at:
                    sb.die()
                    threading.Thread(target=reap_later, daemon=True).start()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if deadline and now >= deadline:
                    try:
                        os.kill(p.pid, signal.SIGKILL)  # the leader only, like envd
                    except OSError:
                        pass
                    threading.Thread(target=reap_later, daemon=True).start()
                    write(frame(2, {"error": {"code": "deadline_exceeded", "message": "context deadline exceeded"}}))
                    self._chunk(b"")
                    return
                if now - last_ping >= ping_s:
                    write(frame(0, {"event": {"keepalive": {}}}))
                    last_ping = now
                try:
                    name, chunk = events.get(timeout=0.05)
                except queue.Empty:
                    continue
                if chunk is None:
                    open_streams -= 1
                    continue
                write(frame(0, {"event": {"data": {name: base64.b64encode(chunk).decode()}}}))
                if f.get("cut_after_output"):
                    threading.Thread(target=reap_later, daemon=True).start()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
            p.wait()
            code = p.returncode
            if "end_error" in f:
                write(frame(2, {"error": f["end_error"]}))
                self._chunk(b"")
                return
            end = {"exited": code >= 0, "status": "exit status %d" % code if code >= 0 else
                   "signal: " + {9: "killed", 15: "terminated", 2: "interrupt"}.get(-code, str(-code))}
            if code > 0:
                end["exitCode"] = code   # zero values are omitted, as protobuf JSON does
            elif code < 0:
                end["exitCode"] = -1
            if not end["exited"]:
                del end["exited"]
            last = frame(0, {"event": {"end": end}}) + frame(2, {})  # two frames in one write
            if f.get("cut_mid_frame"):
                last = last[:-4]
            write(last)
            self._chunk(b"")
        except (BrokenPipeError, ConnectionResetError, OSError):
            # The client went away: the process goes on (envd keeps it), reaped when it ends.
            threading.Thread(target=reap_later, daemon=True).start()
            self.close_connection = True


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--api-key", required=True)
    ap.add_argument("--split-delay-ms", type=float, default=1.0)
    watched.add_argument(ap)  # exit, killing every sandbox, when the spec is gone
    ARGS = ap.parse_args()
    ARGS.root = os.path.join(ARGS.dir, "vm")
    os.makedirs(ARGS.root, exist_ok=True)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=reaper, daemon=True).start()
    with open(os.path.join(ARGS.dir, "pid"), "w") as fh:
        fh.write(str(os.getpid()))
    tmp = os.path.join(ARGS.dir, "port.tmp")
    with open(tmp, "w") as fh:
        fh.write(str(server.server_address[1]))
    os.rename(tmp, os.path.join(ARGS.dir, "port"))

    def bye(*_):
        with LOCK:
            for sb in SANDBOXES.values():
                sb.die()
        os._exit(0)
    signal.signal(signal.SIGTERM, bye)
    watched.end_with(ARGS.watch, bye)
    server.serve_forever()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A stand-in for a Kubernetes API server with agent-sandbox installed (no cluster is reachable
from tests), speaking the real protocol for the one resource the `kubernetes` executor uses:

  SandboxClaim, extensions.agents.x-k8s.io/v1beta1 (agent-sandbox v0.5.6), namespaced:
    POST   /apis/extensions.agents.x-k8s.io/v1beta1/namespaces/NS/sandboxclaims       201 | 409 AlreadyExists | 422 Invalid
    GET    .../sandboxclaims/NAME                                                     200 | 404 NotFound
    GET    .../sandboxclaims[?labelSelector=k=v]                                      200 SandboxClaimList
    PATCH  .../sandboxclaims/NAME   (application/merge-patch+json)                    200 | 404
    DELETE .../sandboxclaims/NAME                                                     200 (the object, deletionTimestamp set) | 404
    GET    .../sandboxclaims?watch=true&resourceVersion=RV[&fieldSelector=metadata.name=NAME]
           [&labelSelector=k=v][&allowWatchBookmarks=true][&timeoutSeconds=N]
           a chunked stream of {"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": …} lines;
           a resourceVersion older than the compacted history gets the ERROR event with a
           Status of code 410 (reason Expired), as kube-apiserver sends it.
  PersistentVolumeClaim, v1, namespaced (the kept workspace of a thread, issue 37):
    POST   /api/v1/namespaces/NS/persistentvolumeclaims          201 | 409 AlreadyExists | 422 Invalid
    GET    .../persistentvolumeclaims/NAME                        200 | 404 NotFound
    PATCH  .../persistentvolumeclaims/NAME (merge-patch; a metadata.resourceVersion in it is a
           precondition: 409 Conflict when the object changed)   200 | 404 | 409
    DELETE .../persistentvolumeclaims/NAME                        200 | 404
  Every error is a metav1 Status object {kind: Status, apiVersion: v1, status: Failure, message,
  reason, details, code}. Every route needs `authorization: Bearer TOKEN` or, over TLS, the client certificate
  DIR/client.crt (401 Status otherwise);
  another resource or group is 404. Over HTTPS with --tls (a self-signed certificate written to
  DIR/ca.crt).

The controller, as agent-sandbox's claim controller does it (extensions/controllers/
sandboxclaim_controller.go at v0.5.6): a new claim first gets Ready=False (SandboxNotReady);
when the warm pool named in spec.warmPoolRef has a ready pod the claim adopts it — the
annotation agents.x-k8s.io/sandbox-name, status.sandbox {name, podIPs} and Ready=True with
reason DependenciesReady; with no ready pod it stays Ready=False (DependenciesNotReady) until
one is (the pool refills in the background, or never with --no-refill). A warm pool that does
not exist is Ready=False reason WarmPoolNotFound. A pod that dies clears podIPs and turns Ready
False (DependenciesNotReady, "Pod does not exist"); agent-sandbox would then make the Sandbox a
new pod (a new IP), which the stand-in does only for a cold claim's Sandbox (below) — the executor treats both alike (the claim no
longer Ready, or naming another pod: it is deleted and the next ask claims afresh). spec.lifecycle.shutdownTime with shutdownPolicy Delete deletes
the claim when it passes. Deleting a claim stops its pod; the claim lingers with a
deletionTimestamp for --finalize-ms (its finalizer) before the DELETED event.

A claim with spec.volumeClaimTemplates is cold-started, as agent-sandbox does it (the warm
pool is bypassed; sandboxclaim_controller.go): a Sandbox named after the claim, a PVC
<template name>-<sandbox name> made for each template — or an existing one adopted when it has
no controller and carries the tracking label agents.x-k8s.io/sandbox-name-hash (FNV-1a of the
sandbox's name) — with the Sandbox as its controller, and a pod whose root directory is that
PVC's (the volume: DIR/volumes/NAME). --vct-policy Disallowed makes such a claim Ready=False
VolumeClaimTemplatesError, as a SandboxTemplate whose volumeClaimTemplatesPolicy is not
Allowed does. shutdownPolicy Retain keeps the claim when its shutdownTime passes (Ready=False
ClaimExpired) and deletes its Sandbox and pod; a shutdownTime moved forward again makes a new
Sandbox of the same name. The garbage collector: an object whose owners are all gone goes (a
PVC's volume directory with it); one with an owner left only loses the dangling references.

The "pods" are real processes: `switchboard sandboxd --pod`, each listening on a loopback
address of its own (127.77.X.Y) and the one --pod-port, so a claim's status names the pod by its
IP exactly as in a cluster.

    kube_standin.py --dir DIR --token TOKEN --bin SWITCHBOARD --policies DIR --pool NAME
                    --pool-size N [--tls] [--namespace NS] [--pod-port P] [--watch PID]
        writes DIR/pid, then DIR/port (last: a spec waits for it); the pods get SANDBOX_TOKEN
        from this process's environment

Test-only routes (no token):
  PUT  /_standin/faults         a JSON list of faults, appended, each used once:
       {"on": "create"|"get"|"delete"|"patch"|"list"|"watch"|"pvc_create"|"pvc_get"|"pvc_patch"|"pvc_delete",
        "status": N, "reason": R,
        "message": M, "retry_after": S}          answer this Status instead
  POST /_standin/cut-watches    every open watch stream is cut mid-stream (no terminating chunk)
  POST /_standin/compact        forget the event history: a watch resumed from before now gets 410
  POST /_standin/kill/NAME      the pod of claim NAME dies (SIGKILL)
  POST /_standin/pool           {"size": N}: the warm pool's size from now on
  GET  /_standin/claims         [{name, pod, ready, created_ms, ready_ms, deleted}]
  GET  /_standin/pods           [{name, ip, pid, alive, claim}]
  GET  /_standin/requests       [{method, path, query}]
  GET  /_standin/watches        {"opened": N, "open": N}
  GET  /_standin/pvcs           [{name, labels, ownerReferences, dir}]
"""
import argparse
import json
import os
import queue
import random
import shutil
import signal
import ssl
import subprocess
import tempfile
import threading
import time
import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit, parse_qs

import watched  # tests/support/watched.py: --watch PID

GROUP = "extensions.agents.x-k8s.io"
VERSION = "v1beta1"
API_VERSION = GROUP + "/" + VERSION
RESOURCE = "sandboxclaims"
LOCK = threading.RLock()
ARGS = None

# every pod ever started, so that shutdown leaves none behind
EVERY_POD = []

STATE = {
    "rv": 1000,            # the last resourceVersion handed out
    "compacted": 0,        # events with rv <= this are gone from the history
    "history": [],         # [(rv, type, object)]
    "claims": {},          # name → claim object
    "timing": {},          # name → {created_ms, ready_ms}
    "watchers": [],        # [Watcher]
    "watches_opened": 0,
    "faults": [],
    "requests": [],
    "pods": {},            # pod name → Pod
    "pool_size": 0,
    "pod_seq": 0,
    "pvcs": {},            # name → PersistentVolumeClaim object
    "sandboxes": {},       # claim name → {"uid", "pod"}: the Sandbox of a cold (volume) claim
}


def now_ms():
    return time.monotonic() * 1000


def rfc3339(t=None):
    return datetime.datetime.fromtimestamp(t if t is not None else time.time(), datetime.timezone.utc) \
        .strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(s):
    try:
        return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc).timestamp()
    except (TypeError, ValueError):
        return None


def next_rv():
    STATE["rv"] += 1
    return str(STATE["rv"])


def status_doc(code, reason, message, name=None):
    doc = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code}
    if name is not None:
        doc["details"] = {"name": name, "group": GROUP, "kind": RESOURCE}
    return doc


# ---------------------------------------------------------------------------------------------
# Events and watches

class Watcher:
    def __init__(self, name, label):
        self.q = queue.Queue()
        self.name = name      # fieldSelector metadata.name, or None
        self.label = label    # (key, value), or None
        self.cut = False

    def wants(self, obj):
        md = obj.get("metadata", {})
        if self.name is not None and md.get("name") != self.name:
            return False
        if self.label is not None and (md.get("labels") or {}).get(self.label[0]) != self.label[1]:
            return False
        return True


def emit(kind, obj):
    """Records an event (the caller holds LOCK and has set obj's resourceVersion)."""
    rv = int(obj["metadata"]["resourceVersion"])
    snapshot = json.loads(json.dumps(obj))
    STATE["history"].append((rv, kind, snapshot))
    for w in STATE["watchers"]:
        if w.wants(snapshot):
            w.q.put((kind, snapshot))


def write_claim(obj, kind="MODIFIED"):
    obj["metadata"]["resourceVersion"] = next_rv()
    STATE["claims"][obj["metadata"]["name"]] = obj
    emit(kind, obj)


def set_ready(obj, status, reason, message):
    conds = obj.setdefault("status", {}).setdefault("conditions", [])
    old = next((c for c in conds if c["type"] == "Ready"), None)
    cond = {"type": "Ready", "status": status, "reason": reason, "message": message,
            "observedGeneration": obj["metadata"].get("generation", 1),
            "lastTransitionTime": rfc3339()}
    if old is not None:
        if old["status"] == status and old["reason"] == reason and old.get("observedGeneration") == cond["observedGeneration"]:
            return False
        if old["status"] == status:
            cond["lastTransitionTime"] = old["lastTransitionTime"]
        conds.remove(old)
    conds.append(cond)
    return True


# ---------------------------------------------------------------------------------------------
# Pods: real `switchboard sandboxd --pod` processes

class Pod:
    def __init__(self, name, ip, volume=None):
        self.name = name
        self.ip = ip
        self.claim = None
        self.ready = False
        self.dead = False
        self.volume = volume  # a PVC's directory, mounted as sandboxd's root: it outlives the pod
        self.root = volume or tempfile.mkdtemp(prefix="pod-", dir=ARGS.dir)  # so a leak names its stand-in
        log = open(os.path.join(ARGS.dir, name + ".log"), "wb")
        argv = [ARGS.bin]
        if ARGS.policies:
            argv += ["--policies", ARGS.policies]
        argv += ["sandboxd", "--pod", "--listen", "%s:%d" % (ip, ARGS.pod_port), "--root", self.root]
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        self.log_path = log.name
        log.close()
        EVERY_POD.append(self)
        threading.Thread(target=self.watch, daemon=True).start()

    def watch(self):
        # ready: sandboxd logged that it listens (the readiness probe's answer, without a probe)
        while not self.dead and self.proc.poll() is None:
            with open(self.log_path, "rb") as f:
                if b"sandboxd.listening" in f.read():
                    break
            time.sleep(0.02)
        with LOCK:
            if self.proc.poll() is None and not self.dead:
                self.ready = True
        reconcile()
        self.proc.wait()
        with LOCK:
            self.dead = True
            self.ready = False
        reconcile()

    def stop(self, sig=signal.SIGTERM):
        self.dead = True
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def reap(self):
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.stop(signal.SIGKILL)
            self.proc.wait()
        if self.volume is None:
            shutil.rmtree(self.root, ignore_errors=True)


def free_ip():
    while True:
        ip = "127.77.%d.%d" % (random.randint(0, 255), random.randint(2, 254))
        if all(p.ip != ip for p in STATE["pods"].values()):
            return ip


def refill():
    """The warm pool's controller: keep pool_size unclaimed pods (caller holds LOCK); a pool
    made smaller deletes the unclaimed pods over its size. Once shutting down it makes none: the
    pods killed at shutdown wake their watchers, whose reconcile would otherwise refill the pool
    with pods nobody is left to stop."""
    if STATE.get("stopping"):
        return
    idle = sorted((p for p in STATE["pods"].values() if p.claim is None and not p.dead), key=lambda p: p.name)
    for p in idle[STATE["pool_size"]:]:
        release_pod(p)
    for _ in range(STATE["pool_size"] - len(idle)):
        STATE["pod_seq"] += 1
        name = "%s-%05d" % (ARGS.pool, STATE["pod_seq"])
        STATE["pods"][name] = Pod(name, free_ip())


def release_pod(pod):
    pod.stop()
    STATE["pods"].pop(pod.name, None)
    threading.Thread(target=pod.reap, daemon=True).start()


def reconcile():
    """The claim controller's pass over every claim. None once shutting down: a pod killed at
    shutdown wakes its watcher, whose pass would make a cold claim's Sandbox its pod again on
    its volume — after shutdown's list of pods to kill (two such pods outlived a full run)."""
    with LOCK:
        if STATE.get("stopping"):
            return
        for name, obj in list(STATE["claims"].items()):
            if obj["metadata"].get("deletionTimestamp"):
                continue
            lifecycle = obj["spec"].get("lifecycle") or {}
            until = parse_time(lifecycle.get("shutdownTime"))
            expired = until is not None and time.time() >= until
            if expired and lifecycle.get("shutdownPolicy") in ("Delete", "DeleteForeground"):
                delete_claim(name)
                continue
            if expired:
                # Retain (the default): the claim stays, its Sandbox and pod go
                delete_sandbox(name)
                changed = set_ready(obj, "False", "ClaimExpired", "Claim expired")
                if obj["status"].get("sandbox", {}).get("podIPs"):
                    obj["status"]["sandbox"].pop("podIPs", None)
                    changed = True
                if changed:
                    write_claim(obj)
                continue
            pool = obj["spec"].get("warmPoolRef", {}).get("name")
            pod = STATE["pods"].get(obj.get("status", {}).get("sandbox", {}).get("name", ""))
            if pool != ARGS.pool:
                if set_ready(obj, "False", "WarmPoolNotFound", 'SandboxWarmPool "%s" not found' % pool):
                    write_claim(obj)
                continue
            if obj["spec"].get("volumeClaimTemplates"):
                reconcile_cold(name, obj)
                continue
            if pod is None and not obj.get("status", {}).get("sandbox", {}).get("name"):
                pod = next((p for p in sorted(STATE["pods"].values(), key=lambda p: p.name)
                            if p.claim is None and p.ready and not p.dead), None)
                if pod is None:
                    # no warm pod: the controller's cold Sandbox waits for a pod (its message)
                    if set_ready(obj, "False", "DependenciesNotReady", "Pod exists with phase: Pending"):
                        write_claim(obj)
                    continue
                pod.claim = name
                obj["metadata"].setdefault("annotations", {})["agents.x-k8s.io/sandbox-name"] = pod.name
                obj["status"]["sandbox"] = {"name": pod.name, "podIPs": [pod.ip]}
                set_ready(obj, "True", "DependenciesReady", "Pod is Ready; Service Exists")
                STATE["timing"][name]["ready_ms"] = now_ms()
                write_claim(obj)
                refill()
                continue
            if (pod is None or pod.dead) and obj["status"]["sandbox"].get("podIPs"):
                obj["status"]["sandbox"].pop("podIPs", None)
                set_ready(obj, "False", "DependenciesNotReady", "Pod does not exist")
                write_claim(obj)
            elif pod is not None and not pod.dead and obj["status"]["sandbox"].get("podIPs"):
                # the controller's pass after a spec change: the condition observes this generation
                if set_ready(obj, "True", "DependenciesReady", "Pod is Ready; Service Exists"):
                    write_claim(obj)
        refill()


def delete_claim(name):
    """Caller holds LOCK. The claim gets a deletionTimestamp; its pod is stopped; the object
    goes (DELETED) after the finalizer's time."""
    obj = STATE["claims"][name]
    if obj["metadata"].get("deletionTimestamp"):
        return obj
    obj["metadata"]["deletionTimestamp"] = rfc3339()
    obj["metadata"]["finalizers"] = ["agents.x-k8s.io/sandbox-cleanup"]
    write_claim(obj)
    pod_name = obj.get("status", {}).get("sandbox", {}).get("name")
    if name in STATE["sandboxes"]:
        STATE["sandboxes"][name]["uid"] = None  # deleted with the claim; GC after the finalizer
        delete_sandbox(name)
    elif pod_name in STATE["pods"]:
        release_pod(STATE["pods"][pod_name])
    STATE["timing"][name]["deleted"] = True

    def finalize():
        time.sleep(ARGS.finalize_ms / 1000)
        with LOCK:
            cur = STATE["claims"].get(name)
            if cur is obj:
                obj["metadata"]["finalizers"] = []
                del STATE["claims"][name]
                obj["metadata"]["resourceVersion"] = next_rv()
                emit("DELETED", obj)
                collect_garbage()
    threading.Thread(target=finalize, daemon=True).start()
    return obj


def name_hash(s):
    """agent-sandbox's NameHash: FNV-1a, 32 bits, 8 hex digits."""
    h = 0x811c9dc5
    for b in s.encode():
        h = ((h ^ b) * 0x01000193) & 0xffffffff
    return "%08x" % h


def volume_dir(name):
    return os.path.join(ARGS.dir, "volumes", name)


def collect_garbage():
    """The garbage collector (caller holds LOCK): a PVC whose owners are all gone is deleted
    (its volume with it); one with an owner left loses only the dangling references."""
    live = {o["metadata"]["uid"] for o in STATE["claims"].values()} | {sb["uid"] for sb in STATE["sandboxes"].values()}
    for name, pvc in list(STATE["pvcs"].items()):
        refs = pvc["metadata"].get("ownerReferences") or []
        if not refs:
            continue
        kept = [r for r in refs if r.get("uid") in live]
        if not kept:
            del STATE["pvcs"][name]
            shutil.rmtree(volume_dir(name), ignore_errors=True)
        elif len(kept) != len(refs):
            pvc["metadata"]["ownerReferences"] = kept
            pvc["metadata"]["resourceVersion"] = next_rv()


def delete_sandbox(claim_name):
    """The Sandbox of a cold claim and its pod go (caller holds LOCK)."""
    sb = STATE["sandboxes"].pop(claim_name, None)
    if sb is None:
        return
    pod = STATE["pods"].get(sb["pod"])
    if pod is not None:
        release_pod(pod)
    collect_garbage()


def reconcile_cold(name, obj):
    """A claim with volumeClaimTemplates (caller holds LOCK): a Sandbox named after it, its PVCs
    made or adopted, a pod on them."""
    if ARGS.vct_policy != "Allowed":
        if set_ready(obj, "False", "VolumeClaimTemplatesError",
                     "failed to merge volume claim templates: volume claim templates are disallowed by the template"):
            write_claim(obj)
        return
    sb = STATE["sandboxes"].get(name)
    if sb is None:
        sb = {"uid": "%032x" % random.getrandbits(128), "pod": name}
        owner = {"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox", "name": name, "uid": sb["uid"],
                 "controller": True, "blockOwnerDeletion": True}
        volume = None
        for t in obj["spec"]["volumeClaimTemplates"]:
            pvc_name = "%s-%s" % (t["metadata"]["name"], name)
            pvc = STATE["pvcs"].get(pvc_name)
            if pvc is None:
                labels = dict(t["metadata"].get("labels") or {})
                labels["agents.x-k8s.io/sandbox-name-hash"] = name_hash(name)
                pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                       "metadata": {"name": pvc_name, "namespace": ARGS.namespace, "labels": labels,
                                    "uid": "%032x" % random.getrandbits(128), "ownerReferences": [owner],
                                    "creationTimestamp": rfc3339(), "resourceVersion": next_rv()},
                       "spec": t["spec"], "status": {"phase": "Bound"}}
                STATE["pvcs"][pvc_name] = pvc
                os.makedirs(volume_dir(pvc_name), exist_ok=True)
            else:
                refs = pvc["metadata"].get("ownerReferences") or []
                if any(r.get("controller") for r in refs):
                    if set_ready(obj, "False", "ReconcilerError", 'PVC "%s" is owned by another controller' % pvc_name):
                        write_claim(obj)
                    return
                if (pvc["metadata"].get("labels") or {}).get("agents.x-k8s.io/sandbox-name-hash") != name_hash(name):
                    if set_ready(obj, "False", "ReconcilerError", 'cannot adopt unowned PVC "%s"' % pvc_name):
                        write_claim(obj)
                    return
                pvc["metadata"]["ownerReferences"] = refs + [owner]
                pvc["metadata"]["resourceVersion"] = next_rv()
            if t["metadata"]["name"] == "workspace":
                volume = volume_dir(pvc_name)
        sb["volume"] = volume
        STATE["sandboxes"][name] = sb
        obj["status"]["sandbox"] = {"name": name}
    pod = STATE["pods"].get(sb["pod"])
    if pod is None or (pod.dead and pod.proc.poll() is not None):
        # the Sandbox's controller makes its pod again when it is gone (a new IP), on the volume
        if pod is not None:
            release_pod(pod)
        pod = Pod(name, free_ip(), sb["volume"])
        pod.claim = name
        STATE["pods"][name] = pod
    if pod is not None and pod.ready and not pod.dead:
        obj["status"]["sandbox"] = {"name": name, "podIPs": [pod.ip]}
        if set_ready(obj, "True", "DependenciesReady", "Pod is Ready; Service Exists"):
            if STATE["timing"][name]["ready_ms"] is None:
                STATE["timing"][name]["ready_ms"] = now_ms()
            write_claim(obj)
        return
    changed = set_ready(obj, "False", "DependenciesNotReady",
                        "Pod does not exist" if pod is None or pod.dead else "Pod exists with phase: Pending")
    if obj["status"].get("sandbox", {}).get("podIPs"):
        obj["status"]["sandbox"].pop("podIPs", None)
        changed = True
    if changed:
        write_claim(obj)


def controller_loop():
    while True:
        time.sleep(0.2)
        reconcile()


# ---------------------------------------------------------------------------------------------
# HTTP

def claim_path(path):
    """→ (namespace, name or None) for the sandboxclaims collection or an item; None otherwise."""
    parts = path.strip("/").split("/")
    if len(parts) >= 6 and parts[0] == "apis" and parts[1] == GROUP and parts[2] == VERSION \
            and parts[3] == "namespaces" and parts[5] == RESOURCE:
        if len(parts) == 6:
            return parts[4], None
        if len(parts) == 7:
            return parts[4], parts[6]
    return None


def pvc_path(path):
    """→ (namespace, name or None) for the persistentvolumeclaims collection or an item."""
    parts = path.strip("/").split("/")
    if len(parts) in (5, 6) and parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "persistentvolumeclaims":
        return parts[3], (parts[5] if len(parts) == 6 else None)
    return None


def pvc_status(code, reason, message, name):
    doc = status_doc(code, reason, message)
    doc["details"] = {"name": name, "kind": "persistentvolumeclaims"}
    return doc


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def send_doc(self, code, doc, headers=None):
        body = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def fail(self, code, reason, message, name=None, headers=None):
        self.send_doc(code, status_doc(code, reason, message, name), headers)

    def read_body(self):
        n = int(self.headers.get("content-length") or 0)
        return self.rfile.read(n) if n else b""

    def body(self):
        return self.raw_body

    def do_GET(self): self.route("GET")
    def do_POST(self): self.route("POST")
    def do_PUT(self): self.route("PUT")
    def do_PATCH(self): self.route("PATCH")
    def do_DELETE(self): self.route("DELETE")

    def route(self, method):
        # the body is read first, whatever the answer: bytes left unread would be taken for the
        # next request on this keep-alive connection
        self.raw_body = self.read_body()
        u = urlsplit(self.path)
        q = {k: v[-1] for k, v in parse_qs(u.query).items()}
        if u.path.startswith("/_standin/"):
            return self.standin(method, u.path, q)
        with LOCK:
            STATE["requests"].append({"method": method, "path": u.path, "query": q})
        cert = self.connection.getpeercert() if hasattr(self.connection, "getpeercert") else None
        by_cert = bool(cert) and ("commonName", "switchboard-bot") in [x for rdn in cert.get("subject", ()) for x in rdn]
        if self.headers.get("authorization") != "Bearer " + ARGS.token and not by_cert:
            return self.fail(401, "Unauthorized", "Unauthorized")
        pvc = pvc_path(u.path)
        if pvc is not None:
            return self.pvc_route(method, pvc)
        where = claim_path(u.path)
        if where is None:
            return self.fail(404, "NotFound", "the server could not find the requested resource")
        ns, name = where
        if ns != ARGS.namespace:
            return self.fail(403, "Forbidden", 'sandboxclaims.%s is forbidden: User "system:serviceaccount:%s:switchboard-bot" '
                             'cannot access resources in the namespace "%s"' % (GROUP, ARGS.namespace, ns))
        op = {"POST": "create", "PATCH": "patch", "DELETE": "delete"}.get(method)
        if method == "GET":
            op = "get" if name else ("watch" if q.get("watch") in ("true", "1") else "list")
        if op is None:
            return self.fail(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        fault = self.take_fault(op)
        if fault:
            headers = {"retry-after": str(fault["retry_after"])} if "retry_after" in fault else None
            return self.fail(fault["status"], fault.get("reason", "InternalError"),
                             fault.get("message", "injected"), name, headers)
        getattr(self, "op_" + op)(name, q)

    def pvc_route(self, method, where):
        ns, name = where
        if ns != ARGS.namespace:
            return self.fail(403, "Forbidden", 'persistentvolumeclaims is forbidden: User "system:serviceaccount:%s:switchboard-bot" '
                             'cannot access resources in the namespace "%s"' % (ARGS.namespace, ns))
        op = {"POST": "pvc_create", "GET": "pvc_get", "PATCH": "pvc_patch", "DELETE": "pvc_delete"}.get(method)
        if op is None or (op == "pvc_create") != (name is None):
            return self.fail(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        fault = self.take_fault(op)
        if fault:
            return self.fail(fault["status"], fault.get("reason", "InternalError"), fault.get("message", "injected"), name)
        missing = pvc_status(404, "NotFound", 'persistentvolumeclaims "%s" not found' % name, name)
        if op == "pvc_create":
            try:
                obj = json.loads(self.body())
            except ValueError:
                return self.fail(400, "BadRequest", "the body of the request was in an unknown format")
            md = obj.get("metadata") or {}
            name = md.get("name")
            storage = (((obj.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage")
            if obj.get("apiVersion") != "v1" or obj.get("kind") != "PersistentVolumeClaim":
                return self.fail(400, "BadRequest", "the API version in the data does not match the expected API version (v1)")
            if not name or not storage or not (obj.get("spec") or {}).get("accessModes"):
                return self.send_doc(422, pvc_status(422, "Invalid", 'PersistentVolumeClaim "%s" is invalid: '
                                                     'spec.resources[storage]: Required value' % name, name))
            with LOCK:
                if name in STATE["pvcs"]:
                    return self.send_doc(409, pvc_status(409, "AlreadyExists",
                                                         'persistentvolumeclaims "%s" already exists' % name, name))
                md.update({"namespace": ARGS.namespace, "uid": "%032x" % random.getrandbits(128),
                           "creationTimestamp": rfc3339(), "resourceVersion": next_rv()})
                obj["metadata"] = md
                obj["status"] = {"phase": "Bound"}
                STATE["pvcs"][name] = obj
                os.makedirs(volume_dir(name), exist_ok=True)
                doc = json.loads(json.dumps(obj))
            return self.send_doc(201, doc)
        with LOCK:
            obj = STATE["pvcs"].get(name)
            if obj is None:
                return self.send_doc(404, missing)
            if op == "pvc_get":
                return self.send_doc(200, json.loads(json.dumps(obj)))
            if op == "pvc_delete":
                del STATE["pvcs"][name]
                shutil.rmtree(volume_dir(name), ignore_errors=True)
                return self.send_doc(200, json.loads(json.dumps(obj)))
            if self.headers.get("content-type") != "application/merge-patch+json":
                return self.fail(415, "UnsupportedMediaType", "the body of the request was in an unknown format")
            patch = json.loads(self.body())
            want_rv = (patch.get("metadata") or {}).get("resourceVersion")
            if want_rv is not None and want_rv != obj["metadata"]["resourceVersion"]:
                return self.send_doc(409, pvc_status(409, "Conflict", 'Operation cannot be fulfilled on persistentvolumeclaims '
                                                     '"%s": the object has been modified; please apply your changes to the '
                                                     'latest version and try again' % name, name))
            for k in ("labels", "annotations", "ownerReferences"):  # merge-patch: lists replace
                v = (patch.get("metadata") or {}).get(k)
                if isinstance(v, list):
                    obj["metadata"][k] = v
                elif isinstance(v, dict):
                    obj["metadata"].setdefault(k, {}).update(v)
            obj["metadata"]["resourceVersion"] = next_rv()
            return self.send_doc(200, json.loads(json.dumps(obj)))

    def take_fault(self, op):
        with LOCK:
            for i, f in enumerate(STATE["faults"]):
                if f["on"] == op:
                    return STATE["faults"].pop(i)
        return None

    def op_create(self, _name, _q):
        try:
            obj = json.loads(self.body())
        except ValueError:
            return self.fail(400, "BadRequest", "the body of the request was in an unknown format")
        md = obj.get("metadata") or {}
        name = md.get("name")
        if obj.get("apiVersion") != API_VERSION or obj.get("kind") != "SandboxClaim":
            return self.fail(400, "BadRequest", "the API version in the data (%s) does not match the expected API version (%s)"
                             % (obj.get("apiVersion"), API_VERSION))
        if not name or not (obj.get("spec") or {}).get("warmPoolRef", {}).get("name"):
            return self.fail(422, "Invalid", 'SandboxClaim.%s "%s" is invalid: spec.warmPoolRef.name: Required value'
                             % (GROUP, name), name)
        with LOCK:
            if name in STATE["claims"]:
                return self.fail(409, "AlreadyExists", 'sandboxclaims.%s "%s" already exists' % (GROUP, name), name)
            md.update({"namespace": ARGS.namespace, "uid": "%032x" % random.getrandbits(128),
                       "creationTimestamp": rfc3339(), "generation": 1})
            obj["metadata"] = md
            obj["status"] = {}
            STATE["timing"][name] = {"created_ms": now_ms(), "ready_ms": None, "deleted": False}
            write_claim(obj, "ADDED")
            created = json.loads(json.dumps(obj))
        self.send_doc(201, created)
        threading.Thread(target=reconcile, daemon=True).start()

    def op_get(self, name, _q):
        with LOCK:
            obj = STATE["claims"].get(name)
            doc = json.loads(json.dumps(obj)) if obj else None
        if doc is None:
            return self.fail(404, "NotFound", 'sandboxclaims.%s "%s" not found' % (GROUP, name), name)
        self.send_doc(200, doc)

    def op_list(self, _name, q):
        label = tuple(q["labelSelector"].split("=", 1)) if "labelSelector" in q else None
        with LOCK:
            w = Watcher(None, label)
            items = [json.loads(json.dumps(o)) for o in STATE["claims"].values() if w.wants(o)]
            rv = str(STATE["rv"])
        self.send_doc(200, {"kind": "SandboxClaimList", "apiVersion": API_VERSION,
                            "metadata": {"resourceVersion": rv}, "items": items})

    def op_patch(self, name, _q):
        if self.headers.get("content-type") != "application/merge-patch+json":
            return self.fail(415, "UnsupportedMediaType", "the body of the request was in an unknown format")
        patch = json.loads(self.body())

        def merge(dst, src):
            for k, v in src.items():
                if v is None:
                    dst.pop(k, None)
                elif isinstance(v, dict) and isinstance(dst.get(k), dict):
                    merge(dst[k], v)
                else:
                    dst[k] = v
        with LOCK:
            obj = STATE["claims"].get(name)
            if obj is None:
                return self.fail(404, "NotFound", 'sandboxclaims.%s "%s" not found' % (GROUP, name), name)
            merge(obj.setdefault("spec", {}), patch.get("spec") or {})
            obj["metadata"]["generation"] += 1
            write_claim(obj)
            doc = json.loads(json.dumps(obj))
        self.send_doc(200, doc)

    def op_delete(self, name, _q):
        with LOCK:
            if name not in STATE["claims"]:
                return self.fail(404, "NotFound", 'sandboxclaims.%s "%s" not found' % (GROUP, name), name)
            doc = json.loads(json.dumps(delete_claim(name)))
        self.send_doc(200, doc)

    def op_watch(self, _name, q):
        field = q.get("fieldSelector")
        name = field.split("=", 1)[1] if field and field.startswith("metadata.name=") else None
        label = tuple(q["labelSelector"].split("=", 1)) if "labelSelector" in q else None
        bookmarks = q.get("allowWatchBookmarks") == "true"
        timeout = float(q.get("timeoutSeconds") or 1800)
        w = Watcher(name, label)
        with LOCK:
            STATE["watches_opened"] += 1
            rv = q.get("resourceVersion")
            backlog, expired = [], False
            if rv in (None, "", "0"):
                backlog = [("ADDED", json.loads(json.dumps(o))) for o in STATE["claims"].values() if w.wants(o)]
            elif int(rv) < STATE["compacted"]:
                expired = True
            else:
                backlog = [(k, o) for (r, k, o) in STATE["history"] if r > int(rv) and w.wants(o)]
            STATE["watchers"].append(w)
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

        def chunk(doc):
            data = (json.dumps(doc) + "\n").encode()
            # written in two pieces, split inside the line: a client must join them
            cut = max(1, len(data) // 3)
            for part in (data[:cut], data[cut:]):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                self.wfile.flush()
        try:
            if expired:
                chunk({"type": "ERROR", "object": status_doc(
                    410, "Expired", "too old resource version: %s (%d)" % (rv, STATE["compacted"]))})
                self.wfile.write(b"0\r\n\r\n")
                return
            for kind, obj in backlog:
                chunk({"type": kind, "object": obj})
            end = time.monotonic() + timeout
            next_bookmark = time.monotonic() + ARGS.bookmark_ms / 1000
            while time.monotonic() < end:
                if w.cut:
                    self.close_connection = True
                    self.connection.shutdown(2)  # cut mid-stream: no terminating chunk
                    return
                try:
                    kind, obj = w.q.get(timeout=0.05)
                    chunk({"type": kind, "object": obj})
                except queue.Empty:
                    pass
                if bookmarks and time.monotonic() >= next_bookmark:
                    next_bookmark = time.monotonic() + ARGS.bookmark_ms / 1000
                    with LOCK:
                        mark = str(STATE["rv"])
                    chunk({"type": "BOOKMARK", "object": {"kind": "SandboxClaim", "apiVersion": API_VERSION,
                                                          "metadata": {"resourceVersion": mark}}})
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True
        finally:
            with LOCK:
                if w in STATE["watchers"]:
                    STATE["watchers"].remove(w)

    def standin(self, method, path, _q):
        parts = path.strip("/").split("/")
        with LOCK:
            if method == "PUT" and parts[1] == "faults":
                STATE["faults"].extend(json.loads(self.body()))
                return self.send_doc(200, {"ok": True})
            if method == "POST" and parts[1] == "cut-watches":
                for w in STATE["watchers"]:
                    w.cut = True
                return self.send_doc(200, {"cut": len(STATE["watchers"])})
            if method == "POST" and parts[1] == "compact":
                STATE["compacted"] = STATE["rv"] + 1
                STATE["history"] = []
                return self.send_doc(200, {"compacted": STATE["compacted"]})
            if method == "POST" and parts[1] == "kill":
                obj = STATE["claims"].get(parts[2])
                pod = STATE["pods"].get(((obj or {}).get("status") or {}).get("sandbox", {}).get("name", ""))
                if pod is None:
                    return self.send_doc(404, {"error": "no pod"})
                pod.stop(signal.SIGKILL)
                return self.send_doc(200, {"killed": pod.name})
            if method == "POST" and parts[1] == "pool":
                STATE["pool_size"] = int(json.loads(self.body())["size"])
                refill()
                return self.send_doc(200, {"size": STATE["pool_size"]})
            if method == "GET" and parts[1] == "claims":
                out = []
                for name, t in STATE["timing"].items():
                    obj = STATE["claims"].get(name)
                    out.append({"name": name, "created_ms": t["created_ms"], "ready_ms": t["ready_ms"],
                                "deleted": t["deleted"], "exists": obj is not None,
                                "pod": ((obj or {}).get("status") or {}).get("sandbox", {}).get("name"),
                                "labels": ((obj or {}).get("metadata") or {}).get("labels"),
                                "spec": (obj or {}).get("spec")})
                return self.send_doc(200, out)
            if method == "GET" and parts[1] == "pods":
                return self.send_doc(200, [{"name": p.name, "ip": p.ip, "pid": p.proc.pid, "ready": p.ready,
                                            "alive": p.proc.poll() is None, "claim": p.claim, "root": p.root}
                                           for p in STATE["pods"].values()])
            if method == "GET" and parts[1] == "requests":
                return self.send_doc(200, STATE["requests"])
            if method == "GET" and parts[1] == "pvcs":
                return self.send_doc(200, [{"name": n, "labels": o["metadata"].get("labels"),
                                            "ownerReferences": o["metadata"].get("ownerReferences") or [],
                                            "dir": volume_dir(n)} for n, o in STATE["pvcs"].items()])
            if method == "GET" and parts[1] == "watches":
                return self.send_doc(200, {"opened": STATE["watches_opened"], "open": len(STATE["watchers"])})
        self.send_doc(404, {"error": "no such test route"})


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def make_cert(d):
    """The server's certificate (self-signed: DIR/ca.crt is what clients trust), and a client CA
    with one client certificate (DIR/client.crt, DIR/client.key) as a kubeconfig's
    client-certificate-data would hold."""
    def run(*argv):
        subprocess.run(list(argv), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    key, crt = os.path.join(d, "tls.key"), os.path.join(d, "ca.crt")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("openssl", "req", "-x509", *ec, "-keyout", key, "-out", crt, "-days", "1", "-subj", "/CN=kube-standin",
        "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost")
    cakey, cacrt = os.path.join(d, "client-ca.key"), os.path.join(d, "client-ca.crt")
    run("openssl", "req", "-x509", *ec, "-keyout", cakey, "-out", cacrt, "-days", "1", "-subj", "/CN=client-ca")
    ckey, ccsr, ccrt = os.path.join(d, "client.key"), os.path.join(d, "client.csr"), os.path.join(d, "client.crt")
    run("openssl", "req", *ec, "-keyout", ckey, "-out", ccsr, "-subj", "/O=switchboard/CN=switchboard-bot")
    run("openssl", "x509", "-req", "-in", ccsr, "-CA", cacrt, "-CAkey", cakey, "-CAcreateserial", "-out", ccrt, "-days", "1")
    return crt, key, cacrt


def shutdown(*_):
    with LOCK:
        STATE["stopping"] = True
    # every pod still running, also those released and still draining (out of STATE); again
    # until none is left, so that a pod started meanwhile (a request's pass already past its
    # check of "stopping") is killed too
    while True:
        with LOCK:
            pods = [p for p in EVERY_POD if p.proc.poll() is None]
        if not pods:
            break
        for p in pods:
            p.stop(signal.SIGKILL)
        for p in pods:
            p.reap()
    os._exit(0)


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--policies", default="")
    ap.add_argument("--namespace", default="switchboard")
    ap.add_argument("--pool", default="switchboard")
    ap.add_argument("--pool-size", type=int, default=1)
    ap.add_argument("--pod-port", type=int, default=0)
    ap.add_argument("--tls", action="store_true")
    ap.add_argument("--bookmark-ms", type=int, default=1000)
    ap.add_argument("--finalize-ms", type=int, default=300)
    ap.add_argument("--vct-policy", default="Allowed", choices=["Allowed", "Disallowed"])
    watched.add_argument(ap)  # exit, killing every pod, when the spec is gone
    ARGS = ap.parse_args()
    if not ARGS.pod_port:
        ARGS.pod_port = random.randint(20000, 60000)
    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    srv = Server(("127.0.0.1", 0), Handler)
    if ARGS.tls:
        crt, key, client_ca = make_cert(ARGS.dir)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(crt, key)
        # a client certificate is asked for, verified against the client CA, and optional (the
        # bearer token is the other way in), as kube-apiserver's --client-ca-file does
        ctx.verify_mode = ssl.CERT_OPTIONAL
        ctx.load_verify_locations(client_ca)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    watched.end_with(ARGS.watch, shutdown)
    with LOCK:
        STATE["pool_size"] = ARGS.pool_size
        refill()
    threading.Thread(target=controller_loop, daemon=True).start()
    with open(os.path.join(ARGS.dir, "pid"), "w") as f:
        f.write(str(os.getpid()))
    with open(os.path.join(ARGS.dir, "pod_port.tmp"), "w") as f:
        f.write(str(ARGS.pod_port))
    os.rename(os.path.join(ARGS.dir, "pod_port.tmp"), os.path.join(ARGS.dir, "pod_port"))
    with open(os.path.join(ARGS.dir, "port.tmp"), "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(os.path.join(ARGS.dir, "port.tmp"), os.path.join(ARGS.dir, "port"))
    srv.serve_forever()


if __name__ == "__main__":
    main()

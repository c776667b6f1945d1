// The sandbox Worker in Cloudflare's local runtime (workerd, through miniflare), in front of a
// real `switchboard sandboxd` on loopback standing in for the container (test/entry.ts).
// Run by deploy/tests/cloudflare.sh with npm's Node 22: node test/worker.test.mjs
//   SWITCHBOARD_BIN  the binary whose sandboxd plays the container (default ../../build/switchboard)
import { test, after, before } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { randomBytes } from "node:crypto";
import * as esbuild from "esbuild";
import { Miniflare } from "miniflare";

const here = path.dirname(fileURLToPath(import.meta.url));
const BIN = process.env.SWITCHBOARD_BIN || path.resolve(here, "../../../build/switchboard");
const TOKEN = "worker-test-" + randomBytes(12).toString("hex");
const OWN = JSON.parse(execFileSync(BIN, ["version", "--json"], { encoding: "utf8" })).commit;

const work = mkdtempSync(path.join(tmpdir(), "sb-worker-"));
chmodSync(work, 0o755); // the walled instances' own uids must reach their workspaces under it
let sandboxd, proxy, proxyUrl;
const seen = []; // {instance, thread, path, token} per request the "container" received
const logs = []; // the Worker's console lines

// sandboxd on 127.0.0.1:0; resolves with its URL from the sandboxd.listening line.
function startSandboxd() {
  return new Promise((resolve, reject) => {
    const p = spawn(BIN, ["sandboxd", "--listen", "127.0.0.1:0", "--root", path.join(work, "root")], {
      env: { PATH: process.env.PATH, HOME: work, SANDBOX_TOKEN: TOKEN },
      stdio: ["ignore", "ignore", "pipe"],
    });
    let err = "";
    const timer = setTimeout(() => reject(new Error("sandboxd did not start:\n" + err)), 20000);
    p.stderr.on("data", (chunk) => {
      err += chunk;
      const m = err.match(/sandboxd\.listening[^\n]*port=(\d+)/);
      if (m) { clearTimeout(timer); resolve({ proc: p, url: `http://127.0.0.1:${m[1]}` }); }
    });
    p.on("exit", (code) => reject(new Error(`sandboxd exited ${code}:\n${err}`)));
  });
}

// Records which Durable Object (x-sandbox-instance) sent each request, strips the test headers,
// and forwards the rest to sandboxd byte for byte.
function startProxy(target) {
  return new Promise((resolve) => {
    const srv = http.createServer((req, res) => {
      const headers = { ...req.headers };
      seen.push({ instance: headers["x-sandbox-instance"], thread: headers["x-thread-key"], path: req.url,
                  startedWithToken: headers["x-sandbox-started-with-token"] === "yes" });
      delete headers["x-sandbox-instance"];
      delete headers["x-sandbox-started-with-token"];
      const up = http.request(target + req.url, { method: req.method, headers }, (answer) => {
        res.writeHead(answer.statusCode, answer.headers);
        answer.pipe(res);
      });
      up.on("error", () => { res.writeHead(502); res.end(); });
      req.pipe(up);
    });
    srv.listen(0, "127.0.0.1", () => resolve({ srv, url: `http://127.0.0.1:${srv.address().port}` }));
  });
}

// The Worker bundled with BUILD as its stamp, as `wrangler deploy` bundles it after stamp.mjs.
async function bundle(build) {
  execFileSync(process.execPath, [path.join(here, "..", "stamp.mjs"), "--commit", build]);
  const out = path.join(work, "worker.js");
  await esbuild.build({
    entryPoints: [path.join(here, "entry.ts")], bundle: true, format: "esm", platform: "neutral",
    target: "es2022", outfile: out, external: ["cloudflare:*"], conditions: ["workerd", "worker", "browser"],
    mainFields: ["module", "main"], logLevel: "error",
  });
  return out;
}

async function worker(build) {
  const scriptPath = await bundle(build);
  return new Miniflare({
    modules: true, scriptPath, modulesRoot: path.dirname(scriptPath), compatibilityDate: "2025-11-01",
    durableObjects: { SANDBOX: { className: "SandboxContainer", useSQLite: true } },
    bindings: { SANDBOX_TOKEN: TOKEN, SANDBOX_SLEEP_AFTER: "5m", LOCAL_SANDBOXD: proxyUrl },
    handleRuntimeStdio: (stdout, stderr) => {
      for (const stream of [stdout, stderr]) {
        let rest = "";
        stream.on("data", (chunk) => {
          rest += chunk;
          const lines = rest.split("\n");
          rest = lines.pop();
          logs.push(...lines);
        });
      }
    },
  });
}

function call(mf, route, { token = TOKEN, thread = "T1", body, method } = {}) {
  const headers = { "content-type": "application/json" };
  if (token !== null) headers.authorization = `Bearer ${token}`;
  if (thread !== null) headers["x-thread-key"] = thread;
  return mf.dispatchFetch(`https://sandbox.example${route}`, {
    method: method ?? (route === "/healthz" ? "GET" : "POST"), headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

async function waitFor(pred, ms) {
  const t0 = Date.now();
  while (!pred() && Date.now() - t0 < ms) await new Promise((r) => setTimeout(r, 20));
  return pred();
}

before(async () => {
  sandboxd = await startSandboxd();
  ({ srv: proxy, url: proxyUrl } = await startProxy(sandboxd.url));
});

after(() => {
  sandboxd?.proc.kill("SIGTERM");
  proxy?.close();
  rmSync(work, { recursive: true, force: true });
});

test("refuses a missing or wrong bearer (401), an unknown route (404) and a missing thread key (400)", async () => {
  const mf = await worker(OWN);
  try {
    assert.equal((await call(mf, "/exec", { token: null, body: { command: "true" } })).status, 401);
    assert.equal((await call(mf, "/exec", { token: "x" + TOKEN.slice(1), body: { command: "true" } })).status, 401);
    assert.equal((await call(mf, "/exec", { token: TOKEN + "x", body: { command: "true" } })).status, 401);
    assert.equal((await call(mf, "/exec", { token: "", body: { command: "true" } })).status, 401);
    assert.equal((await call(mf, "/admin", { method: "GET" })).status, 404);
    assert.equal((await call(mf, "/exec", { thread: null, body: { command: "true" } })).status, 400);
    assert.equal(seen.length, 0, "nothing refused reached the container");
  } finally { await mf.dispose(); }
});

test("passes /exec, /write, /read and /healthz through unchanged, each thread to its own instance", async () => {
  const mf = await worker(OWN);
  try {
    const exec = await call(mf, "/exec", { thread: "A", body: { command: "echo hi-from-$((6*7))", env: {} } });
    assert.equal(exec.status, 200, await exec.clone().text());
    const doc = JSON.parse(await exec.text());
    assert.equal(doc.stdout, "hi-from-42\n");
    assert.equal(doc.exitCode, 0);

    const w = await call(mf, "/write", { thread: "A", body: { path: "note.txt", content: "a-only", env: {} } });
    assert.equal(w.status, 200, await w.clone().text());
    const r = await call(mf, "/read", { thread: "A", body: { path: "note.txt", env: {} } });
    assert.equal(r.status, 200);
    const content = JSON.parse(await r.text()).content;
    assert.equal(Buffer.from(content, "base64").toString(), "a-only");
    const other = await call(mf, "/read", { thread: "B", body: { path: "note.txt", env: {} } });
    assert.notEqual(other.status, 200, "thread B must not see thread A's workspace");

    // /healthz through the Worker is byte for byte what sandboxd says.
    const viaWorker = await (await call(mf, "/healthz")).text();
    const direct = await (await fetch(sandboxd.url + "/healthz", { headers: { authorization: `Bearer ${TOKEN}` } })).text();
    assert.equal(viaWorker, direct);

    const byThread = new Map();
    for (const s of seen.filter((s) => s.thread === "A" || s.thread === "B")) {
      if (!byThread.has(s.thread)) byThread.set(s.thread, new Set());
      byThread.get(s.thread).add(s.instance);
    }
    assert.equal(byThread.get("A").size, 1, "thread A always reaches one instance");
    assert.equal(byThread.get("B").size, 1, "thread B always reaches one instance");
    assert.notEqual([...byThread.get("A")][0], [...byThread.get("B")][0], "A and B have instances of their own");
    assert.ok(seen.every((s) => s.startedWithToken), "each container was started with SANDBOX_TOKEN in its env");
  } finally { await mf.dispose(); }
});

test("logs sandbox.version-skew at warn when the container's build differs, and serves anyway", async () => {
  const mf = await worker("0ld-build");
  try {
    logs.length = 0;
    const exec = await call(mf, "/exec", { thread: "skew-1", body: { command: "echo still-served", env: {} } });
    assert.equal(JSON.parse(await exec.text()).stdout, "still-served\n");
    assert.ok(await waitFor(() => logs.some((l) => l.includes("sandbox.version-skew")), 10000), logs.join("\n"));
    const line = logs.find((l) => l.includes("sandbox.version-skew"));
    const event = JSON.parse(line.slice(line.indexOf("{")));
    assert.deepEqual(event, { level: "warn", event: "sandbox.version-skew", container: OWN, worker: "0ld-build" });
  } finally { await mf.dispose(); }
});

test("says nothing when the container runs the deployed build", async () => {
  const mf = await worker(OWN);
  try {
    logs.length = 0;
    const before = seen.length;
    await (await call(mf, "/exec", { thread: "same-1", body: { command: "true", env: {} } })).text();
    // the check's own /healthz reaches the container too; wait for it, then look
    assert.ok(await waitFor(() => seen.slice(before).some((s) => s.path === "/healthz"), 10000));
    await new Promise((r) => setTimeout(r, 200));
    assert.ok(!logs.some((l) => l.includes("version-skew")), logs.join("\n"));
  } finally { await mf.dispose(); }
});

test("turns the platform's no-instance 503 into the protocol's fleet-busy answer, and nothing else", async () => {
  const mf = await worker(OWN);
  try {
    const before = seen.length;
    const res = await call(mf, "/exec", { thread: "fleet-full", body: { command: "true", env: {} } });
    assert.equal(res.status, 503);
    const doc = await res.json();
    assert.equal(doc.reason, "fleet-busy");
    assert.match(doc.error, /fleet is full.*no Container instance available/s);
    assert.equal(seen.length, before, "nothing reached a container");
    // sandboxd's own JSON 503 would pass through as it is: a plain 200 from it certainly does
    const ok = await call(mf, "/exec", { thread: "not-full", body: { command: "echo fine", env: {} } });
    assert.equal(JSON.parse(await ok.text()).stdout, "fine\n");
  } finally { await mf.dispose(); }
});

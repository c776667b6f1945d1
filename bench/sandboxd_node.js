// The Node peer of sandboxd's /exec protocol (lua/switchboard/shell/protocol.lua), for the paired
// benchmark (bench/paired.lua): what a straightforward Node server of the same protocol costs on
// this machine. Bearer check, x-thread-key, `bash -c` with the request's env, a space every
// heartbeat while the command runs, then one JSON document {stdout, stderr, exitCode,
// durationMs}. No walls: Node cannot build them.
//
//   SANDBOX_TOKEN=t node bench/sandboxd_node.js PORT_FILE [HEARTBEAT_MS=15000]
//
// Listens on 127.0.0.1, an ephemeral port, written to PORT_FILE once listening.
"use strict";
const http = require("node:http");
const crypto = require("node:crypto");
const { spawn } = require("node:child_process");
const fs = require("node:fs");

const token = Buffer.from("Bearer " + (process.env.SANDBOX_TOKEN || ""));
const heartbeatMs = Number(process.argv[3] || 15000);
const PATH = "/usr/local/bin:/usr/bin:/bin";

function authorized(req) {
  const got = Buffer.from(req.headers.authorization || "");
  return got.length === token.length && crypto.timingSafeEqual(got, token);
}

function exec(req, res, body) {
  let call;
  try { call = JSON.parse(body); } catch { call = null; }
  if (!call || typeof call.command !== "string") {
    res.writeHead(400, { "content-type": "application/json" });
    return res.end(JSON.stringify({ error: "body must be JSON with a command" }));
  }
  const t0 = process.hrtime.bigint();
  const child = spawn("bash", ["-c", call.command], {
    env: Object.assign({ PATH }, call.env || {}), stdio: ["ignore", "pipe", "pipe"], detached: true,
  });
  const out = [], err = [];
  child.stdout.on("data", (b) => out.push(b));
  child.stderr.on("data", (b) => err.push(b));
  res.writeHead(200, { "content-type": "application/json", "cache-control": "no-store" });
  const beat = setInterval(() => res.write(" "), heartbeatMs);
  child.on("close", (code, signal) => {
    clearInterval(beat);
    res.end(JSON.stringify({
      stdout: Buffer.concat(out).toString("utf8"), stderr: Buffer.concat(err).toString("utf8"),
      exitCode: code === null ? 128 + (signal ? require("node:os").constants.signals[signal] : 0) : code,
      durationMs: Math.round(Number(process.hrtime.bigint() - t0) / 1e6),
    }));
  });
}

const server = http.createServer((req, res) => {
  if (!authorized(req)) {
    res.writeHead(401, { "content-type": "application/json" });
    return res.end(JSON.stringify({ error: "unauthorized" }));
  }
  if (req.method !== "POST" || req.url !== "/exec" || !req.headers["x-thread-key"]) {
    res.writeHead(404, { "content-type": "application/json" });
    return res.end(JSON.stringify({ error: "POST /exec with x-thread-key" }));
  }
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => exec(req, res, Buffer.concat(chunks).toString("utf8")));
});
server.keepAliveTimeout = 60000;
server.listen(0, "127.0.0.1", () => fs.writeFileSync(process.argv[2], String(server.address().port)));
process.on("SIGTERM", () => process.exit(0));

// Peer for the per-exec overhead benchmark: the earlier system's local executor, Node's
// child_process.execFile, running N sequential `bash -c true`. One line per round: mean µs.
const { execFile } = require("node:child_process");
const n = Number(process.argv[2] || 200), rounds = Number(process.argv[3] || 5);
const once = () => new Promise((resolve, reject) =>
  execFile("bash", ["-c", "true"], { env: { PATH: "/usr/local/bin:/usr/bin:/bin" } },
    (err) => (err ? reject(err) : resolve())));
(async () => {
  for (let r = 0; r < rounds; r++) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < n; i++) await once();
    console.log((Number(process.hrtime.bigint() - t0) / 1e3 / n).toFixed(1));
  }
})();

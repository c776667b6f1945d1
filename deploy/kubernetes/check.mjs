// Offline validation of the Kubernetes manifests (issue 14 item 6; docs/deploy.md
// "Kubernetes"): every document is checked against the Kubernetes API's own OpenAPI schemas
// (npm's kubernetes-models: types, required fields, enums), then against what the deployment
// needs — the size and ceiling in deploy/instance.json, selectors that match their pods, the
// headless Service, probes, and the bot's SANDBOX_URL naming exactly the StatefulSet's pods.
// No cluster is needed, so the suite runs it everywhere.   node check.mjs
import { readFileSync, readdirSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";

const here = path.dirname(fileURLToPath(import.meta.url));
const instance = JSON.parse(readFileSync(path.join(here, "..", "instance.json"), "utf8"));
let passed = 0;
const failures = [];
function check(what, cond, detail = "") {
  if (cond) { passed++; console.log(`ok ${passed + failures.length} - ${what}`); }
  else { failures.push(what); console.log(`not ok ${passed + failures.length} - ${what} ${detail}`); }
}

const MODELS = {
  "v1/Service": "kubernetes-models/v1/Service",
  "apps/v1/StatefulSet": "kubernetes-models/apps/v1/StatefulSet",
  "apps/v1/Deployment": "kubernetes-models/apps/v1/Deployment",
  "policy/v1/PodDisruptionBudget": "kubernetes-models/policy/v1/PodDisruptionBudget",
};

const docs = [];
for (const file of readdirSync(here).filter((f) => f.endsWith(".yaml")).sort()) {
  for (const d of parseAllDocuments(readFileSync(path.join(here, file), "utf8"))) {
    check(`${file}: parses as YAML`, d.errors.length === 0, d.errors.map(String).join("; "));
    docs.push({ file, doc: d.toJSON() });
  }
}
for (const { file, doc } of docs) {
  const key = `${doc.apiVersion}/${doc.kind}`;
  const modulePath = MODELS[key];
  check(`${file}: ${key} is a kind this check knows`, modulePath !== undefined);
  if (!modulePath) continue;
  const mod = await import(modulePath);
  let error = null;
  try { new mod[doc.kind](doc).validate(); } catch (e) { error = e.message; }
  check(`${file}: ${doc.kind} ${doc.metadata?.name} matches the Kubernetes API schema`, error === null, error ?? "");
}

const find = (kind, name) => docs.map((d) => d.doc).find((d) => d.kind === kind && d.metadata.name === name);
const sts = find("StatefulSet", "sandboxd");
const svc = find("Service", "sandboxd");
const pdb = find("PodDisruptionBudget", "sandboxd");
const bot = find("Deployment", "switchboard-bot");
check("the sandboxd StatefulSet, Service and PodDisruptionBudget and the bot Deployment exist", sts && svc && pdb && bot);

const labels = sts.spec.template.metadata.labels;
const selects = (sel) => Object.entries(sel).every(([k, v]) => labels[k] === v);
check("the Service is headless", svc.spec.clusterIP === "None");
check("the StatefulSet is governed by that Service", sts.spec.serviceName === svc.metadata.name);
check("the StatefulSet's selector matches its pods", selects(sts.spec.selector.matchLabels));
check("the Service selects the sandboxd pods", selects(svc.spec.selector));
check("the PodDisruptionBudget selects the sandboxd pods", selects(pdb.spec.selector.matchLabels));

const c = sts.spec.template.spec.containers[0];
const res = c.resources;
const want = { cpu: String(instance.vcpu), memory: `${instance.memory_gib}Gi`, "ephemeral-storage": `${instance.disk_gb}Gi` };
for (const [k, v] of Object.entries(want)) {
  check(`each sandboxd pod requests and is limited to ${k} ${v} (${instance.instance_type})`,
    String(res.requests[k]) === v && String(res.limits[k]) === v, JSON.stringify(res));
}
const maxIdx = c.command.indexOf("--max-instances");
const perPod = Number(c.command[maxIdx + 1]);
check(`replicas × --max-instances is the fleet ceiling ${instance.max_instances}`,
  maxIdx > 0 && sts.spec.replicas * perPod === instance.max_instances, `${sts.spec.replicas} × ${perPod}`);
check("sandboxd has readiness and liveness probes", c.readinessProbe && c.livenessProbe);
check("the probes read the bearer from the environment, not the manifest",
  [c.readinessProbe, c.livenessProbe].every((p) => p.exec && !JSON.stringify(p).includes("Bearer ey")) &&
  !JSON.stringify(sts).match(/SANDBOX_TOKEN"\s*,\s*"value"/));
check("the token comes from a Secret", c.env.find((e) => e.name === "SANDBOX_TOKEN")?.valueFrom?.secretKeyRef?.name === "switchboard-sandbox");
const grace = sts.spec.template.spec.terminationGracePeriodSeconds;
check("the grace period covers sandboxd's drain (30 s) and flush (2 s)", grace >= 32, String(grace));

const port = svc.spec.ports[0].port;
const urls = bot.spec.template.spec.containers[0].env.find((e) => e.name === "SANDBOX_URL").value.split(",");
const pods = Array.from({ length: sts.spec.replicas }, (_, i) => `http://${sts.metadata.name}-${i}.${svc.metadata.name}:${port}`);
check("the bot's SANDBOX_URL names exactly the StatefulSet's pods", JSON.stringify(urls) === JSON.stringify(pods),
  `${urls.join(",")} vs ${pods.join(",")}`);
check("the bot runs `switchboard slack`", bot.spec.template.spec.containers[0].command.includes("slack"));
check("one bot at a time (Recreate, one replica)", bot.spec.replicas === 1 && bot.spec.strategy.type === "Recreate");

console.log(`${passed} passed, ${failures.length} failed`);
process.exit(failures.length ? 1 : 0);

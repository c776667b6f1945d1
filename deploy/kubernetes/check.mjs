// Offline validation of the Kubernetes manifests (issue 14 item 6; docs/deploy.md
// "Kubernetes"): every document is checked against the Kubernetes API's own OpenAPI schemas
// (npm's kubernetes-models: types, required fields, enums), then against what the deployment
// needs — the size and ceiling in deploy/instance.json, selectors that match their pods, the
// headless Service, probes, and the bot's SANDBOX_URL naming exactly the StatefulSet's pods;
// every container's probes, resources, securityContext (locked down, the walls' exceptions
// only on sandboxd and only those) and secrets from Secret objects.
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
  "v1/ConfigMap": "kubernetes-models/v1/ConfigMap",
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

// Every container of every workload: probes, resources, a locked-down securityContext.
// docs/deploy.md "The wall in a container": podman's sb_walls_flags (deploy/sandbox/podman-env)
// but MKNOD, which gives no device node in the pod's own user namespace (hostUsers: false)
const WALLS_CAPS = ["CHOWN", "DAC_OVERRIDE", "SETUID", "SETGID", "KILL", "SYS_ADMIN", "SYS_PTRACE"];
const SECRETISH = /TOKEN|SECRET|KEY|PASSWORD/;
for (const w of [sts, bot]) {
  const pod = w.spec.template.spec;
  for (const ct of pod.containers) {
    const who = `${w.metadata.name}/${ct.name}`;
    const sc = ct.securityContext ?? {};
    const seccomp = sc.seccompProfile?.type ?? pod.securityContext?.seccompProfile?.type;
    const walls = w === sts;
    check(`${who}: liveness and readiness probes`, ct.livenessProbe && ct.readinessProbe);
    check(`${who}: requests and limits for cpu and memory`,
      ["cpu", "memory"].every((k) => ct.resources?.requests?.[k] && ct.resources?.limits?.[k]), JSON.stringify(ct.resources));
    check(`${who}: never privileged, no privilege escalation, a read-only root`,
      sc.privileged !== true && sc.allowPrivilegeEscalation === false && sc.readOnlyRootFilesystem === true, JSON.stringify(sc));
    check(`${who}: every capability dropped`, (sc.capabilities?.drop ?? []).includes("ALL"));
    const added = sc.capabilities?.add ?? [];
    check(`${who}: capabilities added back are ${walls ? "only the walls' own" : "none"}`,
      walls ? added.every((c) => WALLS_CAPS.includes(c)) : added.length === 0, JSON.stringify(added));
    check(`${who}: ${walls ? "seccomp RuntimeDefault, or Unconfined for the walls' namespaces" : "seccomp RuntimeDefault"}`,
      seccomp === "RuntimeDefault" || (walls && seccomp === "Unconfined"), String(seccomp));
    if (!walls) check(`${who}: runs as a user other than root`, sc.runAsNonRoot === true && sc.runAsUser > 0);
    if (sc.procMount === "Unmasked") check(`${who}: an unmasked /proc only in a pod of its own user namespace`, pod.hostUsers === false);
    for (const e of ct.env ?? []) {
      if (SECRETISH.test(e.name)) {
        check(`${who}: ${e.name} comes from a Secret`, e.value === undefined && e.valueFrom?.secretKeyRef?.name !== undefined);
      }
    }
    check(`${who}: other variables from Secret objects only`, (ct.envFrom ?? []).every((f) => f.secretRef && !f.configMapRef));
  }
}
const botC = bot.spec.template.spec.containers[0];
check("the bot sends every command to sandboxd (--backend sandbox), never to its own pod",
  botC.command.join(" ").includes("--backend sandbox"));
check("the bot's SANDBOX_TOKEN comes from the sandbox's Secret",
  botC.env.find((e) => e.name === "SANDBOX_TOKEN")?.valueFrom?.secretKeyRef?.name === "switchboard-sandbox");
check("the bot's probes: /healthz live, /readyz ready",
  botC.livenessProbe?.httpGet?.path === "/healthz" && botC.readinessProbe?.httpGet?.path === "/readyz");
check("sandboxd never runs --no-walls", !c.command.includes("--no-walls"));
// The walls' network (pasta): every capability podman's flags add, and the tun device.
check("sandboxd gets every capability its walls need in a pod of its own user namespace",
  WALLS_CAPS.every((k) => (c.securityContext?.capabilities?.add ?? []).includes(k)), JSON.stringify(c.securityContext?.capabilities));
const tunMount = (c.volumeMounts ?? []).find((m) => m.mountPath === "/dev/net/tun");
const tunVolume = sts.spec.template.spec.volumes.find((v) => v.name === tunMount?.name);
check("sandboxd gets /dev/net/tun: the node's character device (hostPath CharDevice), not a privileged pod",
  tunVolume?.hostPath?.path === "/dev/net/tun" && tunVolume.hostPath.type === "CharDevice" && !tunMount.readOnly,
  JSON.stringify({ tunMount, tunVolume }));
check("the only hostPath of sandboxd's pod is /dev/net/tun",
  sts.spec.template.spec.volumes.filter((v) => v.hostPath).every((v) => v === tunVolume));

console.log(`${passed} passed, ${failures.length} failed`);
process.exit(failures.length ? 1 : 0);

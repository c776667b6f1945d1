// Offline validation of the Kubernetes manifests (issue 14 item 6, issue 27; docs/deploy.md
// "Validating the manifests"): every document is checked against the Kubernetes API's own
// OpenAPI schemas (npm's kubernetes-models: types, required fields, enums) and strictly (no
// field its type does not have: strict.mjs), agent-sandbox's kinds against our schema of the
// fields we use at the pinned version (schemas/agent-sandbox-v0.5.6.json, closed objects);
// then against what the deployment needs — the size and ceiling in deploy/instance.json,
// selectors that match their pods, the headless Service, probes, the bot on the kubernetes
// backend with a Role on sandboxclaims only, the template's runtime class and pod mode, the
// NetworkPolicy and the warm pool the policy names; every container's probes, resources,
// securityContext (locked down, the walls' exceptions only on the StatefulSet's sandboxd and
// only those) and secrets from Secret objects.
// No cluster is needed, so the suite runs it everywhere.   node check.mjs
import { readFileSync, readdirSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";
import { unknownFields, checkSchema } from "./strict.mjs";

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
  "v1/PersistentVolumeClaim": "kubernetes-models/v1/PersistentVolumeClaim",
  "apps/v1/StatefulSet": "kubernetes-models/apps/v1/StatefulSet",
  "apps/v1/Deployment": "kubernetes-models/apps/v1/Deployment",
  "policy/v1/PodDisruptionBudget": "kubernetes-models/policy/v1/PodDisruptionBudget",
  "v1/ServiceAccount": "kubernetes-models/v1/ServiceAccount",
  "rbac.authorization.k8s.io/v1/Role": "kubernetes-models/rbac.authorization.k8s.io/v1/Role",
  "rbac.authorization.k8s.io/v1/RoleBinding": "kubernetes-models/rbac.authorization.k8s.io/v1/RoleBinding",
  "networking.k8s.io/v1/NetworkPolicy": "kubernetes-models/networking.k8s.io/v1/NetworkPolicy",
};
// agent-sandbox's kinds: our schema of the fields we use at the pinned version
const sandboxSchema = JSON.parse(readFileSync(path.join(here, "schemas", "agent-sandbox-v0.5.6.json"), "utf8"));
const SANDBOX_API = "extensions.agents.x-k8s.io/v1beta1";

const docs = [];
for (const file of readdirSync(here).filter((f) => f.endsWith(".yaml")).sort()) {
  for (const d of parseAllDocuments(readFileSync(path.join(here, file), "utf8"))) {
    check(`${file}: parses as YAML`, d.errors.length === 0, d.errors.map(String).join("; "));
    docs.push({ file, doc: d.toJSON() });
  }
}
async function problemsOf(doc) {
  if (doc.apiVersion === SANDBOX_API && sandboxSchema.kinds[doc.kind]) {
    return checkSchema(sandboxSchema.kinds[doc.kind], doc);
  }
  const modulePath = MODELS[`${doc.apiVersion}/${doc.kind}`];
  const mod = await import(modulePath);
  const out = [];
  try { new mod[doc.kind](doc).validate(); } catch (e) { out.push(e.message); }
  for (const f of unknownFields(modulePath, doc)) out.push(`${f}: not a field of ${doc.kind}`);
  return out;
}
for (const { file, doc } of docs) {
  const key = `${doc.apiVersion}/${doc.kind}`;
  const known = MODELS[key] !== undefined || (doc.apiVersion === SANDBOX_API && sandboxSchema.kinds[doc.kind] !== undefined);
  check(`${file}: ${key} is a kind this check knows`, known);
  if (!known) continue;
  const problems = await problemsOf(doc);
  const against = doc.apiVersion === SANDBOX_API ? `agent-sandbox ${sandboxSchema.version}'s schema` : "the Kubernetes API schema";
  check(`${file}: ${doc.kind} ${doc.metadata?.name} matches ${against}, no unknown field`, problems.length === 0, problems.join("; "));
}

// The strict check itself: a misspelled field at any depth fails (kubernetes-models alone
// would take it).
const misspell = [
  ["Deployment", (d) => { d.spec.template.spec.containers[0].readinessProbe.httpGet.pathh = "/readyz"; }],
  ["Deployment", (d) => { d.spec.template.spec.containers[0].securityContext.runAsNonRot = true; }],
  ["NetworkPolicy", (d) => { d.spec.egress[0].too = []; }],
  ["Role", (d) => { d.rules[0].verb = ["get"]; }],
  ["SandboxTemplate", (d) => { d.spec.podTemplate.spec.containers[0].resource = {}; }],
  ["SandboxTemplate", (d) => { d.spec.networkPolicyManagment = "Unmanaged"; }],
  ["SandboxWarmPool", (d) => { d.spec.replica = 3; }],
];
for (const [kind, spoil] of misspell) {
  const orig = docs.find((d) => d.doc.kind === kind)?.doc;
  if (!orig) { check(`a ${kind} exists to spoil`, false); continue; }
  const bad = structuredClone(orig);
  spoil(bad);
  check(`a misspelled field in the ${kind} fails the check (${spoil.toString().match(/\.(\w+) =/)?.[1]})`, (await problemsOf(bad)).length > 0);
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
// The StatefulSet path (clusters without agent-sandbox): a bot given SANDBOX_URL must name
// exactly the StatefulSet's pods. The shipped bot is the agent-sandbox one and has none.
const urlVar = bot.spec.template.spec.containers[0].env.find((e) => e.name === "SANDBOX_URL");
if (urlVar) {
  const urls = urlVar.value.split(",");
  const pods = Array.from({ length: sts.spec.replicas }, (_, i) => `http://${sts.metadata.name}-${i}.${svc.metadata.name}:${port}`);
  check("the bot's SANDBOX_URL names exactly the StatefulSet's pods", JSON.stringify(urls) === JSON.stringify(pods),
    `${urls.join(",")} vs ${pods.join(",")}`);
}
check("the bot runs `switchboard slack`", bot.spec.template.spec.containers[0].command.includes("slack"));
// A rollout without a deaf window (docs/slack.md "Restarts without a deaf window"): the next pod
// ready beside the old one, on the same record, which a ReadWriteOnce volume allows on one node.
const botSpec = bot.spec.template.spec;
const ru = bot.spec.strategy.rollingUpdate ?? {};
check("one bot, rolled with the next pod ready before the old one ends (RollingUpdate, maxSurge 1, maxUnavailable 0)",
  bot.spec.replicas === 1 && bot.spec.strategy.type === "RollingUpdate" && ru.maxSurge === 1 && ru.maxUnavailable === 0,
  JSON.stringify(bot.spec.strategy));
check("the bot's readiness is /readyz (ready once connected to Slack: what the rollout waits for)",
  botSpec.containers[0].readinessProbe?.httpGet?.path === "/readyz");
const stateVol = botSpec.volumes.find((v) => v.name === "state");
const stateMount = botSpec.containers[0].volumeMounts.find((m) => m.name === "state");
const pvc = find("PersistentVolumeClaim", stateVol?.persistentVolumeClaim?.claimName);
check("both pods of a rollout share the record: the state volume is one claim, mounted at SWITCHBOARD_STATE_DIR",
  pvc && stateMount?.mountPath === botSpec.containers[0].env.find((e) => e.name === "SWITCHBOARD_STATE_DIR")?.value,
  stateVol ? JSON.stringify(stateVol) : "no state volume");
const affinity = botSpec.affinity?.podAffinity?.requiredDuringSchedulingIgnoredDuringExecution ?? [];
check("the claim is ReadWriteOnce and the next pod must land on the running one's node (podAffinity on its own labels, by hostname)",
  pvc?.spec.accessModes?.length === 1 && pvc.spec.accessModes[0] === "ReadWriteOnce" &&
  affinity.some((t) => t.topologyKey === "kubernetes.io/hostname" &&
    Object.entries(t.labelSelector?.matchLabels ?? {}).length > 0 &&
    Object.entries(t.labelSelector.matchLabels).every(([k, v]) => bot.spec.template.metadata.labels[k] === v)),
  JSON.stringify(affinity));

// Every container of every workload: probes, resources, a locked-down securityContext.
// docs/deploy.md "The wall in a container": podman's sb_walls_flags (deploy/sandbox/podman-env)
// but MKNOD, which gives no device node in the pod's own user namespace (hostUsers: false)
const WALLS_CAPS = ["CHOWN", "DAC_OVERRIDE", "SETUID", "SETGID", "KILL", "SYS_ADMIN", "SYS_PTRACE"];
const SECRETISH = /TOKEN|SECRET|KEY|PASSWORD/;
// agent-sandbox: the template, the warm pool, the NetworkPolicy, the bot's RBAC
const tmpl = docs.map((d) => d.doc).find((d) => d.kind === "SandboxTemplate");
const pool = docs.map((d) => d.doc).find((d) => d.kind === "SandboxWarmPool");
const netpol = find("NetworkPolicy", "switchboard-sandbox");
const sa = find("ServiceAccount", "switchboard-bot");
const role = find("Role", "switchboard-bot");
const binding = find("RoleBinding", "switchboard-bot");
check("the SandboxTemplate, SandboxWarmPool, NetworkPolicy, ServiceAccount, Role and RoleBinding exist",
  tmpl && pool && netpol && sa && role && binding);
const execution = readFileSync(path.join(here, "..", "..", "policies", "execution.lua"), "utf8");
const kubePolicy = execution.match(/^kubernetes = \{([^}]*)\}/m)?.[1] ?? "";
const policyPool = kubePolicy.match(/warm_pool = "([^"]+)"/)?.[1];
const policyPort = Number(kubePolicy.match(/port = (\d+)/)?.[1]);
check("the warm pool is the one policies/execution.lua names (kubernetes.warm_pool)", pool.metadata.name === policyPool,
  `${pool.metadata.name} vs ${policyPool}`);
check("the warm pool keeps pods of our template", pool.spec.sandboxTemplateRef.name === tmpl.metadata.name);
check("the warm pool keeps at least one pod ready", pool.spec.replicas >= 1);
const tpod = tmpl.spec.podTemplate.spec;
const tc = tpod.containers[0];
check("the template's pods run under a sandboxing runtime class (gVisor or Kata)",
  /^(gvisor|runsc|kata.*)$/.test(tpod.runtimeClassName ?? ""), String(tpod.runtimeClassName));
check("the template's sandboxd runs in pod mode (--pod), never --no-walls",
  tc.command.includes("--pod") && !tc.command.includes("--no-walls"));
check("the template's sandboxd listens on the port policies/execution.lua names (kubernetes.port)",
  tc.command.includes(`0.0.0.0:${policyPort}`) && tc.ports.some((p) => p.containerPort === policyPort), String(policyPort));
check("the template's pods carry no service-account token and no service links",
  tpod.automountServiceAccountToken === false && tpod.enableServiceLinks === false);
check("the template leaves the NetworkPolicy to ours (networkPolicyManagement Unmanaged)",
  tmpl.spec.networkPolicyManagement === "Unmanaged");
const podLabels = tmpl.spec.podTemplate.metadata.labels;
check("the NetworkPolicy selects the template's pods",
  Object.entries(netpol.spec.podSelector.matchLabels).every(([k, v]) => podLabels[k] === v));
check("the NetworkPolicy governs both directions", ["Ingress", "Egress"].every((t) => netpol.spec.policyTypes.includes(t)));
const botLabels = bot.spec.template.metadata.labels;
check("only the bot may reach the pods, on sandboxd's port", netpol.spec.ingress.length === 1 &&
  netpol.spec.ingress[0].from.every((f) => f.podSelector && !f.namespaceSelector && !f.ipBlock &&
    Object.entries(f.podSelector.matchLabels).every(([k, v]) => botLabels[k] === v)) &&
  netpol.spec.ingress[0].ports.every((p) => p.port === policyPort));
const PRIVATE = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"];
const egressBlocks = netpol.spec.egress.flatMap((r) => (r.to ?? []).filter((t) => t.ipBlock).map((t) => t.ipBlock));
check("egress to addresses reaches no private or link-local range (the cluster's pods, services, API server, metadata)",
  egressBlocks.length > 0 && egressBlocks.filter((b) => b.cidr === "0.0.0.0/0").every((b) => PRIVATE.every((p) => (b.except ?? []).includes(p))),
  JSON.stringify(egressBlocks));
check("every egress rule names its ports (no rule opens every port)", netpol.spec.egress.every((r) => (r.ports ?? []).length > 0));
check("the Role is namespaced and allows only sandboxclaims of agent-sandbox's extensions group and persistentvolumeclaims",
  role.kind === "Role" && role.rules.length === 2 &&
  JSON.stringify(role.rules[0].apiGroups) === JSON.stringify(["extensions.agents.x-k8s.io"]) &&
  JSON.stringify(role.rules[0].resources) === JSON.stringify(["sandboxclaims"]) &&
  JSON.stringify(role.rules[1].apiGroups) === JSON.stringify([""]) &&
  JSON.stringify(role.rules[1].resources) === JSON.stringify(["persistentvolumeclaims"]));
check("the Role's verbs are the executor's and no wildcard",
  role.rules[0].verbs.every((v) => ["create", "get", "list", "watch", "patch", "delete"].includes(v)) &&
  role.rules[1].verbs.every((v) => ["create", "get", "patch"].includes(v)),
  JSON.stringify(role.rules.map((r) => r.verbs)));
check("the RoleBinding gives that Role to the bot's service account",
  binding.roleRef.kind === "Role" && binding.roleRef.name === role.metadata.name &&
  binding.subjects.length === 1 && binding.subjects[0].kind === "ServiceAccount" && binding.subjects[0].name === sa.metadata.name);
check("the bot runs as that service account, with its token mounted",
  bot.spec.template.spec.serviceAccountName === sa.metadata.name && bot.spec.template.spec.automountServiceAccountToken === true);

const templateWorkload = { metadata: { name: tmpl.metadata.name }, spec: { template: { spec: tpod } } };
for (const w of [sts, bot, templateWorkload]) {
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
    const runAsUser = sc.runAsUser ?? pod.securityContext?.runAsUser;
    if (!walls) check(`${who}: runs as a user other than root`, sc.runAsNonRoot === true && runAsUser > 0);
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
check("the bot sends every command to the thread's pod (--backend kubernetes), never to its own",
  botC.command.join(" ").includes("--backend kubernetes"));
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

// Compares schemas/agent-sandbox-<version>.json (the fields of agent-sandbox's kinds we use,
// written from reading the upstream CRDs) with the CRDs upstream publishes at that tag
// (docs/deploy.md "Validating the manifests"). Needs the network, so CI never runs it: run it by
// hand when moving the pin.
//
//   node refresh-agent-sandbox-schema.mjs              # the pinned version (the schema file's)
//   node refresh-agent-sandbox-schema.mjs --tag v0.6.0 # would our fields still hold at v0.6.0?
//   node refresh-agent-sandbox-schema.mjs --from DIR   # a checkout of agent-sandbox at the tag
//
// For every property our schema names it checks that upstream has it at the same place with
// the same type, that our enums are upstream's (or a subset of them) and that every field
// upstream requires is required by ours too; it lists, without failing, what upstream has that
// we do not use. Exit 0 when they agree, 1 with the differences, 2 when the CRDs cannot be fetched.
import { readFileSync, readdirSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parse } from "yaml";

const here = path.dirname(fileURLToPath(import.meta.url));
const file = readdirSync(path.join(here, "schemas")).find((f) => f.startsWith("agent-sandbox-"));
const ours = JSON.parse(readFileSync(path.join(here, "schemas", file), "utf8"));
const tagArg = process.argv.indexOf("--tag");
const tag = tagArg > 0 ? process.argv[tagArg + 1] : ours.version;
const fromArg = process.argv.indexOf("--from");
const from = fromArg > 0 ? process.argv[fromArg + 1] : null;
const base = `https://raw.githubusercontent.com/kubernetes-sigs/agent-sandbox/${tag}/`;

const problems = [];
const unused = [];

function compare(mine, theirs, where) {
  if (mine["x-kubernetes-type"]) return; // a Kubernetes type: kubernetes-models checks it
  if (!theirs) { problems.push(`${where}: upstream has no such field`); return; }
  if (mine.type && theirs.type && mine.type !== theirs.type) {
    problems.push(`${where}: ours is ${mine.type}, upstream's ${theirs.type}`);
  }
  if (mine.enum) {
    const extra = mine.enum.filter((v) => !(theirs.enum ?? []).includes(v) && !["apiVersion", "kind"].some((k) => where.endsWith(k)));
    if (extra.length) problems.push(`${where}: ${extra.join(", ")} not in upstream's enum ${JSON.stringify(theirs.enum)}`);
  }
  for (const r of theirs.required ?? []) {
    if (!(mine.required ?? []).includes(r)) problems.push(`${where}: upstream requires ${r}, ours does not`);
  }
  const mp = mine.properties ?? {};
  const tp = theirs.properties ?? {};
  for (const [k, v] of Object.entries(mp)) compare(v, tp[k], `${where}.${k}`);
  for (const k of Object.keys(tp)) if (!(k in mp) && mine.additionalProperties === false) unused.push(`${where}.${k}`);
  if (mine.items && theirs.items) compare(mine.items, theirs.items, `${where}[]`);
  if (typeof mine.additionalProperties === "object" && typeof theirs.additionalProperties === "object") {
    compare(mine.additionalProperties, theirs.additionalProperties, `${where}{}`);
  }
}

for (const [kind, mine] of Object.entries(ours.kinds)) {
  let text;
  try {
    if (from) { text = readFileSync(path.join(from, mine.crd), "utf8"); } else {
    const res = await fetch(base + mine.crd);
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    text = await res.text(); }
  } catch (e) {
    console.error(`cannot fetch ${base + mine.crd}: ${e.message}`);
    process.exit(2);
  }
  const crd = parse(text);
  const version = crd.spec.versions.find((v) => v.name === "v1beta1");
  if (!version) { problems.push(`${kind}: upstream serves no v1beta1`); continue; }
  if (crd.spec.names.kind !== kind) problems.push(`${kind}: the CRD is for ${crd.spec.names.kind}`);
  compare(mine, version.schema.openAPIV3Schema, kind);
}
for (const u of unused) console.log(`unused upstream field (fine): ${u}`);
for (const p of problems) console.log(`DIFFERS: ${p}`);
const at = from ? `${tag} (CRDs read from ${from})` : tag;
console.log(problems.length ? `${problems.length} differences at ${at}` : `our schema agrees with agent-sandbox ${at}`);
process.exit(problems.length ? 1 : 0);

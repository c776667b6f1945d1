// The field check kubernetes-models leaves out (docs/deploy.md "Validating the manifests"): its
// validators take any field a type does not have, as the API server's non-strict decoding
// does, so a misspelled `readinessProbe` or `runAsNonRot` would pass silently. This walks a
// document alongside the types kubernetes-models declares for it (its .d.ts files: the
// interfaces generated from Kubernetes' OpenAPI definitions) and names every field that is not
// one of its type's, and the embedded types of our agent-sandbox schema (x-kubernetes-type).
//
//   import { unknownFields, checkSchema } from "./strict.mjs";
//   unknownFields("kubernetes-models/apps/v1/Deployment", doc) → ["spec.template.spec.foo", …]
//   checkSchema(schema, doc) → ["spec.replicas: …", …]  (our JSON-schema subset)
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const cache = new Map(); // .d.ts path → {fields: name → type text, imports: name → path}

const modules = path.join(path.dirname(fileURLToPath(import.meta.url)), "node_modules");

// A module specifier → its .d.ts: relative to the importing file, or inside the package (the
// packages' export maps name directories, so the path is made here, not resolved by Node).
function resolveDts(spec, from) {
  const bare = spec.replace(/\.js$/, "");
  if (bare.startsWith(".")) return path.resolve(path.dirname(from), bare + ".d.ts");
  return path.join(modules, bare + ".d.ts");
}

// The first interface of a .d.ts: its fields (type texts, nested braces kept) and its imports.
function parse(file) {
  if (cache.has(file)) return cache.get(file);
  const text = readFileSync(file, "utf8").replace(/\/\*\*[\s\S]*?\*\//g, "");
  const imports = {};
  for (const m of text.matchAll(/import \{ ([^}]+) \} from "([^"]+)";/g)) {
    for (const name of m[1].split(",").map((s) => s.trim())) imports[name] = resolveDts(m[2], file);
  }
  const start = text.search(/export interface \w+[^{]*\{/);
  const fields = {};
  if (start >= 0) {
    let i = text.indexOf("{", start) + 1;
    let depth = 1, buf = "";
    for (; i < text.length && depth > 0; i++) {
      const c = text[i];
      if (c === "{") depth++;
      if (c === "}") depth--;
      if (depth === 0) break;
      buf += c;
      if (c === ";" && depth === 1) {
        const m = buf.match(/^\s*"([^"]+)"\??:\s*([\s\S]*);\s*$/);
        if (m) fields[m[1]] = m[2].trim();
        buf = "";
      }
    }
  }
  const parsed = { fields, imports };
  cache.set(file, parsed);
  return parsed;
}

// The fields of value that its type (type text in a .d.ts) does not have.
function walk(typeText, value, where, owner, out) {
  if (value === null || typeof value !== "object") return;
  const arr = typeText.match(/^Array<(.+)>$/s);
  if (arr) {
    if (Array.isArray(value)) value.forEach((v, i) => walk(arr[1].trim(), v, `${where}[${i}]`, owner, out));
    return;
  }
  const map = typeText.match(/^\{\s*\[key: string\]:\s*([\s\S]+?);\s*\}$/);
  if (map) {
    for (const [k, v] of Object.entries(value)) walk(map[1].trim(), v, `${where}.${k}`, owner, out);
    return;
  }
  const file = owner.imports[typeText];
  if (!file) return; // a primitive, a union of literals, IntOrString, Quantity
  const t = parse(file);
  if (Object.keys(t.fields).length === 0) return; // an alias (Quantity, IntOrString, Time)
  for (const [k, v] of Object.entries(value)) {
    if (!(k in t.fields)) out.push(`${where ? where + "." : ""}${k}`);
    else walk(t.fields[k], v, `${where ? where + "." : ""}${k}`, t, out);
  }
}

// modulePath: a kubernetes-models module ("kubernetes-models/v1/Service",
// "@kubernetes-models/apimachinery/apis/meta/v1/ObjectMeta"). → the unknown fields' paths
export function unknownFields(modulePath, doc, where = "") {
  const file = resolveDts(modulePath, modules);
  const t = parse(file);
  const out = [];
  for (const [k, v] of Object.entries(doc)) {
    if (!(k in t.fields)) out.push(`${where ? where + "." : ""}${k}`);
    else walk(t.fields[k], v, `${where ? where + "." : ""}${k}`, t, out);
  }
  return out;
}

// The Kubernetes types our agent-sandbox schema embeds (x-kubernetes-type).
export const EMBEDDED = {
  ObjectMeta: "@kubernetes-models/apimachinery/apis/meta/v1/ObjectMeta",
  Condition: "@kubernetes-models/apimachinery/apis/meta/v1/Condition",
  PodSpec: "kubernetes-models/v1/PodSpec",
};

// Our JSON-schema subset (schemas/agent-sandbox-*.json): type, enum, required, properties,
// additionalProperties (false or a schema), items, minimum, maximum, format date-time, and
// x-kubernetes-type (kubernetes-models' validation and the field check above).
// → the problems, each "path: what"
export async function checkSchema(schema, value, where = "") {
  const out = [];
  const at = where || "(top)";
  const ktype = schema["x-kubernetes-type"];
  if (ktype) {
    const modulePath = EMBEDDED[ktype];
    const mod = await import(modulePath);
    const Cls = Object.values(mod).find((v) => typeof v === "function" && v.prototype?.validate);
    try { new Cls(value).validate(); } catch (e) { out.push(`${at}: ${e.message}`); }
    for (const f of unknownFields(modulePath, value, where)) out.push(`${f}: not a field of ${ktype}`);
    return out;
  }
  const type = Array.isArray(value) ? "array" : value === null ? "null" : typeof value === "number"
    ? (Number.isInteger(value) ? "integer" : "number") : typeof value;
  if (schema.type && !(schema.type === type || (schema.type === "number" && type === "integer"))) {
    out.push(`${at}: must be ${schema.type}, is ${type}`);
    return out;
  }
  if (schema.enum && !schema.enum.includes(value)) out.push(`${at}: must be one of ${schema.enum.join(", ")}, is ${JSON.stringify(value)}`);
  if (schema.minimum !== undefined && value < schema.minimum) out.push(`${at}: below ${schema.minimum}`);
  if (schema.maximum !== undefined && value > schema.maximum) out.push(`${at}: above ${schema.maximum}`);
  if (schema.format === "date-time" && !/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/.test(value)) {
    out.push(`${at}: not an RFC 3339 date-time`);
  }
  if (type === "object") {
    for (const r of schema.required ?? []) if (!(r in value)) out.push(`${at}: ${r} is required`);
    for (const [k, v] of Object.entries(value)) {
      const sub = schema.properties?.[k];
      const p = where ? `${where}.${k}` : k;
      if (sub) out.push(...await checkSchema(sub, v, p));
      else if (schema.additionalProperties === false) out.push(`${p}: not a field of this kind (agent-sandbox schema)`);
      else if (typeof schema.additionalProperties === "object") out.push(...await checkSchema(schema.additionalProperties, v, p));
    }
  }
  if (type === "array" && schema.items) {
    for (let i = 0; i < value.length; i++) out.push(...await checkSchema(schema.items, value[i], `${where}[${i}]`));
  }
  return out;
}

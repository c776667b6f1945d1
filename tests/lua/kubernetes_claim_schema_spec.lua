-- The objects the kubernetes executor posts, checked against agent-sandbox's schema at the pinned
-- version (deploy/kubernetes/schemas/agent-sandbox-v0.5.6.json: the fields we use, closed objects,
-- compared with the upstream CRDs' openAPIV3Schema by refresh-agent-sandbox-schema.mjs), and
-- the PersistentVolumeClaim it makes for a kept workspace against the names agent-sandbox gives
-- (controllers/sandbox_controller.go at v0.5.6: <template>-<sandbox>, NameHash = FNV-1a).
local cjson = require("cjson")
local kube = require("switchboard.exec.kubernetes")

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

local SCHEMA = cjson.decode(read("deploy/kubernetes/schemas/agent-sandbox-v0.5.6.json"))

-- The subset of OpenAPI v3 the schema file uses: type, enum, required, properties,
-- additionalProperties (false or a schema), items, format date-time, minimum, and
-- x-kubernetes-type (a Kubernetes type: an object here). → a list of problems.
local function check(schema, v, where, out)
  out = out or {}
  local function bad(msg) out[#out + 1] = where .. ": " .. msg end
  if schema["x-kubernetes-type"] then
    if type(v) ~= "table" then bad("not an object") end
    return out
  end
  local t = schema.type
  if t == "object" then
    if type(v) ~= "table" or (#v > 0) then bad("not an object"); return out end
    for _, r in ipairs(schema.required or {}) do
      if v[r] == nil then bad("required field " .. r .. " is missing") end
    end
    for k, sub in pairs(v) do
      local ps = schema.properties and schema.properties[k]
      if ps then
        check(ps, sub, where .. "." .. k, out)
      elseif schema.additionalProperties == false then
        bad("no field " .. k)
      elseif type(schema.additionalProperties) == "table" then
        check(schema.additionalProperties, sub, where .. "." .. k, out)
      end
    end
  elseif t == "array" then
    if type(v) ~= "table" or (next(v) ~= nil and #v == 0) then bad("not an array"); return out end
    for i, sub in ipairs(v) do check(schema.items, sub, ("%s[%d]"):format(where, i - 1), out) end
  elseif t == "string" then
    if type(v) ~= "string" then bad("not a string") return out end
    if schema.format == "date-time" and not v:match("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%dZ$") then bad("not a date-time") end
  elseif t == "integer" then
    if math.type(v) ~= "integer" then bad("not an integer") return out end
    if schema.minimum and v < schema.minimum then bad("below its minimum") end
  elseif t == "boolean" then
    if type(v) ~= "boolean" then bad("not a boolean") end
  end
  if schema.enum then
    local ok = false
    for _, e in ipairs(schema.enum) do ok = ok or e == v end
    if not ok then bad(("%s is not one of %s"):format(tostring(v), table.concat(schema.enum, ", "))) end
  end
  return out
end

local function executor(workspace)
  return kube.new{ api = {}, token = "t", policy = function() end, thread_key = "C123:1700000000.000100",
    agent = "coding", namespace = "switchboard", warm_pool = "switchboard", workspace = workspace }
end

describe("the objects the kubernetes executor posts", function()
  it("a claim that keeps the workspace fits the SandboxClaim schema: Retain and a volume named workspace", function()
    local ex = executor{ size = "5Gi", storage_class = "standard-rwo" }
    local body = kube.claim_body(ex, 1765000000000)
    assert.same({}, check(SCHEMA.kinds.SandboxClaim, body, "SandboxClaim"))
    assert.equal("Retain", body.spec.lifecycle.shutdownPolicy)
    local vct = body.spec.volumeClaimTemplates
    assert.equal(1, #vct)
    -- the name of the template's volume it replaces (agent-sandbox merges volumes by name)
    assert.equal(kube.VOLUME, vct[1].metadata.name)
    local tmpl = assert(read("deploy/kubernetes/sandbox-template.yaml"))
    assert.truthy(tmpl:find("%- { name: workspace, mountPath: /var/lib/sandboxd }"), "the template mounts no volume named workspace")
    assert.truthy(tmpl:find("volumeClaimTemplatesPolicy: Allowed", 1, true), "the template does not let claims bring volumes")
    assert.same({ "ReadWriteOnce" }, vct[1].spec.accessModes)
    assert.equal("5Gi", vct[1].spec.resources.requests.storage)
    assert.equal("standard-rwo", vct[1].spec.storageClassName)
  end)

  it("a claim that keeps none fits it too: Delete, no volume", function()
    local body = kube.claim_body(executor(nil), 1765000000000)
    assert.same({}, check(SCHEMA.kinds.SandboxClaim, body, "SandboxClaim"))
    assert.equal("Delete", body.spec.lifecycle.shutdownPolicy)
    assert.is_nil(body.spec.volumeClaimTemplates)
  end)

  it("the schema check itself refuses a misspelled field and a wrong enum", function()
    local body = kube.claim_body(executor{ size = "5Gi" }, 1765000000000)
    body.spec.volumeClaimTemplates[1].spec.acessModes = { "ReadWriteOnce" }
    body.spec.lifecycle.shutdownPolicy = "Keep"
    local problems = check(SCHEMA.kinds.SandboxClaim, body, "SandboxClaim")
    assert.equal(2, #problems, table.concat(problems, "; "))
  end)

  it("the volume it makes is the one agent-sandbox would: its name, its tracking label, the claim its owner", function()
    local ex = executor{ size = "5Gi" }
    -- agent-sandbox's NameHash is FNV-1a over the sandbox's name (known values of FNV-1a 32)
    assert.equal("811c9dc5", kube.name_hash(""))
    assert.equal("e40c292c", kube.name_hash("a"))
    assert.equal("bf9cf968", kube.name_hash("foobar"))
    local owner = { apiVersion = kube.API_VERSION, kind = "SandboxClaim", name = ex.name, uid = "u-1" }
    local pvc = kube.volume_body(ex, owner)
    assert.equal("workspace-" .. ex.name, pvc.metadata.name)
    assert.equal(kube.volume_name(ex.thread_key), pvc.metadata.name)
    assert.equal(kube.name_hash(ex.name), pvc.metadata.labels["agents.x-k8s.io/sandbox-name-hash"])
    assert.same({ owner }, pvc.metadata.ownerReferences)
    assert.is_nil(pvc.metadata.ownerReferences[1].controller) -- an owner, never the controller
    assert.same(kube.claim_body(ex, 0).spec.volumeClaimTemplates[1].spec, pvc.spec)
    assert.is_true(#pvc.metadata.name <= 253)
  end)
end)

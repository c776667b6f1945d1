-- The sandbox instance size (standard-4: 4 vCPU, 12 GiB, 20 GB) and the fleet ceiling
-- (max_instances 25) are named once, in deploy/instance.json (docs/deploy.md "The instance size and the fleet ceiling"); every other
-- place that must carry them — the Cloudflare config, the shipped policy — is checked against
-- it here (the Kubernetes manifests in deploy/kubernetes/check.mjs).
local cjson = require("cjson")
local policies = require("support.policies")

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

-- JSON with // and /* */ comments (JSONC), outside strings only.
local function jsonc(text)
  local out, i, n, in_str = {}, 1, #text, false
  while i <= n do
    local c, two = text:sub(i, i), text:sub(i, i + 1)
    if in_str then
      out[#out + 1] = c
      if c == "\\" then out[#out + 1] = text:sub(i + 1, i + 1); i = i + 1
      elseif c == '"' then in_str = false end
      i = i + 1
    elseif c == '"' then in_str = true; out[#out + 1] = c; i = i + 1
    elseif two == "//" then i = (text:find("\n", i, true) or n + 1)
    elseif two == "/*" then i = (select(2, text:find("*/", i + 2, true)) or n) + 1
    else out[#out + 1] = c; i = i + 1 end
  end
  return cjson.decode((table.concat(out):gsub(",(%s*[}%]])", "%1")))
end

local INSTANCE = cjson.decode(read("deploy/instance.json"))

describe("the sandbox instance size and fleet ceiling, named once", function()
  it("is standard-4 (4 vCPU, 12 GiB, 20 GB) with max_instances 25", function()
    assert.equal("standard-4", INSTANCE.instance_type)
    assert.equal(4, INSTANCE.vcpu)
    assert.equal(12, INSTANCE.memory_gib)
    assert.equal(20, INSTANCE.disk_gb)
    assert.equal(25, INSTANCE.max_instances)
  end)

  it("is what wrangler.jsonc deploys, in one wave, sleeping after 5 idle minutes", function()
    local cfg = jsonc(read("deploy/cloudflare/wrangler.jsonc"))
    local c = cfg.containers[1]
    assert.equal(1, #cfg.containers)
    assert.equal(INSTANCE.instance_type, c.instance_type)
    assert.equal(INSTANCE.max_instances, c.max_instances)
    assert.equal(100, c.rollout_step_percentage)
    assert.equal("SandboxContainer", c.class_name)
    assert.equal("SandboxContainer", cfg.durable_objects.bindings[1].class_name)
    assert.equal("5m", cfg.vars.SANDBOX_SLEEP_AFTER)
  end)

  it("is the shipped policy's max_instances and sleep_after", function()
    local snap = assert(policies.load(policies.SHIPPED))
    assert.equal(INSTANCE.max_instances, snap.timeouts.sandbox.max_instances)
    assert.equal("5m", snap.timeouts.sandbox.sleep_after)
  end)

  it("reads JSONC the way wrangler does (comments out, strings kept)", function()
    assert.same({ a = "x // not a comment", b = { 1 } }, jsonc('{ // c\n"a": "x // not a comment", /* c */ "b": [1,], }'))
  end)
end)

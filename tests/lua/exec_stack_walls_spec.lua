-- What exec/stack.lua and the factory make of policies/isolation.lua local_walls and an agent's
-- network for the local executor (docs/isolation.md "The local executor, and network per
-- agent"): the card's walls line, and the refusals that keep an agent's network promise. The
-- walled local run itself is in tests/e2e/walls_net_spec.lua (it needs root and the kernel's
-- namespaces).
local stack = require("switchboard.exec.stack")
local errors = require("switchboard.exec.errors")
local policies = require("support.policies")
local tmp = require("support.tmp")

local UNWALLED = "local executor: unwalled — commands run as this host's user (policies/isolation.lua local_walls)"

local function snap_with(isolation_extra)
  local dir = policies.dir{
    agents = function(src)
      return src .. [[
agents.offline = {
  description = "No network.", resources = { repository = true }, readonly = false,
  max_run_minutes = 10, tools = { "bash" }, network = "none",
}
]]
    end,
    isolation = isolation_extra and function(src) return src .. "\n" .. isolation_extra .. "\n" end or nil,
  }
  return assert(policies.load(dir))
end

describe("exec/stack: the local executor's walls line and network", function()
  local root
  before_each(function() root = tmp.dir("stackwalls") end)
  after_each(function() tmp.remove_all(); policies.cleanup() end)

  local function build(snap, agent, extra)
    -- the console's front (a person's own terminal): the shipped policy leaves it unwalled
    local opts = { policy = function() return snap end, workspace_root = root, force_backend = "local",
                   front = "console" }
    for k, v in pairs(extra or {}) do opts[k] = v end
    return stack.build(opts, { thread_key = "t1", agent = agent, snap = snap })
  end

  it("an unwalled local executor says so on the card; an agent without a workspace gets no line", function()
    local snap = snap_with()
    local built = assert(build(snap, "coding"))
    assert.equal("local", built.backend)
    assert.same({ UNWALLED }, built.notes)
    assert.is_nil(built.note)
    assert.same({}, assert(build(snap, "general")).notes)
  end)

  it("an agent with network none is refused on the unwalled local executor, in words", function()
    local built, err = build(snap_with(), "offline")
    assert.is_nil(built)
    assert.truthy(errors.is_tool(err))
    assert.equal('agent offline asks for network "none", but the local executor runs unwalled '
      .. "(policies/isolation.lua local_walls = false) and cannot take its commands off the network; "
      .. "set local_walls = true, or use the sandbox backend", err.message)
  end)

  it("local_walls = true where the walls cannot be built refuses to provision, never runs unwalled", function()
    local snap = snap_with("local_walls = true")
    local asked = 0
    local built, err = build(snap, "coding", { walls_host = function(s, r)
      asked = asked + 1
      assert.equal(snap, s)
      assert.equal(root, r)
      return nil, "bwrap is not installed (apt-get install bubblewrap)"
    end })
    assert.is_nil(built)
    assert.equal(1, asked)
    assert.truthy(errors.is_tool(err))
    assert.equal("policies/isolation.lua asks for walls around local threads (local_walls = true), "
      .. "but they cannot be built here: bwrap is not installed (apt-get install bubblewrap). Run where "
      .. "the kernel gives user namespaces, cgroups and bubblewrap, as root (docs/isolation.md), or point "
      .. "this front at a sandboxd (SANDBOX_URL, SANDBOX_TOKEN)", err.message)
  end)

  it("local_walls = true: the executor gets the host's walls and the agent's network, and the card says walled", function()
    local snap = snap_with("local_walls = true")
    local host = { fake = true }
    local ok_host = function() return host end
    local built = assert(build(snap, "offline", { walls_host = ok_host }))
    assert.same({ "local executor: walled, network none (policies/isolation.lua local_walls)" }, built.notes)
    local coding = assert(build(snap, "coding", { walls_host = ok_host }))
    assert.same({ "local executor: walled, network host (policies/isolation.lua local_walls)" }, coding.notes)
  end)

  it("network none is never dropped on the way: e2b refuses it, the resident is passed over for a fresh sandbox with a note", function()
    local snap = snap_with()
    local env = { E2B_API_KEY = "e2b-key", RESIDENT_URL = "http://127.0.0.1:9", RESIDENT_TOKEN = "rt",
      SANDBOX_URL = "http://127.0.0.1:9", SANDBOX_TOKEN = "st" }
    local getenv = function(name) return env[name] end
    local built, err = build(snap, "offline", { force_backend = "e2b", getenv = getenv })
    assert.is_nil(built)
    assert.truthy(errors.is_tool(err))
    assert.truthy(err.message:find('agent offline asks for network "none", but an e2b sandbox keeps its network', 1, true), err.message)
    local probes = 0
    built = assert(build(snap, "offline", { force_backend = "resident", getenv = getenv,
      resident_request = function() probes = probes + 1 end }), "resident fallback")
    assert.equal("sandbox", built.backend)
    assert.equal(0, probes)
    assert.same({ 'resident does not give network "none", which agent offline declares — using fresh sandbox' }, built.notes)
  end)
end)

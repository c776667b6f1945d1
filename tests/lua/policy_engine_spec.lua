-- The policy layer on the real engine: hashing, bounded calls and directory listing go
-- through switchboard.core (build/lua/switchboard/core.so).
local P = require("support.policies")
local loader = require("switchboard.policy.loader")
local sha256 = require("support.sha256")

local core = loader.core()

describe("policy layer on the engine", function()
  if not core then
    it("needs build/lua/switchboard/core.so", function()
      pending("switchboard.core is not built; set SB_BUILD_DIR to a build directory")
    end)
    return
  end

  after_each(P.cleanup)

  it("hashes with core.crypto.sha256 by default: the version is the sha256 of the files", function()
    local snap = assert(loader.load("policies"))
    local pure = assert(loader.load("policies", { hash = sha256.hash }))
    assert.equal(pure.version, snap.version)
  end)

  it("runs policy code through core.call_bounded", function()
    local real = core.call_bounded
    local budgets = {}
    core.call_bounded = function(budget, fn, ...)
      budgets[#budgets + 1] = budget
      return real(budget, fn, ...)
    end
    local ok, err = pcall(loader.load, "policies")
    core.call_bounded = real
    assert.is_true(ok, tostring(err))
    assert.equal(loader.limits.load_instructions, budgets[1].instructions)
    assert.equal(loader.limits.load_memory_bytes, budgets[1].memory_bytes)
    assert.equal(loader.policy_string, budgets[1].string)
    local hook_calls = 0
    for _, b in ipairs(budgets) do
      if b.instructions == loader.limits.hook_instructions then
        assert.equal(loader.limits.hook_memory_bytes, b.memory_bytes)
        hook_calls = hook_calls + 1
      end
    end
    assert.is_true(hook_calls > 0)
  end)

  it("a loop in a policy file is stopped by the engine's budget and named by file:line", function()
    local n = 0
    for _ in P.read("policies/timeouts.lua"):gmatch("\n") do n = n + 1 end
    local _, errs = loader.load(P.dir({ timeouts = function(s) return s .. "\nwhile true do end\n" end }))
    assert.truthy(P.has(errs, "/timeouts.lua:" .. (n + 2) .. ": instruction budget exhausted"), table.concat(errs or {}, "\n"))
  end)

  it("a file that is not a known policy is refused (the directory is listed through core.fs)", function()
    local dir = P.dir()
    P.write(dir .. "/timeout.lua", "bash = {}\n")
    local _, errs = loader.load(dir)
    assert.truthy(P.has(errs, "/timeout.lua:1: not a known policy file"))
  end)

  it("decide fails closed under the engine's budget", function()
    local policy = require("switchboard.policy")
    local logs = {}
    policy.reset()
    policy.configure { log = function(_, event, f) logs[#logs + 1] = { event = event, f = f } end }
    local snap = assert(policy.load_initial("policies"))
    local v, source = policy.decide(snap, "execution.choose_backend", function() while true do end end, { agent = "coding" })
    assert.equal("local", v)
    assert.equal("shipped", source)
    assert.equal("policy.hook_failed", logs[#logs].event)
    assert.matches("policy_engine_spec.lua:%d+: instruction budget exhausted$", logs[#logs].f.reason)
    policy.reset()
  end)
end)

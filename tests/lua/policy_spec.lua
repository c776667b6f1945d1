local P = require("support.policies")
local policy = require("switchboard.policy")
local loader = require("switchboard.policy.loader")

local function append(text)
  return function(src) return src .. "\n" .. text .. "\n" end
end

local logs
local function find_log(event)
  for _, l in ipairs(logs) do
    if l.event == event then return l end
  end
end

describe("policy (current snapshot, reload, decide)", function()
  before_each(function()
    logs = {}
    policy.reset()
    policy.configure {
      hash = P.hash,
      log = function(level, event, fields) logs[#logs + 1] = { level = level, event = event, fields = fields } end,
    }
  end)
  after_each(function()
    policy.reset()
    P.cleanup()
  end)

  it("finds the shipped directory beside the program", function()
    assert.matches("policies$", policy.shipped_dir())
    local snap = policy.shipped()
    assert.equal(P.shipped().version, snap.version)
  end)

  it("load_initial logs the version and the duration", function()
    local snap = assert(policy.load_initial(P.dir()))
    assert.equal(snap, policy.current())
    local l = assert(find_log("policy.loaded"))
    assert.equal(snap.version, l.fields.version)
    assert.is_number(l.fields.duration_ms)
  end)

  it("reload swaps the snapshot; work that captured the old one keeps it", function()
    local dir = P.dir()
    local old = assert(policy.load_initial(dir))
    local captured = policy.current()
    P.write(dir .. "/timeouts.lua", P.read(dir .. "/timeouts.lua") .. "\nbash.max_ms = 10 * minute\n")
    local new = assert(policy.reload())
    assert.not_equal(old.version, new.version)
    assert.equal(new, policy.current())
    assert.equal(10 * 60 * 1000, policy.current().timeouts.bash.max_ms)
    assert.equal(20 * 60 * 1000, captured.timeouts.bash.max_ms)
    local l = assert(find_log("policy.reloaded"))
    assert.equal(new.version, l.fields.version)
    assert.is_number(l.fields.duration_ms)
  end)

  it("a reload that fails changes nothing and logs file:line", function()
    local dir = P.dir()
    local old = assert(policy.load_initial(dir))
    for _, broken in ipairs({
      "bash.max_ms = = 1",                                                   -- syntax error
      'bash.max_ms = "long"',                                                -- wrong type
      "bash.max_ms = 0",                                                     -- out of range
    }) do
      logs = {}
      P.write(dir .. "/timeouts.lua", P.read("policies/timeouts.lua") .. "\n" .. broken .. "\n")
      local snap, errs = policy.reload()
      assert.is_nil(snap)
      assert.matches("^" .. dir:gsub("%p", "%%%0") .. "/timeouts%.lua:%d+: ", errs[1])
      assert.equal(old, policy.current())
      local l = assert(find_log("policy.reload_failed"))
      assert.equal(old.version, l.fields.kept)
      assert.truthy(find_log("policy.error").fields.message:find("/timeouts.lua:", 1, true))
    end
    -- a failing example
    P.write(dir .. "/timeouts.lua", P.read("policies/timeouts.lua"))
    P.write(dir .. "/errors.lua", (P.read("policies/errors.lua"):gsub('texts = { "Container is starting" }', 'texts = { "Container" }', 1)))
    local snap, errs = policy.reload()
    assert.is_nil(snap)
    assert.truthy(P.has(errs, "rule container_starting: example rejects["))
    assert.equal(old, policy.current())
  end)

  describe("decide", function()
    local snap
    before_each(function()
      snap = assert(policy.load_initial(P.dir({
        execution = append([[
backend.review = "sandbox"
function choose_backend(ctx, p)
  if ctx.repo == "acme/loop" then while true do end end
  if ctx.repo == "acme/raise" then error("broken on purpose") end
  if ctx.repo == "acme/range" then return "docker" end
  return p.backend[ctx.agent] or p.backend.default
end]]),
      })))
    end)

    it("answers through the policy function", function()
      local v, source = policy.decide(snap, "execution.choose_backend", nil, { agent = "review", repo = "acme/api" })
      assert.equal("sandbox", v)
      assert.equal("policy", source)
      assert.is_nil(find_log("policy.hook_failed"))
    end)

    for _, case in ipairs({
      { repo = "acme/loop", why = "instruction budget exhausted" },
      { repo = "acme/raise", why = "broken on purpose" },
      { repo = "acme/range", why = "returned \"docker\"" },
    }) do
      it("fails closed to the shipped function when the policy " .. case.repo:sub(6) .. "s, and names the hook", function()
        local v, source = policy.decide(snap, "execution.choose_backend", nil, { agent = "review", repo = case.repo })
        -- the shipped function over this snapshot's settings: review → sandbox, not "local"
        assert.equal("sandbox", v)
        assert.equal("shipped", source)
        local l = assert(find_log("policy.hook_failed"))
        assert.equal("warn", l.level)
        assert.equal("execution.choose_backend", l.fields.hook)
        assert.matches("/execution.lua:%d+", l.fields.at)
        assert.truthy(l.fields.reason:find(case.why, 1, true))
        assert.equal(snap.version, l.fields.version)
      end)
    end

    it("takes a function to decide with, and falls back to the snapshot's default when the shipped one fails too", function()
      local v, source = policy.decide(snap, "execution.choose_backend", function() return 42 end, { agent = "review" })
      assert.equal("sandbox", v)
      assert.equal("shipped", source)
      -- no ctx at all: the shipped function raises too, so the snapshot's backend.default answers
      v, source = policy.decide(snap, "execution.choose_backend", function() error("x") end, nil)
      assert.equal("local", v)
      assert.equal("fallback", source)
    end)

    it("agents.choose_agent answers with an agent name", function()
      assert.equal("coding", (policy.decide(snap, "agents.choose_agent", nil, { text = "fix the build" })))
      local v, source = policy.decide(snap, "agents.choose_agent", function() return "nobody" end, { text = "x" })
      assert.equal("coding", v)
      assert.equal("shipped", source)
    end)

    it("an unknown hook is a programmer error", function()
      assert.has_error(function() policy.decide(snap, "nope.nothing", nil, {}) end)
    end)

    it("the budget is set in one place", function()
      assert.equal(loader.limits.hook_instructions, policy.HOOK_BUDGET)
      local calls = {}
      policy.configure {
        hash = P.hash, log = function() end,
        bounded = function(budget, fn, ...) calls[#calls + 1] = budget; return loader.lua_bounded(budget, fn, ...) end,
      }
      policy.decide(snap, "execution.choose_backend", nil, { agent = "coding" })
      assert.same({ policy.HOOK_BUDGET }, calls)
    end)
  end)

  it("accessors", function()
    local snap = policy.shipped()
    assert.same({ "coding", "general", "review" }, policy.agent_names(snap))
    assert.equal("review", policy.agent(snap, "review").name)
    assert.is_nil(policy.agent(snap, "nobody"))
  end)
end)

-- A policy can exhaust neither memory nor the loop (on the real engine): the bytes a load or
-- a decision may allocate are capped by the engine's allocator, string building is bounded by
-- that cap, patterns by their worst case, and the real string library is out of reach through
-- the string metatable. A load fails with file:line; a decision falls back and names its hook.
local P = require("support.policies")
local loader = require("switchboard.policy.loader")

local core = loader.core()

local function line_count(name)
  local n = 0
  for _ in P.read("policies/" .. name .. ".lua"):gmatch("\n") do n = n + 1 end
  return n
end

-- timeouts.lua as shipped plus `code` starting on a line of its own; the errors and the line
-- the code starts on.
local function load_with(code)
  local start = line_count("timeouts") + 2
  local t0 = core.now_ms()
  local snap, errs = loader.load(P.dir({ timeouts = function(s) return s .. "\n" .. code .. "\n" end }))
  return snap, errs or {}, start, core.now_ms() - t0
end

-- The four ways the issue found past the instruction budget, each with the line that trips.
local ATTACKS = {
  { name = "the method form of string.rep", code = 'local s = ("x"):rep(1e9)', line = 0,
    says = "string.rep would build 1000000000 bytes" },
  { name = "doubling a string by concatenation", code = 'local s = "x"\nfor i = 1, 30 do s = s .. s end',
    line = 1, says = "memory budget of " .. loader.limits.load_memory_bytes .. " bytes exhausted" },
  { name = "a pathological pattern in find", code = 'local s = ("a"):rep(5000)\nlocal x = s:find(("a*"):rep(12) .. "b")',
    line = 1, says = "string.find: pattern" },
  { name = "a pathological pattern in match", code = 'local s = ("a"):rep(5000)\nlocal x = string.match(s, ".-.-.-.-.-.-b")',
    line = 1, says = "string.match: pattern" },
  { name = "a pathological pattern in gsub", code = 'local s = ("a"):rep(5000)\nlocal x = s:gsub("a-a-a-a-a-a-b", "")',
    line = 1, says = "string.gsub: pattern" },
  { name = "string.dump through a string value", code = 'local f = ("x").dump\nlocal b = f(function() end)',
    line = 1, says = "attempt to call a nil value (local 'f')" },
}

describe("policy bounds on the engine", function()
  if not core then
    it("needs build/lua/switchboard/core.so", function() pending("switchboard.core is not built") end)
    return
  end
  after_each(P.cleanup)

  for _, a in ipairs(ATTACKS) do
    it("refuses a file using " .. a.name .. " with file:line, at once", function()
      local snap, errs, start, ms = load_with(a.code)
      assert.is_nil(snap)
      local want = ("/timeouts.lua:%d: "):format(start + a.line)
      assert.truthy(P.has(errs, want, a.says), table.concat(errs, "\n"))
      -- bounded: an unbounded attack runs for minutes or for ever; 20 s leaves a loaded
      -- machine room (the instruction budget trips in well under a second on an idle one)
      assert.is_true(ms < 20000, ("the refusal took %.0f ms"):format(ms))
    end)
  end

  it("gives the string library back afterwards, and leaves allocation unbounded", function()
    load_with('local s = ("x"):rep(1e9)')
    assert.is_function(("x").dump)
    assert.equal(3 << 20, #("x"):rep(3 << 20)) -- over the policy's rep limit, fine outside
    local big = ("y"):rep(loader.limits.load_memory_bytes + 1)
    assert.equal(loader.limits.load_memory_bytes + 1, #big)
  end)

  it("lets ordinary string work through: small patterns, trailing repeats, plain finds", function()
    local snap, errs = load_with(table.concat({
      'local a = ("x"):rep(100) .. " tail"',
      'assert(a:find("x+ tail") == 1)',
      'assert(("  a  b "):gsub("%s+", " ") == " a b ")',
      'assert(string.match("key = value", "^(%w+)%s*=%s*(%w+)$") == "key")',
      'assert(("z"):rep(200000):find("zz", 1, true) == 1)',
      'for w in ("a b c"):gmatch("%a") do assert(#w == 1) end',
    }, "\n"))
    assert.truthy(snap, table.concat(errs, "\n"))
  end)

  it("does not let policy code replace the string library for others", function()
    local _, errs, start = load_with('string.find = function() return 1 end')
    assert.truthy(P.has(errs, ("/timeouts.lua:%d: "):format(start), "string.find cannot be assigned"),
      table.concat(errs, "\n"))
  end)

  describe("a decision", function()
    local policy = require("switchboard.policy")
    local logs, snap
    before_each(function()
      logs = {}
      policy.reset()
      policy.configure { log = function(_, event, f) logs[#logs + 1] = { event = event, f = f } end }
      snap = assert(policy.load_initial("policies"))
    end)
    after_each(function() policy.reset() end)

    local cases = {
      -- (no tail calls: a tail call leaves no caller line to name; the log's `at` still does)
      { "builds a huge string", function() local s = ("x"):rep(1e9) return s end, "string.rep would build" },
      { "doubles a string", function() local s = "x" for _ = 1, 30 do s = s .. s end return s end,
        "memory budget of " .. loader.limits.hook_memory_bytes .. " bytes exhausted" },
      { "matches a pathological pattern", function() local m = ("a"):rep(5000):match(".-.-.-.-b") return m end,
        "string.match: pattern" },
      { "reaches string.dump", function() return ("x").dump(function() end) end, "attempt to call a nil value" },
      -- issue 22 item 6: a plain find costs n·m, and allowed calls add up against the budget
      { "searches plainly for a long needle", function()
          local a = ("a"):rep(262144); local s = a .. a .. a .. a
          local x = s:find(a:sub(1, #a - 1) .. "b", 1, true) return x end,
        "string.find: a plain search for 262144 bytes in 1048576 bytes may take 2.75e+11 steps" },
      { "makes many affordable searches", function()
          local s = ("a"):rep(100000)
          for _ = 1, 100 do local x = s:find("aaaaaaab", 1, true) if x then return x end end
          return "local" end,
        "left of this budget" },
      -- (the table library's checks are in the policy files' environment, not these closures':
      -- tests/e2e/policy_bounds_spec.lua loads them from files)
    }
    for _, c in ipairs(cases) do
      it("that " .. c[1] .. " falls back and names the hook", function()
        local v, source = policy.decide(snap, "execution.choose_backend", c[2], { agent = "coding" })
        assert.equal("local", v)
        assert.equal("shipped", source)
        local last = logs[#logs]
        assert.equal("policy.hook_failed", last.event)
        assert.equal("execution.choose_backend", last.f.hook)
        assert.matches("policy_bounds_spec.lua:%d+: ", last.f.reason)
        assert.truthy(last.f.reason:find(c[3], 1, true), last.f.reason)
      end)
    end
  end)

  it("core.bounded_charge: charges a bounded call's budget, refuses past what is left, is free outside", function()
    assert.is_true(core.bounded_charge(1e12)) -- no bounded call running
    local seen
    local ok, err = core.call_bounded(1000, function()
      local a = { core.bounded_charge(600) }
      local b = { core.bounded_charge(600) }
      seen = { a, b }
      return core.bounded_charge(0 / 0)
    end)
    assert.is_true(ok)
    assert.is_false(err)                     -- NaN is refused
    assert.same({ true }, seen[1])
    assert.is_false(seen[2][1])
    assert.is_true(seen[2][2] <= 400 and seen[2][2] > 0, tostring(seen[2][2]))
    assert.is_false(seen[2][3])
  end)

  it("core.call_bounded: a time budget stops instructions that each do much C work", function()
    local a, b = ("q"):rep(4 << 20) .. "1", ("q"):rep(4 << 20) .. "2"
    local ok, err = core.call_bounded({ instructions = 1000000000, time_ms = 200 },
      load("local a, b = ...\nwhile true do local _ = a < b end", "@policies/slow.lua"), a, b)
    assert.is_false(ok)
    assert.matches("^policies/slow.lua:2: CPU time budget of 200 ms exhausted", err)
  end)

  it("core.call_bounded: the time budget counts CPU time, not time the thread spent off the CPU", function()
    -- a bounded call descheduled on a busy host spends wall time without CPU; blocking in a
    -- C call (which policy code cannot reach) is the way to make that certain here
    local ok, err = core.call_bounded({ instructions = 1000000000, time_ms = 200 }, function()
      os.execute("sleep 0.5")
      local n = 0
      for i = 1, 100000 do n = n + i end -- hook checks after the wait: a wall clock would trip
      return n
    end)
    assert.is_true(ok, err)
    assert.equal(5000050000, err)
  end)
end)

-- The cost of policy decisions and of a full policy reload (issue 3), each against a reference
-- measured in the same run. Not a test: it prints figures and whether they meet the goals.
--
--   lua5.4 bench/policy.lua [rounds] [calls per sample] [reloads]     (from the repository root)
--   SB_BUILD_DIR=build-asan … to measure another build (default ./build)
--
-- Decisions: every round takes one sample of each contender in turn (so background noise hits
-- them alike); a sample times `calls` back-to-back calls and counts their mean. The figure is
-- the median sample over the rounds. Reference: a call of an empty Lua function, timed the
-- same way (the loop and the call alone).
-- Reload: policy.reload() of the shipped directory, one reload per sample, median over
-- `reloads`; reference: reading the five files and hashing them (the I/O and the SHA-256 a
-- reload cannot avoid), timed the same way.
local build = os.getenv("SB_BUILD_DIR") or "./build"
package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
package.cpath = build .. "/lua/?.so;" .. package.cpath

local core = require("switchboard.core")
local policy = require("switchboard.policy")
-- the backends' and fronts' settings in the policy schema, as the binary loads them
require("switchboard.exec.backends")
require("switchboard.fronts.registry")
local loader = require("switchboard.policy.loader")
local budget = require("switchboard.shell.budget")
local classify = require("switchboard.shell.classify")

local ROUNDS = tonumber(arg[1]) or 201
local CALLS = tonumber(arg[2]) or 2000
local RELOADS = tonumber(arg[3]) or 201

local GOAL_DECISION_US, GOAL_RELOAD_MS = 5, 20

local function median(xs)
  local s = {}
  for i, x in ipairs(xs) do s[i] = x end
  table.sort(s)
  local n = #s
  if n % 2 == 1 then return s[(n + 1) // 2] end
  return (s[n // 2] + s[n // 2 + 1]) / 2
end

local function percentile(xs, p)
  local s = {}
  for i, x in ipairs(xs) do s[i] = x end
  table.sort(s)
  return s[math.max(1, math.ceil(#s * p))]
end

-- Quiet: a reload logs every time; the figures are the point here.
policy.configure{ log = function() end }
local dir = policy.shipped_dir()
local snap = assert(policy.load_initial(dir))

---------------------------------------------------------------------------------------------
-- Decisions, on the shipped snapshot, with inputs that take the long way through each function

local SINK -- keeps results alive so no call is optimised into nothing
local RECYCLED = "The sandbox container stopped while the operation was pending."
local MISS = "npm ERR! Test failed. See above for more details."
local BODY_INFRA = { stdout = "", stderr = "", exitCode = 127,
  error = "Session 'thread-1' shell exited (exit code: 137)" }
local BODY_RESULT = { stdout = "ok\n", stderr = "", exitCode = 0 }
local CTX_BACKEND = { agent = "coding", repo = "owner/name" }

local decisions = {
  { name = "reference: empty Lua function call", ref = true, fn = function() end, args = {} },
  { name = "budget.clamp (a request over the ceiling)", fn = budget.clamp, args = { snap, 90 * 60 * 1000 } },
  { name = "budget.clamp (NaN: the default)", fn = budget.clamp, args = { snap, 0 / 0 } },
  { name = "classify.is_fleet_busy (no rule text matches)", fn = classify.is_fleet_busy, args = { snap, MISS } },
  { name = "classify.recycled_mid_command_message (late recycle, reworded)",
    fn = classify.recycled_mid_command_message, args = { snap, 95000, RECYCLED } },
  { name = "classify.exec_answer (an ordinary result)", fn = classify.exec_answer, args = { snap, BODY_RESULT, 1200 } },
  { name = "classify.exec_answer (in-body infra error, every rule tried)",
    fn = classify.exec_answer, args = { snap, BODY_INFRA, 95000 } },
  { name = "policy.decide execution.choose_backend (bounded, validated)",
    fn = policy.decide, args = { snap, "execution.choose_backend", nil, CTX_BACKEND } },
}

-- Sanity: each contender answers what it should before it is timed.
assert(budget.clamp(snap, 90 * 60 * 1000) == snap.timeouts.bash.max_ms)
assert(budget.clamp(snap, 0 / 0) == snap.timeouts.bash.default_ms)
assert(not classify.is_fleet_busy(snap, MISS))
assert(classify.recycled_mid_command_message(snap, 95000, RECYCLED) ~= RECYCLED)
assert(classify.exec_answer(snap, BODY_RESULT, 1200).verdict == "result")
assert(classify.exec_answer(snap, BODY_INFRA, 95000).verdict == "infra")
assert(select(2, policy.decide(snap, "execution.choose_backend", nil, CTX_BACKEND)) == "policy")

local function sample(d)
  local fn, a1, a2, a3, a4 = d.fn, d.args[1], d.args[2], d.args[3], d.args[4]
  local t0 = core.now_ms()
  for _ = 1, CALLS do SINK = fn(a1, a2, a3, a4) end
  return (core.now_ms() - t0) * 1000 / CALLS -- µs per call
end

for _, d in ipairs(decisions) do d.samples = {}; sample(d) end -- warm up
for _ = 1, ROUNDS do
  for _, d in ipairs(decisions) do d.samples[#d.samples + 1] = sample(d) end
end

---------------------------------------------------------------------------------------------
-- Reload

local function read_and_hash()
  local parts = {}
  for _, name in ipairs(loader.FILES) do
    local f = assert(io.open(dir .. "/" .. name .. ".lua", "rb"))
    local src = f:read("a")
    f:close()
    parts[#parts + 1] = string.format("%s.lua\0%d\0%s", name, #src, src)
  end
  return core.crypto.hex(core.crypto.sha256(table.concat(parts)))
end

local reload = { samples = {} }
local reference = { samples = {} }
assert(policy.reload(dir))
for _ = 1, RELOADS do
  local t0 = core.now_ms()
  local ok = policy.reload(dir)
  reload.samples[#reload.samples + 1] = core.now_ms() - t0
  assert(ok, "the shipped policies did not reload")
  t0 = core.now_ms()
  SINK = read_and_hash()
  reference.samples[#reference.samples + 1] = core.now_ms() - t0
end
assert(policy.current().version == snap.version)

---------------------------------------------------------------------------------------------
-- Figures

local ref_us = median(decisions[1].samples)
print(("policy decisions on the shipped set: median of %d samples of %d calls each (%s, %s)")
  :format(ROUNDS, CALLS, _VERSION, build))
print(("  %-64s %9s %9s %9s  goal ≤ %d µs"):format("", "median", "p90", "× ref", GOAL_DECISION_US))
local worst = 0
for _, d in ipairs(decisions) do
  local m = median(d.samples)
  if not d.ref then worst = math.max(worst, m) end
  print(("  %-64s %7.3f µs %6.3f µs %8.1f×  %s"):format(d.name, m, percentile(d.samples, 0.9), m / ref_us,
    d.ref and "" or (m <= GOAL_DECISION_US and "ok" or "OVER")))
end
local rm, fm = median(reload.samples), median(reference.samples)
print(("policy reload of %s: median of %d"):format(dir, RELOADS))
print(("  %-64s %7.3f ms %6.3f ms %8.1f×  %s"):format("policy.reload (load, validate, examples, hooks, swap)", rm,
  percentile(reload.samples, 0.9), rm / fm, rm <= GOAL_RELOAD_MS and "ok" or "OVER"))
print(("  %-64s %7.3f ms %6.3f ms %8.1f×"):format("reference: read the 5 files + SHA-256 (the version)", fm,
  percentile(reference.samples, 0.9), 1.0))
print(("goals: every decision ≤ %d µs (slowest %.3f µs): %s; reload ≤ %d ms (%.3f ms): %s"):format(
  GOAL_DECISION_US, worst, worst <= GOAL_DECISION_US and "met" or "MISSED",
  GOAL_RELOAD_MS, rm, rm <= GOAL_RELOAD_MS and "met" or "MISSED"))

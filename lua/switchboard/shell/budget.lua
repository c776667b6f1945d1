-- Command budgets (docs/contract.md#timeouts, #capacity) from a policy snapshot's timeouts, shared by the
-- executors (the bot-side deadlines) and sandboxd (the server-side clamp).
-- Every function takes the snapshot the work captured as its first argument. Units: ms.

local schema = require("switchboard.policy.schema")
local template = require("switchboard.policy.template")

local M = {}

local function seconds(ms) return math.floor(ms / 1000 + 0.5) end

local function finite(x)
  return type(x) == "number" and x == x and x ~= math.huge and x ~= -math.huge
end

local function clamp_with(bash, requested, default_ms)
  if not finite(requested) then return default_ms end
  if requested >= bash.max_ms then return bash.max_ms end
  if requested <= bash.floor_ms then return bash.floor_ms end
  local n = requested >= 0 and math.floor(requested) or math.ceil(requested)
  return math.tointeger(n) or n
end

-- The clamp rule: a finite number is truncated and clamped into [floor, max]; absent, NaN,
-- infinite or not a number → the default.
function M.clamp(snap, requested)
  local bash = snap.timeouts.bash
  return clamp_with(bash, requested, bash.default_ms)
end

-- The same rule on a server, whose default is the sandbox's own (280 s).
function M.server_budget(snap, requested)
  local t = snap.timeouts
  return clamp_with(t.bash, requested, t.sandbox.default_budget_ms)
end

-- Cap a command's budget by the run's remaining wall clock (docs/contract.md#timeout-run-clip).
--   requested:    the caller's timeoutMs (nil when it asked for none)
--   remaining_ms: the run's wall clock left (nil: no run bound)
-- Returns {timeout_ms = <clamped ms or nil>, budget_ms = <ms>, clip_line = <line or nil>}: with
-- plenty of run left a request passes through clamped and no request stays no request
-- (timeout_ms, what a wire carries); budget_ms is the command's budget either way — the one
-- clamp of the command: the deadlines and waits below take it as it is. Otherwise the budget
-- (the request, or the default the executor would apply) is cut to remaining − reserve with a
-- "[timeout clipped to …]" line. Inside the reserve: nil, the refusal's text (the executor
-- answers it as a refused command, exit 124).
function M.within_run(snap, requested, remaining_ms)
  local t = snap.timeouts
  local asked = requested ~= nil
  local budget = M.clamp(snap, requested)
  local out = { timeout_ms = asked and budget or nil, budget_ms = budget }
  if remaining_ms == nil then return out end
  local reserve = t.run.reserve_ms
  local cap = remaining_ms - reserve
  if cap < t.bash.floor_ms then
    local text = template.fill(snap.errors.messages.run_exhausted, {
      remaining_s = math.max(0, seconds(remaining_ms)), reserve_s = seconds(reserve),
    })
    return nil, text
  end
  if budget <= cap then return out end
  cap = math.tointeger(math.floor(cap)) or math.floor(cap)
  out.timeout_ms, out.budget_ms = cap, cap
  out.clip_line = template.fill(snap.errors.messages.clipped, {
    seconds = seconds(cap), remaining_s = seconds(remaining_ms), reserve_s = seconds(reserve),
  })
  return out
end

-- The bot-side deadline of one remote send: the command's budget (within_run's budget_ms,
-- clamped already) + the call margin.
function M.send_deadline(snap, budget_ms)
  return budget_ms + snap.timeouts.call.margin_ms
end

-- A file op's send deadline: the file-op budget + the call margin.
function M.file_op_deadline(snap)
  return snap.timeouts.file_op.budget_ms + snap.timeouts.call.margin_ms
end

-- The ExecInfraError text for a send that got no answer in time, naming both numbers.
-- who: "sandbox worker" | "resident worker"; route: "/exec" | "/read" | "/write".
function M.no_answer_message(snap, who, route, budget_ms)
  local margin = snap.timeouts.call.margin_ms
  return template.fill(snap.errors.messages.no_answer, {
    who = who, route = route, total_s = seconds(budget_ms + margin),
    budget_s = seconds(budget_ms), margin_s = seconds(margin),
  })
end

-- The fleet-busy waits before each re-send: waits_ms, then every_ms repeatedly, until the
-- total reaches min(the command's budget, max_wait_ms); the last wait is cut so the total
-- lands on that limit exactly. budget_ms: the command's (within_run's budget_ms, clamped
-- already; a file op passes timeouts.file_op.budget_ms).
function M.fleet_busy_waits(snap, budget_ms)
  local f = snap.timeouts.fleet_busy
  local limit = math.min(budget_ms, f.max_wait_ms)
  local waits, total, i = {}, 0, 1
  while total < limit do
    local d = f.waits_ms[i] or f.every_ms
    if total + d > limit then d = limit - total end
    waits[#waits + 1] = d
    total = total + d
    i = i + 1
  end
  return waits, total
end

-- sleepAfter's grammar: <n>s, <n>m or <n>h with n > 0 → ms; anything else → nil, why.
M.parse_sleep_after = schema.parse_sleep_after

return M

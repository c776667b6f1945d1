-- What a run costs and the caps an operator sets on it (policies/agents.lua: models[…].price,
-- spend). Totals that outlive a run — per thread, per Slack workspace per UTC day — live in
-- an accounts object; the shared one here is in memory, kept by this module (not by the
-- policy snapshot), so it survives `kill -HUP` but not a restart. The thread record (a
-- SQLite store) makes them durable by handing the run its own accounts with the same three
-- methods:
--
--   accounts:spent(kind, key) → US dollars so far       kind: "thread" | "day"
--   accounts:add(kind, key, usd)
--
--   spend.cost(price, usage)       → US dollars for one answer's usage
--   spend.workspace_of(thread)     → the Slack workspace of a thread name (team/channel/ts),
--                                    "console" for a thread of the console
--   spend.day_key(workspace, t)    → "WORKSPACE@YYYY-MM-DD" (UTC) for os.time() t
--   spend.check(snap, o, run_usd)  → nil, or the sentence that ends the run at a cap
local M = {}

local Accounts = {}
Accounts.__index = Accounts

function M.new_accounts()
  return setmetatable({ totals = { thread = {}, day = {} } }, Accounts)
end

function Accounts:spent(kind, key) return self.totals[kind][key] or 0 end

function Accounts:add(kind, key, usd)
  self.totals[kind][key] = (self.totals[kind][key] or 0) + usd
end

M.shared = M.new_accounts()

local PER = 1000000

-- usage: {input_tokens (fresh), output_tokens, cache_read_input_tokens, cache_creation_input_tokens}
function M.cost(price, usage)
  return ((usage.input_tokens or 0) * price.input + (usage.output_tokens or 0) * price.output
    + (usage.cache_read_input_tokens or 0) * price.cache_read
    + (usage.cache_creation_input_tokens or 0) * price.cache_write) / PER
end

function M.workspace_of(thread)
  return tostring(thread or ""):match("^([%w]+)/[%w]+/") or "console"
end

function M.day_key(workspace, t)
  return workspace .. "@" .. os.date("!%Y-%m-%d", t)
end

function M.usd(x) return ("$%.2f"):format(x) end

-- The caps in the order a sentence names them; o: thread, accounts, now_s.
function M.check(snap, o, run_usd)
  local caps = snap.agents.spend
  local ws = M.workspace_of(o.thread)
  local checks = {
    { caps.per_run_usd, run_usd, "per run", "spend.per_run_usd", "this run has spent %s", "raise the cap, or ask again in this thread to go on in a new run" },
    { caps.per_thread_usd, o.accounts:spent("thread", o.thread or ""), "per thread", "spend.per_thread_usd",
      "this thread has spent %s", "raise the cap, or start a new thread" },
    { caps.per_day_usd, o.accounts:spent("day", M.day_key(ws, o.now_s())), "per day for workspace " .. ws,
      "spend.per_day_usd", "workspace " .. ws .. " has spent %s today (UTC)",
      "raise the cap, or ask again after midnight UTC" },
  }
  for _, c in ipairs(checks) do
    local cap, spent = c[1], c[2]
    if cap ~= nil and spent >= cap then
      return ("the spend cap of %s %s is reached (%s in policies/agents.lua): %s, so the run "
        .. "stopped before its next model request with what it had done; %s."):format(
        M.usd(cap), c[3], c[4], c[5]:format(M.usd(spent)), c[6])
    end
  end
  return nil
end

-- Books one answer's cost on the thread and on its workspace's day.
function M.book(o, usd)
  o.accounts:add("thread", o.thread or "", usd)
  o.accounts:add("day", M.day_key(M.workspace_of(o.thread), o.now_s()), usd)
end

return M

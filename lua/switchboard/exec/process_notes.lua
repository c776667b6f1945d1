-- The card's lines about the background processes a thread's executor started (docs/agent.md
-- "Background processes"; sandboxd's /processes). The bot learns what became of them when it
-- asks: at each ask's end (exec/stack.lua take_notes) the thread's processes are listed once
-- (GET /processes, which wakes nothing) and the card says, once each, which still run and
-- which ended since — when the thread's sandbox slept (or was released), at the awake limit,
-- or by their own exit. One killed by process_kill is not said again: its call is on the card.
--
--   process_notes.started(holder, record)   a process this executor started ({id, command})
--   process_notes.take(holder, list, gone?) → lines   list(): the thread's process records | nil,
--     err; gone: what is said of a process no record names (default: its sandbox was replaced)
local M = {}

local function short(command)
  local line = tostring(command or ""):match("^%s*([^\n]*)") or ""
  if #line > 60 then line = line:sub(1, 57) .. "…" end
  return line
end

function M.started(holder, record)
  holder.background = holder.background or {}
  holder.background[record.id] = { command = record.command, said_running = false }
end

local ENDED = {
  ["instance-slept"] = "ended when the thread's sandbox slept",
  ["awake-limit"] = "ended at the awake limit (sandbox.process_awake_ms)",
}

function M.take(holder, list, gone)
  if not holder.background or next(holder.background) == nil then return {} end
  local records = list()
  if type(records) ~= "table" then return {} end -- sandboxd unreachable: said at the next ask
  local lines, ids = {}, {}
  for id in pairs(holder.background) do ids[#ids + 1] = id end
  table.sort(ids)
  local by_id = {}
  for _, r in ipairs(records) do if type(r) == "table" then by_id[r.id] = r end end
  for _, id in ipairs(ids) do
    local mine, r = holder.background[id], by_id[id]
    local what = ("`%s` (%s)"):format(short(mine.command), id)
    if r and r.status == "running" then
      if not mine.said_running then
        mine.said_running = true
        lines[#lines + 1] = "▶ running in the background: " .. what .. " — it ends when the thread's sandbox sleeps"
      end
    else
      holder.background[id] = nil
      if r and r.status == "exited" then
        lines[#lines + 1] = ("⏹ background process %s exited (code %s)"):format(what, tostring(r.exitCode))
      elseif r and ENDED[r.reason] then
        lines[#lines + 1] = ("⏹ background process %s %s"):format(what, ENDED[r.reason])
      elseif not r then
        lines[#lines + 1] = ("⏹ background process %s %s"):format(what, gone or "is gone (the thread's sandbox was replaced)")
      end
    end
  end
  return lines
end

return M

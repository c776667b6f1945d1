-- Overlapping restarts of `switchboard slack` (docs/slack.md "Restarts without a deaf window"),
-- for tests/e2e/slack_restart_spec.lua and bench/slack_restart_bench.lua: mentions are sent
-- the way Slack sends them (the stand-in's /_control/event: each on one of the app's open
-- connections in turn, sent again while nobody acks it) while the bot is restarted — the next
-- process started on the same state directory and connected before the old one gets TERM,
-- with a burst of mentions sent just as the TERM goes. Each mention is its own thread, running
-- `echo mention-N`; a mention ran once when its thread has exactly one card.
--
--   local r = restarts.run{mentions = 100, restarts = 3, burst = 8, every_ms = 50, state_dir = dir,
--                          lose_every = 7}   -- every 7th ack lost on its way: Slack sends the event
--                                            -- again, maybe to the other process
--   r = {mentions, restarts, lost = {i…}, twice = {i…}, runs = {[i] = n}, redelivered, given_up,
--        acks_lost, duplicates (slack.duplicate_event lines),
--        exits = {status…}, logs = {stderr…}, error = why it could not finish | nil}
local core = require("switchboard.core")
local cjson = require("cjson")
local SL = require("support.slack")
local P = require("support.policies")

local M = {}

local function ts_of(i) return ("1700%06d.000100"):format(i) end

function M.run(o)
  local st = SL.standin()
  local pol = P.dir{ slack = function(src) return src .. "\ndrain_ms = 20 * second\nflush_ms = 5 * second\n" end }
  local bots = {}
  local function start()
    local b = SL.bot(st, { state_dir = o.state_dir, policies = pol })
    bots[#bots + 1] = b
    core.go(function() b:wait() end)
    return b
  end
  if o.lose_every then
    assert(st:control("delivery", { lose_every = o.lose_every }) == 200)
  end
  local sent = 0
  local function send()
    sent = sent + 1
    st:event("events_api", SL.mention{ ts = ts_of(sent), text = ("run `echo mention-%d`"):format(sent),
                                       event_id = "EvRestart" .. sent })
  end
  local ok, err = pcall(function()
    local current = start()
    for k = 0, o.restarts do
      local upto = math.floor((k + 1) * o.mentions / (o.restarts + 1))
      if k < o.restarts then upto = upto - (o.burst or 0) end
      while sent < upto do
        send()
        core.sleep(o.every_ms or 50)
      end
      if k < o.restarts then
        local next_bot = start() -- connected (slack.ready) before the old one is told to stop
        -- a burst around the TERM: some reach the old process before it stops reading (it acked
        -- them: it runs them), some after (not acked: Slack sends them again)
        local burst = o.burst or 0
        for _ = 1, burst // 2 do send() end
        current:signal("TERM")
        for _ = burst // 2 + 1, burst do send() end
        current = next_bot
      end
    end
    -- every mention acked by someone (or given up by Slack), every thread's card final
    SL.wait(function()
      local s = st:state()
      for _, d in pairs(s.deliveries) do
        if d.acked_conn == cjson.null and not d.lost then return false end
      end
      local finals = {}
      for _, m in pairs(s.messages) do
        if m.blocks ~= cjson.null and m.blocks ~= nil and SL.is_final(m) then finals[m.thread_ts] = true end
      end
      for i = 1, sent do
        if not finals[ts_of(i)] and not s.deliveries["D" .. i].lost then return false end
      end
      return true
    end, "every mention acked and its card final", 180000)
    current:signal("TERM")
    SL.wait(function()
      for _, b in ipairs(bots) do if not b.result then return false end end
      return true
    end, "every bot to exit", 60000)
  end)
  local s = st:state()
  local r = { mentions = sent, restarts = o.restarts, lost = {}, twice = {}, runs = {}, redelivered = 0,
              given_up = 0, exits = {}, logs = {} }
  local cards = {}
  for _, m in pairs(s.messages) do
    if m.blocks ~= cjson.null and m.blocks ~= nil then cards[m.thread_ts] = (cards[m.thread_ts] or 0) + 1 end
  end
  r.acks_lost = s.acks_lost or 0
  for _, d in pairs(s.deliveries) do
    if #d.envelopes > 1 then r.redelivered = r.redelivered + 1 end
    if d.lost then r.given_up = r.given_up + 1 end
  end
  for _, b in ipairs(bots) do
    if not b.result then
      b:signal("KILL")
      SL.wait(function() return b.result end, "a killed bot")
    end
    r.exits[#r.exits + 1] = b.result.exit
    r.logs[#r.logs + 1] = b.err
  end
  local all = table.concat(r.logs, "\n")
  for i = 1, sent do r.runs[i] = 0 end
  r.duplicates = select(2, all:gsub(" slack%.duplicate_event ", ""))
  for line in all:gmatch("[^\n]+") do
    local i = line:find(" slack.ask ", 1, true) and tonumber(line:match("event_id=EvRestart(%d+) "))
    if i then r.runs[i] = r.runs[i] + 1 end
  end
  for i = 1, sent do
    local n = cards[ts_of(i)] or 0
    if n == 0 then r.lost[#r.lost + 1] = i end
    if n > 1 then r.twice[#r.twice + 1] = i end
  end
  st:close()
  P.cleanup()
  if not ok then r.error = tostring(err) end
  return r
end

return M

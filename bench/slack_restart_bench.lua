-- Restarts without a deaf window (issue 38): `switchboard slack` restarted three times while 100
-- mentions arrive the way Slack sends them — each on one of the app's open Socket Mode
-- connections in turn, sent again while nobody acks it (the stand-in's /_control/event) — each
-- new process started on the same state directory and connected before the old one gets
-- TERM, with a burst of mentions around each TERM and every 7th ack lost on its way (Slack sends
-- that event again, maybe to the other process) (tests/support/restarts.lua; the spec
-- tests/e2e/slack_restart_spec.lua runs 40). Counted from the stand-in's side: a mention lost
-- has no card in its thread, one run twice has two; a mention's asks are also counted in every
-- process's log.
--
-- Usage (repository root, after a build): lua5.4 bench/slack_restart_bench.lua [mentions=100] [restarts=3] [burst=8]
package.path = "./lua/?.lua;./lua/?/init.lua;./tests/lua/?.lua;./tests/?.lua;" .. package.path
package.cpath = (os.getenv("SB_BUILD_DIR") or "build") .. "/lua/?.so;" .. package.cpath
if not os.getenv("SWITCHBOARD_BIN") then
  require("switchboard.core") -- support.bin reads it at load
end
local core = require("switchboard.core")
local cjson = require("cjson")
local restarts = require("support.restarts")

local N = tonumber(arg[1]) or 100
local R = tonumber(arg[2]) or 3
local BURST = tonumber(arg[3]) or 8

local res = core.run(function()
  local dir = os.tmpname()
  os.remove(dir)
  local t0 = core.now_ms()
  local r = restarts.run{ mentions = N, restarts = R, burst = BURST, every_ms = 40, lose_every = 7, state_dir = dir }
  os.execute("rm -rf '" .. dir .. "'")
  local twice_by_log = 0
  for _, n in ipairs(r.runs) do if n > 1 then twice_by_log = twice_by_log + 1 end end
  return { mentions = r.mentions, restarts = r.restarts, lost = #r.lost, run_twice = #r.twice,
           asked_twice_in_logs = twice_by_log, sent_again_by_slack = r.redelivered,
           given_up_by_slack = r.given_up, acks_lost = r.acks_lost, found_seen = r.duplicates, exits = r.exits, seconds = (core.now_ms() - t0) / 1000,
           error = r.error }
end)
print(cjson.encode(res))
print(("%d mentions across %d restarts: %d lost, %d run twice (%d acks lost, %d sent again by Slack, %d found seen, %d given up) — goal 0 and 0: %s")
  :format(res.mentions, res.restarts, res.lost, res.run_twice, res.acks_lost, res.sent_again_by_slack, res.found_seen, res.given_up_by_slack,
          (res.lost == 0 and res.run_twice == 0 and res.asked_twice_in_logs == 0 and not res.error) and "met" or "NOT met"))

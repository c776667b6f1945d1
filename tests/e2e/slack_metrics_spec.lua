-- The Slack bot's GET /metrics on --metrics-listen, parsed by Debian's python3-prometheus-client:
-- a command run from a mention counts by outcome, a reload counts.
local core = require("switchboard.core")
local cjson = require("cjson")
local async = require("support.async")
local tmp = require("support.tmp")
local SL = require("support.slack")

local PARSER = [[
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = {}
for f in text_string_to_metric_families(sys.stdin.read()):
    for s in f.samples:
        out[s.name + json.dumps(s.labels, sort_keys=True)] = s.value
print(json.dumps(out))
]]

local function scrape(port)
  local status, _, body = core.http.request{ url = ("http://127.0.0.1:%d/metrics"):format(port), deadline_ms = 10000 }
  assert.equals(200, status)
  local r = assert(core.spawn{ argv = { "/usr/bin/python3", "-c", PARSER }, stdin = body,
    env = { PATH = "/usr/bin:/bin" } }):wait()
  assert.equals(0, r.exit, r.stderr .. "\n" .. body)
  return cjson.decode(r.stdout)
end

describe("switchboard slack --metrics-listen", function()
  it("serves the Prometheus text format; commands and reloads count", async(function()
    local st = SL.standin()
    local bot = SL.bot(st, { state_dir = tmp.dir("slack"), args = { "--metrics-listen", "127.0.0.1:0" } })
    assert.is_number(bot.metrics_port, bot.err)
    local before = scrape(bot.metrics_port)
    assert.equals(0, before['switchboard_commands_total{"outcome": "exit"}'])
    st:envelope("events_api", SL.mention{ ts = "1700000101.000100", text = "run `echo counted`" })
    SL.wait(function()
      local m = scrape(bot.metrics_port)
      return m['switchboard_commands_total{"outcome": "exit"}'] == 1
    end, "the command to count")
    bot:signal("HUP")
    SL.wait(function()
      return scrape(bot.metrics_port)['switchboard_policy_reloads_total{"result": "ok"}'] == 1
    end, "the reload to count")
    local s = core.http.request{ url = ("http://127.0.0.1:%d/slack/events"):format(bot.metrics_port), deadline_ms = 5000 }
    assert.equals(404, s)
    bot:signal("TERM")
    assert.equals(0, bot:wait().exit)
    st:close()
    tmp.remove_all()
  end))
end)

-- GET /metrics on a real sandboxd, parsed by a real Prometheus parser (Debian's
-- python3-prometheus-client): behind the bearer on --listen, without it on --metrics-listen;
-- commands by outcome, the duration histogram, instances, fleet-busy answers, reloads.
local core = require("switchboard.core")
local async = require("support.async")
local S = require("support.sandbox")

-- The families and samples the python parser reads from text: {family → {type, samples}}.
local PARSER = [[
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = {}
for f in text_string_to_metric_families(sys.stdin.read()):
    out[f.name] = {"type": f.type, "samples": [[s.name, s.labels, s.value] for s in f.samples]}
print(json.dumps(out))
]]

local function parse(text)
  local r = assert(core.spawn{ argv = { "/usr/bin/python3", "-c", PARSER }, stdin = text,
    env = S.base_env() }):wait()
  assert.equal(0, r.exit, "the Prometheus parser refused the text:\n" .. r.stderr .. "\n" .. text)
  return require("cjson").decode(r.stdout)
end

local function sample(fams, family, name, labels)
  local f = assert(fams[family], "no family " .. family)
  for _, s in ipairs(f.samples) do
    local match = s[1] == name
    for k, v in pairs(labels or {}) do if s[2][k] ~= v then match = false end end
    if match then return s[3] end
  end
  return nil
end

local function exec(h, thread, command, timeout_ms)
  local status = S.call(h.url, "/exec", { thread = thread, body = { command = command, timeoutMs = timeout_ms } })
  assert.equal(200, status)
end

describe("sandboxd GET /metrics", function()
  after_each(function() S.cleanup_servers() end)

  it("speaks the exposition format and counts what happened", async(function()
    local h = S.start_sandboxd({ args = { "--max-instances", "1", "--metrics-listen", "127.0.0.1:0" } })
    -- behind the bearer on --listen
    local status = S.call(h.url, "/metrics", { method = "GET", thread = false, token = "wrong-token-value" })
    assert.equal(401, status)
    exec(h, "t1", "true")
    exec(h, "t1", "exit 3")
    exec(h, "t1", "sleep 5", 1000)
    exec(h, "t2", "true") -- the one instance is t1's: fleet-busy, nothing runs
    local body
    status, _, body = S.call(h.url, "/metrics", { method = "GET", thread = false })
    assert.equal(200, status, h.log())
    local fams = parse(body)
    assert.equal("counter", fams.switchboard_commands.type)
    assert.equal(2, sample(fams, "switchboard_commands", "switchboard_commands_total", { outcome = "exit" }))
    assert.equal(1, sample(fams, "switchboard_commands", "switchboard_commands_total", { outcome = "124" }))
    assert.equal(1, sample(fams, "switchboard_commands", "switchboard_commands_total", { outcome = "capacity" }))
    assert.equal(0, sample(fams, "switchboard_commands", "switchboard_commands_total", { outcome = "infra" }))
    assert.equal(1, sample(fams, "switchboard_fleet_busy", "switchboard_fleet_busy_total"))
    assert.equal("histogram", fams.switchboard_command_duration_seconds.type)
    assert.equal(3, sample(fams, "switchboard_command_duration_seconds", "switchboard_command_duration_seconds_count"))
    assert.equal(1, sample(fams, "switchboard_instances", "switchboard_instances", { state = "awake" }))
    assert.equal(0, sample(fams, "switchboard_instances", "switchboard_instances", { state = "sleeping" }))
    assert.is_number(sample(fams, "switchboard_github_token_mints", "switchboard_github_token_mints_total", { result = "ok" }))
    assert.is_number(sample(fams, "switchboard_heartbeat_gaps", "switchboard_heartbeat_gaps_total"))
    -- the start gate's queue, and the loop's lag (sampled from the server's start)
    assert.equal(0, sample(fams, "switchboard_instance_starts", "switchboard_instance_starts", { state = "waiting" }))
    assert.equal(0, sample(fams, "switchboard_instance_starts", "switchboard_instance_starts", { state = "running" }))
    for _, q in ipairs({ "0.5", "0.99", "1" }) do
      local lag = sample(fams, "switchboard_loop_lag_seconds", "switchboard_loop_lag_seconds", { quantile = q })
      assert.is_number(lag, "no loop lag at quantile " .. q)
      assert.truthy(lag >= 0 and lag < 60, tostring(lag))
    end
    -- the Lua heap (a server at rest holds a few MiB of it)
    local heap = sample(fams, "switchboard_lua_heap_bytes", "switchboard_lua_heap_bytes")
    assert.is_number(heap, "no Lua heap gauge")
    assert.truthy(heap > 100000 and heap < 1e9, tostring(heap))

    -- a reload counts; --metrics-listen serves the same text without the bearer
    os.execute("kill -HUP " .. h.pid)
    local mport = assert(tonumber(h.log():match("sandboxd%.listening[^\n]*metrics_port=(%d+)")))
    local murl = "http://127.0.0.1:" .. mport
    local n = S.wait_for(function()
      local st, _, b = S.call(murl, "/metrics", { method = "GET", thread = false, token = false })
      if st ~= 200 then return nil end
      return sample(parse(b), "switchboard_policy_reloads", "switchboard_policy_reloads_total", { result = "ok" }) == 1
    end, 20000)
    assert.truthy(n, "the reload was not counted:\n" .. h.log())
    status = S.call(murl, "/exec", { thread = "t1", body = { command = "true" }, token = false })
    assert.equal(404, status)
  end))
end)

-- The exec lane's reading of an /exec body (src/lane/exec_lane.c, core.exec_lane.decide) held to
-- the Lua path's (routes.parse): whatever the lane takes, it reads exactly as routes.lua would —
-- the same command, the same clamped budget, the same env — and a body with anything the Lua
-- path treats specially is left to it. tests/fuzz/fuzz_lane_body.c holds the same under libFuzzer.
local core = require("switchboard.core")
local cjson = require("cjson")
local routes = require("switchboard.sandboxd.routes")
local policies = require("support.policies")

local snap = policies.shipped()
local t = snap.timeouts

local function params(instance_network)
  return { floor_ms = t.bash.floor_ms, max_ms = t.bash.max_ms, default_ms = t.sandbox.default_budget_ms,
    network = snap.isolation.network, instance_network = instance_network or snap.isolation.network }
end

-- The lane's reading, checked against routes.parse's; returns whether the lane took it.
local function agree(body, instance_network)
  local lane = core.exec_lane.decide(body, params(instance_network))
  if lane == nil then return false end
  local call = routes.parse(snap, "/exec", body)
  assert.is_table(call, "the lane took a body the Lua path refuses: " .. body)
  assert.equal(call.command, lane.command, body)
  assert.equal(call.limit_ms, lane.limit_ms, body)
  assert.same(call.env, lane.env, body)
  assert.is_nil(call.base, body)
  assert.is_nil(call.base_since, body)
  assert.equal(call.network or snap.isolation.network, instance_network or snap.isolation.network, body)
  assert.is_nil(routes.client_mistake(call.command, call.env), body)
  return true
end

describe("the exec lane's reading of a body", function()
  it("takes the ordinary bodies, reading them as routes.parse does", function()
    local taken = {
      '{"command":"echo hi"}',
      '{"command":"echo hi","timeoutMs":5000}',
      '{"command":"x","timeoutMs":9e99}',
      '{"command":"x","timeoutMs":-5}',
      '{"command":"x","timeoutMs":1234.9}',
      '{"command":"echo $A","env":{"A":"1","B_2":"two words","_":""}}',
      '{"command":"x","env":{}}',
      '{"command":"x","env":[]}', -- (decoded as {} by both)
      ('{"command":"x","network":"%s"}'):format(snap.isolation.network),
      '{"timeoutMs":10,"command":" tab\\tthen text "}',
    }
    for _, body in ipairs(taken) do assert.is_true(agree(body), body) end
  end)

  it("leaves every other body to the Lua path", function()
    local other = snap.isolation.network == "host" and "none" or "host"
    local left = {
      "", "null", "[]", "[1]", "{}", "not json", '{"command":1}', '{"command":""}', '{"command":" \\n\\t "}',
      '{"command":"a\\u0000b"}', '{"command":"x","env":{"lower":"v"}}', '{"command":"x","env":{"A-B":"v"}}',
      '{"command":"x","env":{"A":1}}', '{"command":"x","env":{"A":"a\\u0000"}}',
      '{"command":"x","env":null}', '{"command":"x","timeoutMs":"5"}', '{"command":"x","timeoutMs":null}',
      '{"command":"x","base":"o/r"}', '{"command":"x","baseSince":1}', '{"command":"x","other":1}',
      '{"command":"x","network":"moon"}', ('{"command":"x","network":"%s"}'):format(other),
      cjson.encode({ command = (" "):rep(10) .. ("x"):rep(routes.MAX_ARG_STRLEN) }),
      cjson.encode({ command = "x", env = { BIG = ("v"):rep(routes.MAX_ARG_STRLEN) } }),
    }
    for _, body in ipairs(left) do assert.is_false(agree(body), body) end
  end)

  it("agrees with routes.parse on random bodies", function()
    local NAMES = { "command", "timeoutMs", "env", "network", "base", "x" }
    local ENV_NAMES = { "A", "a", "B_1", "1X", "_", "PATH", "" }
    local VALUES = { "echo hi", "", " ", "host", "none", 5, -1, 1e12, 0.5, true, cjson.null }
    local function pick(list) return list[math.random(#list)] end
    math.randomseed(43)
    local took = 0
    for _ = 1, 3000 do
      local doc = {}
      for _ = 1, math.random(0, 4) do
        local name = pick(NAMES)
        if name == "env" then
          local env = {}
          for _ = 1, math.random(0, 3) do env[pick(ENV_NAMES)] = pick(VALUES) end
          doc.env = env
        else
          doc[name] = pick(VALUES)
        end
      end
      if math.random() < 0.7 then doc.command = pick({ "echo hi", "true", " x " }) end
      local ok, body = pcall(cjson.encode, doc)
      if ok and agree(body) then took = took + 1 end
    end
    assert.is_true(took > 100, "the lane took only " .. took .. " of the random bodies")
  end)
end)

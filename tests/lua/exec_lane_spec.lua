-- The exec lane's reading of an /exec body (src/lane/exec_lane.c, core.exec_lane.decide) held to
-- the Lua path's (routes.parse): whatever the lane takes, it reads exactly as routes.lua would —
-- the same command, the same clamped budget, the same env — and a body with anything the Lua
-- path treats specially is left to it. tests/fuzz/fuzz_lane_body.c holds the same under libFuzzer.
-- The body is read in C (src/lane/exec_body.c, core.exec_lane.read_body), not by core.json.decode:
-- what it reads is held to what core.json.decode reads (tests/fuzz/fuzz_exec_reader.c too).
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

  -- Bodies whose JSON is out of the ordinary: every escape, surrogate pairs, raw bytes, numbers past
  -- the range. The lane must take them and read them as the Lua path does.
  it("takes the tricky bodies it reads, reading them as routes.parse does", function()
    local taken = {
      [[{"command":"echo \u00e9 \ud83d\ude00 \"q\" \\ \/ \b\f\n\r\t \u0041\u00FF\u20ac"}]],
      [[{"comm\u0061nd":"x","env":{"\u0041":"\ud83d\ude00\n","B":"\u00ff\uffff"}}]],
      '{"command":"a\1b\127c\255\254"}', -- raw control and non-UTF-8 bytes, as they are
      '{"command":"x","timeoutMs":1e400}', '{"command":"x","timeoutMs":-1e400}',
      '{"command":"x","timeoutMs":123456789012345678901234567890}', '{"command":"x","timeoutMs":-0}',
      '{"command":"x","timeoutMs":1.5e3}', '{"command":"x","timeoutMs":2E+4}', '{"command":"x","timeoutMs":0.25e-2}',
      ' \t\r\n{ "command" : "x" , "env" : { "A" : "1" , "B" : "2" } , "timeoutMs" : 9 } \n',
      '{"command":"x","env":{"Z":"1","A":"2","M":"3","AA":"4","A_":"5"}}',
    }
    for _, body in ipairs(taken) do assert.is_true(agree(body), body) end
  end)

  it("leaves duplicate keys, lone surrogates, non-strings and lenient JSON to the Lua path", function()
    local left = {
      '{"command":"x","command":"y"}', '{"command":"x","timeoutMs":1,"timeoutMs":2}',
      '{"command":"x","env":{"A":"1","A":"2"}}', '{"command":"x","env":{},"env":{}}',
      '{"command":"x","network":"host","network":"host"}',
      [[{"command":"\ud800"}]], [[{"command":"\udc00"}]], [[{"command":"\ud800\u0041"}]],
      [[{"command":"\ud800x"}]], [[{"command":"\ud83d\ud83d"}]], [[{"command":"\u12G4"}]], [[{"command":"\x"}]],
      '{"command":"x","env":{"A":true}}', '{"command":"x","env":{"A":null}}', '{"command":"x","env":{"A":{}}}',
      '{"command":"x","env":{"A":["v"]}}', '{"command":"x","env":[1]}', '{"command":"x","env":"A=1"}',
      '{"command":["x"]}', '{"command":"x","timeoutMs":true}', '{"command":"x","timeoutMs":[]}',
      '{"command":"x","timeoutMs":-.5}', '{"command":"x","timeoutMs":1.}', '{"command":"x","timeoutMs":+1}',
      '{"command":"x","timeoutMs":01}', '{"command":"x","timeoutMs":0x10}', '{"command":"x","timeoutMs":NaN}',
      '{"command":"x","timeoutMs":Infinity}', '{"command":"x","timeoutMs":1e}',
      '{"command":"x"}\0{"other":1}', '{"command":"x"} x', '{"command":"x",}', '{"command":"x"', '{"command":"x\0"}',
      [[{"command":"x","network":"host\u0000"}]], [[{"command":"x","network":"none\u0000"}]],
      [[{"comm\u0000and":"x"}]], [[{"command\u0000":"x"}]],
    }
    for _, body in ipairs(left) do assert.is_false(agree(body), body) end
  end)
end)

-- The reader itself (core.exec_lane.read_body) against core.json.decode: whatever it reads,
-- decode reads the same; and it reads the ordinary shapes (else the lane would take nothing).
describe("the exec lane's C reader of a body", function()
  local json = core.json

  local function same_as_decode(body)
    local mine = core.exec_lane.read_body(body)
    if mine == nil then return false end
    local doc = json.decode(body)
    assert.is_table(doc, "the reader took a body decode refuses: " .. body)
    for k, v in pairs(doc) do
      if k == "env" then
        assert.same(v, mine.env, body)
      else
        assert.equal(v, mine[k], body)
      end
    end
    for k in pairs(mine) do assert.is_not_nil(doc[k], body) end
    return true
  end

  -- A random JSON string literal of random code points, every escape form, and its UTF-8.
  local function random_literal()
    local parts = {}
    for _ = 1, math.random(0, 12) do
      local kind = math.random(6)
      if kind == 1 then
        parts[#parts + 1] = string.char(math.random(0x20, 0x7e)):gsub('["\\]', "\\%0")
      elseif kind == 2 then
        parts[#parts + 1] = ({ [[\"]], [[\\]], [[\/]], [[\b]], [[\f]], [[\n]], [[\r]], [[\t]] })[math.random(8)]
      elseif kind == 3 then
        local cp = math.random(0, 0xFFFF)
        if cp >= 0xD800 and cp <= 0xDFFF then cp = 0x41 end
        parts[#parts + 1] = ("\\u%04" .. (math.random(2) == 1 and "x" or "X")):format(cp)
      elseif kind == 4 then
        local cp = math.random(0x10000, 0x10FFFF) - 0x10000
        parts[#parts + 1] = ("\\u%04x\\u%04X"):format(0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF))
      elseif kind == 5 then
        parts[#parts + 1] = utf8.char(math.random(0x80, 0x10FFFF))
      else
        parts[#parts + 1] = string.char(math.random(1, 0x1f), math.random(0x80, 0xff))
      end
    end
    return '"' .. table.concat(parts) .. '"'
  end

  it("reads what core.json.decode reads, escapes and surrogate pairs included", function()
    math.randomseed(4343)
    local NUMBERS = { "0", "-0", "12", "1.5", "-3.25e2", "9e99", "1e400", "-1e400", "123456789012345678901234567890",
      "0.1", "2.2250738585072014e-308", "4.9e-324", "1E+3" }
    for _ = 1, 2000 do
      local env = {}
      for _ = 1, math.random(0, 4) do env[#env + 1] = random_literal() .. ":" .. random_literal() end
      local members = { '"command":' .. random_literal() }
      if math.random(2) == 1 then members[#members + 1] = '"timeoutMs":' .. NUMBERS[math.random(#NUMBERS)] end
      if math.random(2) == 1 then members[#members + 1] = '"network":' .. random_literal() end
      if math.random(2) == 1 then members[#members + 1] = '"env":{' .. table.concat(env, ",") .. "}" end
      local body = "{" .. table.concat(members, ",") .. "}"
      local doc = json.decode(body)
      local unique = true -- random names may repeat: decode keeps the last, the reader leaves it
      if doc and doc.env then
        local n = 0
        for _ in pairs(doc.env) do n = n + 1 end
        unique = n == #env
      end
      assert.equal(unique, same_as_decode(body), body)
    end
  end)
end)


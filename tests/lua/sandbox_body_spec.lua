-- routes.parse: the request bodies of /exec, /read and /write, never a raise (issue items 3, 8).
-- tests/fuzz/fuzz_exec_body.c holds the same invariants under libFuzzer; this is the cheap
-- sweep every run does, over the seed corpus and random bodies.
local core = require("switchboard.core")
local cjson = require("cjson")
local routes = require("switchboard.sandboxd.routes")
local policies = require("support.policies")

local snap = policies.shipped()

local function check(route, raw)
  local ok, call, status, why = pcall(routes.parse, snap, route, raw)
  assert(ok, "parse raised: " .. tostring(call))
  if call == nil then
    assert.is_true(status >= 400 and status < 500)
    assert.truthy(why:find("%S"))
    return nil, status, why
  end
  return call
end

describe("routes.parse", function()
  it("reads a good /exec body: command, env through envFromRequest, timeoutMs clamped (280 s when absent)", function()
    local call = check("/exec", '{"command":"echo hi","env":{"gh_token":"t","BAD-1":"x","N":1}}')
    assert.same({ command = "echo hi", env = { GH_TOKEN = "t" }, limit_ms = 280000 }, call)
    assert.equal(1200000, check("/exec", '{"command":"x","timeoutMs":9e99}').limit_ms)
  end)

  it("answers 400 with a clear message for malformed JSON and shapes", function()
    local cases = {
      { "", "empty" }, { "{", "not valid JSON" }, { "[1]", "got a JSON array" }, { "[]", "needs command" },
      { "null", "JSON null" }, { "12", "JSON number" }, { '{"command":1}', "command: a non-empty string" },
      { '{"command":"a\\u0000b"}', "NUL" }, { "{\"command\":\"x\"}garbage", "not valid JSON" },
      { '{"command":"x","t":NaN}', "not valid JSON" }, { '{"command":"x","t":0x10}', "not valid JSON" },
    }
    for _, c in ipairs(cases) do
      local call, status, why = check("/exec", c[1])
      assert.is_nil(call, c[1])
      assert.equal(400, status)
      assert.truthy(why:find(c[2], 1, true), c[1] .. " → " .. why)
    end
  end)

  it("reads /read and /write bodies, base64 or text, and refuses the rest", function()
    assert.same({ path = "a/b" }, check("/read", '{"path":"a/b","env":{}}'))
    assert.same({ path = "f", bytes = "hello" }, check("/write", '{"path":"f","content":"aGVsbG8=","encoding":"base64"}'))
    assert.same({ path = "f", bytes = "plain" }, check("/write", '{"path":"f","content":"plain"}'))
    assert.equal(400, select(2, check("/write", '{"path":"f","content":"@@","encoding":"base64"}')))
    assert.equal(400, select(2, check("/read", '{"path":""}')))
    assert.equal(404, select(2, routes.parse(snap, "/nope", "{}")))
  end)

  it("never raises on the fuzz corpus or on random and hostile bodies", function()
    for _, name in ipairs(core.fs.list("tests/fuzz/corpus/exec_body") or {}) do
      local raw = core.fs.read_file("tests/fuzz/corpus/exec_body/" .. name):sub(2)
      for _, route in ipairs({ "/exec", "/read", "/write" }) do check(route, raw) end
    end
    math.randomseed(42)
    local atoms = { '"x"', "1", "-0", "1e999", "true", "null", "[]", "{}", '"\\u0000"', '"a\\"b"', "[[[[1]]]]" }
    for _ = 1, 2000 do
      local parts = {}
      for _, field in ipairs({ "command", "timeoutMs", "env", "path", "content", "encoding" }) do
        if math.random() < 0.6 then
          local v = atoms[math.random(#atoms)]
          if field == "env" and math.random() < 0.5 then
            v = '{"' .. ({ "gh_token", "A", "1X", "a-b", "" })[math.random(5)] .. '":' .. atoms[math.random(#atoms)] .. "}"
          end
          parts[#parts + 1] = ('"%s":%s'):format(field, v)
        end
      end
      local raw = "{" .. table.concat(parts, ",") .. "}"
      if math.random() < 0.2 then raw = raw:sub(1, math.random(#raw)) end
      for _, route in ipairs({ "/exec", "/read", "/write" }) do
        local call = check(route, raw)
        if call and route == "/exec" then
          for k, v in pairs(call.env) do
            assert.truthy(k:find("^[A-Z_][A-Z0-9_]*$"))
            assert.is_string(v)
          end
        end
      end
    end
    local deep = string.rep("[", 100000)
    check("/exec", deep)
    check("/exec", '{"command":"x","env":' .. string.rep('{"a":', 5000) .. "1" .. string.rep("}", 5000) .. "}")
    check("/exec", cjson.encode({ command = string.rep("x", 1 << 20), env = { A = string.rep("y", 1 << 20) } }))
  end)
end)

-- envFromRequest (docs/contract.md#credential-transport): the env map comes from the request body alone.
local envmod = require("switchboard.sandboxd.env")
local cjson = require("cjson")

local from = envmod.from_request

describe("envFromRequest", function()
  it("reads `env` from the body — an object of string values — and returns it as the env map", function()
    assert.same({ GH_TOKEN = "t0k", LANG = "C.UTF-8" },
      from({ command = "true", env = { GH_TOKEN = "t0k", LANG = "C.UTF-8" } }))
  end)

  it("upper-cases body keys, so `gh_token` and `GH_TOKEN` are one variable", function()
    assert.same({ GH_TOKEN = "lower" }, from({ env = { gh_token = "lower" } }))
    -- both present: one variable, and the choice does not depend on table order
    for _ = 1, 20 do
      assert.same({ GH_TOKEN = "upper" }, from({ env = { gh_token = "lower", GH_TOKEN = "upper", Gh_Token = "mixed" } }))
    end
  end)

  it("drops names that are not shell identifiers after upper-casing", function()
    assert.same({ OK_1 = "a", _X = "b" }, from({ env = {
      ok_1 = "a", _x = "b", ["1BAD"] = "c", ["BAD-NAME"] = "d", ["BAD NAME"] = "e", [""] = "f",
      ["A=B"] = "g", ["ÄÖ"] = "h", ["X\0Y"] = "i",
    } }))
  end)

  it("drops non-string values — numbers, booleans, null, objects, arrays — and keeps the string ones", function()
    local body = cjson.decode([[{"env":{"N":1,"B":true,"Z":null,"O":{"a":"b"},"A":["x"],"S":"kept"}}]])
    assert.same({ S = "kept" }, from(body))
  end)

  it("drops a value a process environment cannot hold (a NUL byte)", function()
    assert.same({ OK = "x" }, from({ env = { BAD = "a\0b", OK = "x" } }))
  end)

  it("an `env` that is not a plain object (array, string, null, number, boolean) yields an empty map", function()
    for _, env in ipairs({ "[\"A=1\"]", "[]", "\"A=1\"", "null", "7", "true", "false" }) do
      local body = cjson.decode('{"env":' .. env .. '}')
      assert.same({}, from(body), env)
    end
    assert.same({}, from({ env = setmetatable({ A = "1" }, {}) }))
  end)

  it("a body that is not an object yields an empty map — never a throw", function()
    for _, body in ipairs({ nil, "x", 7, true, false, cjson.null, function() end, coroutine.create(print) }) do
      assert.same({}, from(body))
    end
    assert.same({}, from(setmetatable({}, { __index = function() error("must not be read") end })))
  end)

  it("reads only `env` — the body's other fields are never env, and there is no header channel", function()
    assert.same({}, from({ command = "echo hi", GH_TOKEN = "x", headers = { ["x-env-gh_token"] = "y" },
      timeoutMs = 5, envs = { A = "1" }, ENV = { B = "2" } }))
    -- the function takes the body and nothing else
    assert.equal(1, debug.getinfo(from, "u").nparams)
  end)

  it("survives hostile JSON without throwing", function()
    local deep = string.rep("[", 500) .. string.rep("]", 500)
    for _, text in ipairs({ '{"env":' .. deep .. '}', '{"env":{"A":' .. deep .. '}}',
                            '{"env":{"' .. string.rep("A", 100000) .. '":"v"}}' }) do
      local ok, body = pcall(cjson.decode, text)
      if ok then assert.is_table(from(body)) end
    end
  end)
end)

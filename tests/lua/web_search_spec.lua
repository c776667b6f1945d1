-- web_search (docs/agent.md "web_search") against a Brave Search API stand-in on loopback
-- (tests/support/search_standin.py): offered only when policy names a provider, the key read
-- from the bot's environment at the call and sent as X-Subscription-Token, the results as a
-- numbered list of plain text, at most max_results; no key is a tool error naming the
-- variable; policy check refuses an unknown provider.
local core = require("switchboard.core")
local cjson = require("cjson")
local async = require("support.async")
local files = require("support.files")
local policy = require("switchboard.policy")
local tools = require("switchboard.agent.tools")
local P = require("support.policies")

local dir, pid

local function start(key)
  dir = files.tmpdir()
  local p = io.popen(("/usr/bin/python3 tests/support/search_standin.py --dir %s --key %s >%s/err 2>&1 & echo $!")
    :format(dir, key, dir))
  pid = tonumber(p:read("l"))
  p:close()
  local t0 = core.now_ms()
  while not files.read(dir .. "/port") and core.now_ms() - t0 < 120000 do core.sleep(20) end
  return "http://127.0.0.1:" .. assert(files.read(dir .. "/port"), files.read(dir .. "/err"))
end

after_each(function()
  if pid then os.execute("kill " .. pid .. " 2>/dev/null") end
  if dir then os.execute("rm -rf '" .. dir .. "'") end
  pid, dir = nil, nil
  P.cleanup()
end)

local function snap_with(url)
  local d = P.dir{ agents = function(src)
    return src .. ("\nweb_search = { provider = \"brave\", url = %q, key_env = \"SEARCH_KEY\", max_results = 2, "
      .. "timeout_ms = 10000 }\nagents.coding.tools[#agents.coding.tools + 1] = \"web_search\"\n"):format(url)
  end }
  return assert(P.load(d))
end

local function search(snap, query, env)
  return tools.call(nil, snap, policy.agent(snap, "coding"), { id = "s", name = "web_search", input = { query = query } },
    { signal = core.signal(), remaining_ms = 600000, getenv = function(k) return env[k] end })
end

describe("web_search", function()
  it("is not offered without a provider in policy", function()
    local snap = P.shipped()
    local def = { tools = { "web_search" }, resources = {} }
    assert.same({}, tools.definitions(snap, def))
  end)

  it("asks the provider with the bot's key and lists the results as plain text", async(function()
    local key = "bsk-" .. core.crypto.hex(core.crypto.random_bytes(8))
    local snap = snap_with(start(key) .. "/res/v1/web/search")
    assert.is_true(tools.offered(snap, policy.agent(snap, "coding"), "web_search"))
    local out = search(snap, "lua & c", { SEARCH_KEY = key })
    assert.is_false(out.is_error)
    assert.equal(table.concat({
      "1. Result 1 for lua & c", "   https://example.com/1", "   About lua & c & more, number 1",
      "2. Result 2 for lua & c", "   https://example.com/2", "   About lua & c & more, number 2",
    }, "\n"), out.content)
    local none = search(snap, "nothing", { SEARCH_KEY = key })
    assert.equal("no results for \"nothing\"", none.content)
    local unset = search(snap, "x", {})
    assert.is_true(unset.is_error)
    assert.matches("key (SEARCH_KEY) is not set in the bot's environment", unset.content, 1, true)
    local wrong = search(snap, "x", { SEARCH_KEY = "wrong" })
    assert.is_true(wrong.is_error)
    assert.matches("HTTP 401", wrong.content, 1, true)
    local log = {}
    for line in files.read(dir .. "/log"):gmatch("[^\n]+") do log[#log + 1] = cjson.decode(line) end
    assert.equal(3, #log)
    assert.same({ path = "/res/v1/web/search", q = "lua & c", count = 2, key_ok = true }, log[1])
  end))

  it("policy check refuses an unknown provider", function()
    local d = P.dir{ agents = function(src)
      return src .. "\nweb_search = { provider = \"bing\", url = \"https://x.example\", key_env = \"K\", max_results = 2, timeout_ms = 10000 }\n"
    end }
    local snap, errs = P.load(d)
    assert.is_nil(snap)
    assert.is_true(P.has(errs, "web_search.provider", "must be one of \"none\", \"brave\""), table.concat(errs or {}, "\n"))
    d = P.dir{ agents = function(src) return src .. "\nweb_search = { provider = \"brave\", url = \"https://x.example\" }\n" end }
    snap, errs = P.load(d)
    assert.is_nil(snap)
    assert.is_true(P.has(errs, "web_search.key_env is required with a provider"), table.concat(errs or {}, "\n"))
  end)
end)

-- sandboxd's request log (docs/operations.md#logs) read from a real sandboxd's stderr: one info
-- line per request — a 200 /exec, a 401 (a bot with the wrong token), a 404 — with method,
-- route, status, duration and the thread key's hash, in the text format and in
-- --log-format json (every line parsed); the bearer, the wrong bearer, the GH_TOKEN the
-- command was given and the raw thread key appear nowhere in the log.
local cjson = require("cjson")
local async = require("support.async")
local S = require("support.sandbox")
local R = require("support.resident")

local GH_TOKEN = "ghs_requestLogSpecSecret0123456789abcdef"
local WRONG = "wrong-bearer-requestlog-0123456789"
local THREAD = "C0123456789:1712345678.000100-requestlog"

-- The label runner.label gives THREAD: t- and the first 12 hex digits of its SHA-256.
local function label_of(key)
  local r = assert(io.popen("printf %s '" .. key .. "' | sha256sum")):read("l")
  return "t-" .. r:sub(1, 12)
end

-- Drives the three requests, waits until their three lines are in the log, returns the log.
local function drive(h, count_lines)
  local status, _, body = S.call(h.url, "/exec", { thread = THREAD,
    body = { command = "echo ran; test -n \"$GH_TOKEN\"", env = { GH_TOKEN = GH_TOKEN } } })
  assert.equal(200, status)
  assert.equal(0, cjson.decode(body).exitCode, body)
  status = S.call(h.url, "/exec", { thread = THREAD, token = WRONG, body = { command = "true" } })
  assert.equal(401, status)
  status = S.call(h.url, "/no-such-route", { thread = THREAD, body = { command = "true" } })
  assert.equal(404, status)
  local done = S.wait_for(function() return count_lines(h.log()) >= 3 end, 30000)
  assert.truthy(done, "three request lines did not appear:\n" .. h.log())
  return h.log()
end

local function no_secrets(log)
  for name, secret in pairs({ bearer = S.TOKEN, wrong_bearer = WRONG, GH_TOKEN = GH_TOKEN, thread_key = THREAD }) do
    assert.is_nil(log:find(secret, 1, true), name .. " appears in the log:\n" .. log)
  end
end

describe("sandboxd request log", function()
  after_each(function() S.cleanup_servers() end)

  it("logs a 200 /exec, a 401 and a 404 at info, one line each, in the text format", async(function()
    local h = S.start_sandboxd({ args = { "--no-walls" }, env = { GH_TOKEN = GH_TOKEN } })
    local function lines(log)
      local out = {}
      for l in log:gmatch("[^\n]+") do
        if l:find(" sandboxd%.request ") then out[#out + 1] = l end
      end
      return out
    end
    local log = drive(h, function(l) return #lines(l) end)
    local got = lines(log)
    assert.equal(3, #got, log)
    local label = label_of(THREAD)
    local want = {
      { "info", "POST", "/exec", "200" }, { "info", "POST", "/exec", "401" },
      { "info", "POST", "/no%-such%-route", "404" },
    }
    for i, w in ipairs(want) do
      local l = got[i]
      assert.truthy(l:find(" " .. w[1] .. " sandboxd.request ", 1, true), l)
      assert.truthy(l:find(" method=" .. w[2]), l)
      assert.truthy(l:find(" route=" .. w[3] .. "[ \n]") or l:find(" route=" .. w[3] .. "$"), l)
      assert.truthy(l:find(" status=" .. w[4]), l)
      assert.truthy(l:find(" duration_ms=%d+%.?%d*"), l)
      assert.truthy(l:find(" thread=" .. label, 1, true), l)
    end
    no_secrets(log)
  end))

  it("writes each of them as one JSON document in --log-format json", async(function()
    local h = S.start_sandboxd({ args = { "--no-walls" }, global = { "--log-format", "json" },
      env = { GH_TOKEN = GH_TOKEN } })
    local function docs(log)
      local out = {}
      for l in log:gmatch("[^\n]+") do
        if l:sub(1, 1) == "{" then
          local ok, doc = pcall(cjson.decode, l)
          assert.truthy(ok, "not a JSON line: " .. l)
          if doc.event == "sandboxd.request" then out[#out + 1] = doc end
        end
      end
      return out
    end
    local log = drive(h, function(l) return #docs(l) end)
    -- every line the server wrote is JSON (the --no-walls warning on stderr aside)
    for l in log:gmatch("[^\n]+") do
      if not l:find("^switchboard sandboxd: WARNING") then
        assert.truthy(pcall(cjson.decode, l), "not a JSON line: " .. l)
      end
    end
    local got = docs(log)
    assert.equal(3, #got, log)
    local label = label_of(THREAD)
    local want = { { "/exec", 200 }, { "/exec", 401 }, { "/no-such-route", 404 } }
    for i, w in ipairs(want) do
      local d = got[i]
      assert.equal("info", d.level)
      assert.equal("POST", d.method)
      assert.equal(w[1], d.route)
      assert.equal(w[2], tonumber(d.status))
      assert.is_number(tonumber(d.duration_ms))
      assert.equal(label, d.thread)
    end
    no_secrets(log)
  end))

  it("gives the resident, which shares sandboxd's routes, the same lines", async(function()
    local base = R.make_base()
    local h = R.start(base, { policies = R.policy_dir() })
    local function call(path, token, method)
      return (S.call(h.url, path, { method = method, thread = THREAD, token = token, body = "{}" }))
    end
    assert.equal(200, call("/healthz", R.TOKEN, "GET"))
    assert.equal(401, call("/exec", WRONG))
    assert.equal(409, call("/exec", R.TOKEN)) -- no worktree attached: answered by the handler
    assert.equal(404, call("/nope", R.TOKEN))
    local function lines(log)
      local out = {}
      for l in log:gmatch("[^\n]+") do
        if l:find(" resident%.request ") then out[#out + 1] = l end
      end
      return out
    end
    assert.truthy(S.wait_for(function() return #lines(h.log()) >= 4 end, 30000), h.log())
    local got = lines(h.log())
    assert.equal(4, #got, h.log())
    for i, w in ipairs({ { "GET", "/healthz", 200 }, { "POST", "/exec", 401 }, { "POST", "/exec", 409 }, { "POST", "/nope", 404 } }) do
      assert.truthy(got[i]:find(" info resident.request ", 1, true), got[i])
      assert.truthy(got[i]:find(" method=" .. w[1] .. " ", 1, true) or got[i]:find(" method=" .. w[1] .. "$"), got[i])
      assert.truthy(got[i]:find(" route=" .. w[2], 1, true), got[i])
      assert.truthy(got[i]:find(" status=" .. w[3], 1, true), got[i])
      assert.truthy(got[i]:find(" thread=" .. label_of(THREAD), 1, true), got[i])
    end
    for _, secret in ipairs({ R.TOKEN, WRONG, THREAD }) do
      assert.is_nil(h.log():find(secret, 1, true), "a secret or the raw key is in the log:\n" .. h.log())
    end
    S.rm(base)
  end))
end)

-- The E2B stand-in (tests/support/e2b_standin.py) as a real process on loopback, and an e2b
-- executor pointed at it the way E2B's SDKs allow (E2B_API_URL, E2B_SANDBOX_URL).
local core = require("switchboard.core")
local cjson = require("cjson")
local procs = require("support.procs")

local M = {}

M.KEY = "e2b_" .. core.crypto.hex(core.crypto.random_bytes(20))

local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

local function wait_for(pred, ms)
  local t0 = core.now_ms()
  local v = pred()
  while not v and core.now_ms() - t0 < ms do
    core.sleep(20)
    v = pred()
  end
  return v
end
M.wait_for = wait_for

-- Starts the stand-in (call inside core.run). Returns a handle:
--   .url .port .dir  :env() (the E2B_* variables an executor or the binary needs)
--   :faults(list) :vanish(id) :requests() :sandboxes() :stop()
function M.start(opts)
  opts = opts or {}
  local dir = require("support.tmp").scratch("e2b") -- removed with the spec's scratch root
  -- --watch: the stand-in ends (with its sandboxes) when this process does, even if a spec
  -- failed before its teardown
  local cmd = ("/usr/bin/python3 tests/support/e2b_standin.py --dir %s --api-key %s --split-delay-ms %s --watch %d >%s/log 2>&1 &")
    :format(dir, opts.key or M.KEY, tostring(opts.split_delay_ms or 1), procs.self_pid(), dir)
  os.execute(cmd)
  local port = wait_for(function() return read(dir .. "/port") end, 180000) -- python3 starting on a loaded machine (over 60 s seen): the file ends the wait
  assert(port, "the E2B stand-in did not start: " .. (read(dir .. "/log") or ""))
  local h = { dir = dir, port = tonumber(port), pid = tonumber(read(dir .. "/pid")) }
  h.url = "http://127.0.0.1:" .. h.port
  local function call(method, path, body)
    local status, _, raw = core.http.request{ method = method, url = h.url .. path,
      body = body and cjson.encode(body) or nil, deadline_ms = 30000 } -- a bound for a loaded machine
    assert(status and status < 300, ("stand-in %s %s: %s"):format(method, path, tostring(status)))
    return raw ~= "" and cjson.decode(raw) or nil
  end
  function h.env(_, extra)
    local env = { E2B_API_KEY = opts.key or M.KEY, E2B_API_URL = h.url, E2B_SANDBOX_URL = h.url }
    for k, v in pairs(extra or {}) do env[k] = v end
    return env
  end
  function h.getenv(_, extra)
    local env = h:env(extra)
    return function(name) return env[name] end
  end
  function h.faults(_, list) call("PUT", "/_standin/faults", list) end
  function h.vanish(_, id) call("POST", "/_standin/vanish/" .. id) end
  -- pause: as E2B's autoPause does when the timeout passes (POST /sandboxes/{id}/pause);
  -- expire: a paused sandbox E2B no longer keeps
  function h.pause(_, id)
    local status = core.http.request{ method = "POST", url = h.url .. "/sandboxes/" .. id .. "/pause",
      headers = { ["x-api-key"] = opts.key or M.KEY }, deadline_ms = 30000 }
    assert(status == 204, "pause: " .. tostring(status))
  end
  function h.expire(_, id) call("POST", "/_standin/expire/" .. id) end
  function h.requests() return call("GET", "/_standin/requests") end
  function h.sandboxes() return call("GET", "/_standin/sandboxes") end
  -- The stand-in's sandboxes by id.
  function h.sandbox(_, id)
    for _, s in ipairs(h.sandboxes()) do if s.id == id then return s end end
  end
  function h.stop()
    os.execute(("kill -TERM %d 2>/dev/null"):format(h.pid))
    wait_for(function() return read("/proc/" .. h.pid .. "/stat") == nil end, 30000)
    os.execute(("kill -9 %d 2>/dev/null; rm -rf '%s'"):format(h.pid, dir))
  end
  return h
end

-- An e2b executor on the stand-in. opts: policy (fn), thread_key, state_dir, resolve_envs, key
function M.executor(h, opts)
  opts = opts or {}
  return require("switchboard.exec.e2b").new{
    api_key = opts.key or M.KEY, key_env = "E2B_API_KEY", thread_key = opts.thread_key or "T1",
    policy = opts.policy, resolve_envs = opts.resolve_envs, getenv = h:getenv(),
    state_dir = opts.state_dir, agent = "coding",
  }
end

return M

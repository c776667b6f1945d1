-- Shared helpers for the sandbox specs: scaled-down policy directories, fake request/response
-- objects for driving the routes in-process, and real processes on loopback — the sandboxd
-- binary and the scripted stand-in server (tests/support/sandbox_standin.py).
local core = require("switchboard.core")
local cjson = require("cjson")
local policies = require("support.policies")
local tmp = require("support.tmp")

local M = {}

M.BIN = os.getenv("SWITCHBOARD_BIN") or "./build/switchboard"
M.TOKEN = "spec-token-" .. core.crypto.hex(core.crypto.random_bytes(8))

-- Lines appended to the shipped timeouts.lua (a later line refines an earlier one).
M.FAST = [[
sandbox.heartbeat_ms = 100
sandbox.sleep_after = "2s"
bash.floor_ms = 100
bash.kill_grace_ms = 300
server.drain_ms = 1 * second
server.flush_ms = 1 * second
call.margin_ms = 1 * second
fleet_busy.waits_ms = { 1 * second, 1 * second }
fleet_busy.every_ms = 1 * second
fleet_busy.max_wait_ms = 3 * second
container_starting.retry_after_ms = 100
]]

-- A scratch policy directory: the shipped files, timeouts.lua with `extra` appended (M.FAST
-- when nil), errors.lua with `errors_extra` appended.
function M.policy_dir(extra, errors_extra)
  return policies.dir{
    timeouts = function(src) return src .. "\n" .. (extra or M.FAST) .. "\n" end,
    errors = errors_extra and function(src) return src .. "\n" .. errors_extra .. "\n" end or nil,
  }
end

-- A walled sandboxd's policy directory: M.FAST and then `timeouts_extra` appended to
-- timeouts.lua; the instances' uids from uid_base (64 of them), no spare instance.
function M.walled_policy_dir(uid_base, timeouts_extra)
  return policies.dir{
    timeouts = function(src) return src .. "\n" .. M.FAST .. "\n" .. (timeouts_extra or "") .. "\n" end,
    isolation = function(src)
      return src .. ("\nuid_base = %d\nuid_count = 64\nspare_instances = 0\n"):format(uid_base)
    end,
  }
end

function M.snapshot(extra, errors_extra)
  local dir = M.policy_dir(extra, errors_extra)
  return assert(policies.load(dir)), dir
end

M.cleanup = policies.cleanup

-- A scratch directory under the spec's own root (support/tmp.lua: removed when busted ends).
function M.tmpdir() return tmp.scratch("sandbox") end

-- rm -rf that refuses a directory with a mount point at or below it (support/tmp.lua).
function M.rm(dir) return tmp.remove(dir) end

function M.read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

---------------------------------------------------------------------------------------------
-- In-process: a request and a response recorder shaped like core.http.serve's

function M.req(path, opts)
  opts = opts or {}
  local headers = opts.headers or {}
  if opts.token ~= false then headers.authorization = headers.authorization or ("Bearer " .. (opts.token or M.TOKEN)) end
  if opts.thread ~= false and headers["x-thread-key"] == nil then headers["x-thread-key"] = opts.thread or "T1" end
  local body = opts.body
  if type(body) == "table" then body = cjson.encode(body) end
  return { method = opts.method or (path == "/healthz" and "GET" or "POST"), path = path, headers = headers,
           body = body or "" }
end

function M.res()
  local r = { writes = {}, closed = false }
  function r:start(status, headers)
    assert(not self.status, "started twice")
    self.status, self.headers, self.t_start = status, headers, core.now_ms()
  end
  function r:write(bytes)
    assert(self.status and not self.finished, "write outside a response")
    self.writes[#self.writes + 1] = { t = core.now_ms(), bytes = bytes }
    return true
  end
  function r:drain() return true end
  function r:finish(bytes)
    assert(self.status and not self.finished, "finish outside a response")
    self.finished, self.body, self.t_end = true, bytes or "", core.now_ms()
  end
  function r:send(status, headers, body)
    self:start(status, headers)
    self:finish(body)
  end
  -- everything the peer would have read
  function r:stream()
    local parts = {}
    for _, w in ipairs(self.writes) do parts[#parts + 1] = w.bytes end
    parts[#parts + 1] = self.body or ""
    return table.concat(parts)
  end
  function r:json() return cjson.decode(self:stream()) end
  return r
end

-- Run handler(req, res) in its own task and wait for it (call inside core.run).
function M.serve_one(handler, req, res)
  res = res or M.res()
  local me, done = core.current(), false
  core.go(function()
    handler(req, res)
    done = true
    core.wake(me)
  end)
  core.suspend()
  assert(done)
  return res
end

---------------------------------------------------------------------------------------------
-- Real processes

local function base_env(extra)
  local env = { PATH = os.getenv("PATH"), HOME = os.getenv("HOME") or "/tmp", LANG = "C.UTF-8" }
  for k, v in pairs(extra or {}) do env[k] = v end
  return env
end
M.base_env = base_env

-- Waits (on the loop) until pred() is true or ms pass. Returns pred()'s last value.
function M.wait_for(pred, ms)
  local t0 = core.now_ms()
  local v = pred()
  while not v and core.now_ms() - t0 < ms do
    core.sleep(20)
    v = pred()
  end
  return v
end

-- Starts `switchboard [--policies DIR] sandboxd --listen 127.0.0.1:0 --root ROOT [args]` and
-- waits for its sandboxd.listening line (opts.on_output(stream, chunk) also sees its output as
-- it comes). Call inside core.run. Returns a handle:
--   .port .url .root .proc .log() (everything it wrote to stderr so far) :stop(sig) :wait()
-- An overlay directory's isolation.lua gets `outbound = "pasta"` (or SB_TEST_OUTBOUND's) unless
-- it names outbound itself (support/policies.lua says why).
function M.pasta_unless_named(dir)
  local path = dir .. "/isolation.lua"
  local f = io.open(path, "r")
  local src = f and f:read("a") or ""
  if f then f:close() end
  if src:find("%f[%w_]outbound%s*=") then return end
  local asked = os.getenv("SB_TEST_OUTBOUND")
  f = assert(io.open(path, "a"))
  f:write(('\noutbound = "%s"\n'):format((asked == "bridge" or asked == "auto") and asked or "pasta"))
  f:close()
end

function M.start_sandboxd(opts)
  opts = opts or {}
  local root = opts.root or M.tmpdir()
  -- the shipped policies' outbound "auto" would make a bridge in the network namespace sandboxd
  -- runs in, the host's own here: a scratch copy says pasta (support/policies.lua), and a
  -- spec's own overlay (shipped files under it) gets the same line unless it names outbound —
  -- a spec's kill -9 would otherwise leave a bridge and an nftables table on the host
  if not opts.wrap then
    if not opts.policies then opts.policies = policies.dir() else M.pasta_unless_named(opts.policies) end
  end
  local argv = {}
  for _, a in ipairs(opts.wrap or {}) do argv[#argv + 1] = a end -- e.g. nsenter --net=… (it execs)
  argv[#argv + 1] = M.BIN
  if opts.policies then argv[#argv + 1] = "--policies"; argv[#argv + 1] = opts.policies end
  for _, a in ipairs(opts.global or {}) do argv[#argv + 1] = a end
  for _, a in ipairs({ "sandboxd", "--listen", opts.listen or "127.0.0.1:0", "--root", root }) do
    argv[#argv + 1] = a
  end
  for _, a in ipairs(opts.args or {}) do argv[#argv + 1] = a end
  local chunks = {}
  local env = base_env(opts.env)
  if opts.token ~= false then env.SANDBOX_TOKEN = env.SANDBOX_TOKEN or opts.token or M.TOKEN end
  local proc = assert(core.spawn{
    argv = argv, env = env, max_output = 64 << 20,
    on_output = function(stream, chunk)
      chunks[#chunks + 1] = chunk
      if opts.on_output then opts.on_output(stream, chunk) end
    end,
  })
  local h = { proc = proc, root = root, pid = proc.pid }
  M.servers[#M.servers + 1] = h
  function h.log() return table.concat(chunks) end
  core.go(function() h.result = proc:wait() end)
  local port = M.wait_for(function()
    return h.log():match("sandboxd%.listening[^\n]*port=(%d+)")
      or h.log():match('"event":"sandboxd%.listening"[^\n]*"port":(%d+)') -- --log-format json
      or h.result
  end, opts.start_timeout_ms or 60000) -- a bound for a loaded machine; the line ends the wait
  if type(port) ~= "string" and opts.may_fail ~= true then
    error("sandboxd did not start:\n" .. h.log(), 2)
  end
  h.port = tonumber(port)
  h.url = h.port and ("http://127.0.0.1:" .. port) or nil
  -- The signal goes to the server process alone, not its group: a command being spawned is in
  -- the server's group for a moment (before its own setsid) and would die of it.
  function h.stop(_, sig)
    if not h.result then os.execute(("kill -%s %d 2>/dev/null"):format(sig or "TERM", h.pid)) end
  end
  function h.wait()
    M.wait_for(function() return h.result end, 60000)
    return h.result
  end
  return h
end

-- Where a spec reaches thread `thread`'s workspace files from the host. A walled sandboxd's
-- workspace is a file system of its own, mounted in its instance's mount namespace only
-- (docs/isolation.md "Workspace size while writing"): reached through the /proc root of a
-- process of that instance — the one whose /workspace is the loop device backed by the
-- workspace's image. Unwalled, the host directory itself. nil while no instance has it mounted.
-- The entries of a sandboxd's workspaces root that are threads' own: without the server's
-- spare instances (.spare-…), its workspace image templates (.workspace-template-….img,
-- src/walls/disk.c) and its instances' locales (.locale-view-…, shell/locale_view.lua), which it
-- makes whatever the requests.
function M.thread_entries(root)
  local out = {}
  for _, name in ipairs(core.fs.list(root) or {}) do
    if not (name:match("^%.spare%-%x+$") or name:match("^%.workspace%-template%-%d+%.img$")
        or name:match("^%.locale%-view%-%d+%-%x+$")) then
      out[#out + 1] = name
    end
  end
  table.sort(out)
  return out
end

function M.files(h, thread)
  local dir = require("switchboard.shell.workspace").path(h.root, thread)
  local image = (core.fs.realpath(dir) or dir) .. "/.workspace.img"
  if not core.fs.exists(image) then return dir end
  -- read with core.fs, never a shell: a spec polls this, and a popen'd `ls` blocks the loop
  -- (on the sanitized build, with the runtimes preloaded into it, for a second beside stress-ng)
  local devnum
  for _, name in ipairs(core.fs.list("/sys/block") or {}) do
    if name:match("^loop%d+$") and (M.read("/sys/block/" .. name .. "/loop/backing_file") or "") == image .. "\n" then
      devnum = (M.read("/sys/block/" .. name .. "/dev") or ""):match("^(%d+:%d+)")
    end
  end
  if not devnum then return nil end
  -- the instances' cgroups are below the server's own (pids controller, or v2's one tree):
  -- looked up where they are, not searched for (a find over /sys/fs/cgroup takes seconds on a
  -- busy host)
  local own = M.read("/proc/" .. h.pid .. "/cgroup") or ""
  local base = own:match("%d+:[^:\n]*pids[^:\n]*:([^\n]*)")
  base = base and ("/sys/fs/cgroup/pids" .. base) or ("/sys/fs/cgroup" .. (own:match("0::([^\n]*)") or ""))
  local server = ("%s/switchboard-%d"):format(base:gsub("/+$", ""), h.pid)
  for _, inst in ipairs(core.fs.list(server) or {}) do
    for pid in (inst:match("^i") and M.read(server .. "/" .. inst .. "/cgroup.procs") or ""):gmatch("%d+") do
      for line in (M.read("/proc/" .. pid .. "/mountinfo") or ""):gmatch("[^\n]+") do
        local mm, at = line:match("^%d+ %d+ (%d+:%d+) %S+ (%S+)")
        if mm == devnum and at == "/workspace" then return "/proc/" .. pid .. "/root/workspace" end
      end
    end
  end
  return nil
end

-- Has process pid ended? Gone, or a zombie: its mounts and files are released either way (a
-- server this process spawned stays a zombie until the loop reaps it, and cleanup may run
-- outside the loop).
local function ended(pid)
  local stat = M.read("/proc/" .. pid .. "/stat")
  return not stat or stat:match("^%d+ %b() (%a)") == "Z"
end

-- Every server a spec started; cleanup_servers() (after_each, and helper.lua when busted ends)
-- kills the ones a failed test left and removes each one's root once the server is gone — a
-- walled server's instances hold mounts while it lives.
M.servers = {}
function M.cleanup_servers()
  for _, h in ipairs(M.servers) do
    if not h.result then os.execute("kill -9 " .. h.pid .. " 2>/dev/null") end
  end
  for _, h in ipairs(M.servers) do
    -- a bound for a loaded machine; a server still there after it keeps its root
    local t0 = os.time()
    while not h.result and not ended(h.pid) and os.time() - t0 < 60 do os.execute("sleep 0.05") end
    if h.root and (h.result or ended(h.pid)) then M.rm(h.root) end
  end
  M.servers = {}
end

-- A request to a real server with the spec token and a thread key.
function M.call(url, path, opts)
  opts = opts or {}
  local headers = opts.headers or {}
  if opts.token ~= false then headers.authorization = headers.authorization or ("Bearer " .. (opts.token or M.TOKEN)) end
  if opts.thread ~= false and headers["x-thread-key"] == nil then headers["x-thread-key"] = opts.thread or "T1" end
  if opts.body ~= nil and headers["content-type"] == nil then headers["content-type"] = "application/json" end
  local body = opts.body
  if type(body) == "table" then body = cjson.encode(body) end
  return core.http.request{
    method = opts.method or (path == "/healthz" and "GET" or "POST"), url = url .. path,
    -- longer than any command budget a spec gives (60 s) plus the wait of a loaded machine
    headers = headers, body = body, deadline_ms = opts.deadline_ms or 120000, on_chunk = opts.on_chunk,
    signal = opts.signal,
  }
end

-- One series of a real server's /metrics (its exact text, labels included: `name{k="v"}`) as a
-- number; 0 when the server has not counted it yet.
function M.metric(h, series)
  local status, _, text = M.call(h.url, "/metrics", { method = "GET", thread = false })
  assert(status == 200, "GET /metrics: " .. tostring(status) .. " " .. tostring(text))
  local at = text:find("\n" .. series .. " ", 1, true)
  return at and tonumber(text:match("^(%S+)", at + #series + 2)) or 0
end

-- The scripted stand-in (tests/support/sandbox_standin.py). Call inside core.run.
--   h.url; h:script(list of answers) ; h:requests() → the requests it received
function M.start_standin()
  local dir = M.tmpdir()
  -- --watch: the stand-in ends when this process does, even if a spec failed before its teardown
  os.execute(("/usr/bin/python3 tests/support/sandbox_standin.py --dir %s --watch %d >%s/log 2>&1 &")
    :format(dir, require("support.procs").self_pid(), dir))
  -- the port file ends the wait; the bound only catches a stand-in that never comes up (python
  -- took over 60 s to start beside a loaded suite)
  local port = M.wait_for(function() return M.read(dir .. "/port") end, 180000)
  assert(port, "the stand-in did not start: " .. (M.read(dir .. "/log") or ""))
  local h = { dir = dir, port = tonumber(port), pid = tonumber(M.read(dir .. "/pid")) }
  h.url = "http://127.0.0.1:" .. h.port
  function h.script(_, answers)
    local status = core.http.request{ method = "PUT", url = h.url .. "/_script",
      body = cjson.encode(answers), deadline_ms = 30000 } -- a bound for a loaded machine
    assert(status == 200, "the stand-in refused the script")
  end
  function h.requests()
    local status, _, body = core.http.request{ method = "GET", url = h.url .. "/_requests", deadline_ms = 30000 } -- a bound for a loaded machine
    assert(status == 200)
    return cjson.decode(body)
  end
  function h.stop()
    os.execute("kill -9 " .. h.pid .. " 2>/dev/null")
    M.rm(dir)
  end
  return h
end

return M

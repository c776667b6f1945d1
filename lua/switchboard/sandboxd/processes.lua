-- sandboxd's background processes (docs/sandboxd.md "Background processes"): a command started
-- through the same spawn point and the same walls as /exec (shell/run.lua run.start, the
-- instance's spawner), but not awaited by the request that started it. Its output goes into a
-- bounded tail per stream; its end is recorded. While it runs it holds its thread's instance
-- awake (one fleet acquisition), at most timeouts sandbox.process_awake_ms: at that deadline it
-- is ended like an /exec command at its own (TERM, then KILL after the grace). When the
-- instance sleeps (or is retired) every process of it ends with it, recorded "killed".
--
--   local reg = processes.new()
--   reg:start(ctx, snap, key, inst, {command, env}) → record | nil, status, why, reason
--   reg:list(key)                                    → {record, ...} (the newest last)
--   reg:get(key, id)                                 → record | nil
--   reg:kill(rec, wait_ms)                           → the record once ended (or wait_ms passed)
--   processes.document(rec)                          → the wire shape of a record
--   processes.match(method, path)                    → route name, id | nil (| false, allow)
--
-- Nothing here logs the command, its env or its output.
local core = require("switchboard.core")
local run = require("switchboard.shell.run")

local M = {}

-- policies/timeouts.lua sandbox: max_processes (running at once per thread), process_log_bytes
-- (the tail kept per stream), process_awake_ms (how long a running process keeps its instance
-- awake); a policy that predates them reads the schema's defaults (policy/schema.lua).
function M.limits(snap)
  local sb = snap.timeouts.sandbox
  return { max_processes = sb.max_processes, process_log_bytes = sb.process_log_bytes,
           process_awake_ms = sb.process_awake_ms }
end

-- Ended records kept per thread besides the running ones (the oldest ended go first).
local KEEP_ENDED = 16
-- The line a background command's shell writes first, so its pid (inside its PID namespace:
-- the engine hands a walled command to the spawner and never learns it) is known; it is taken
-- out of stdout before anything is kept.
local PID_MARK = "\0sbpid "

local function iso_now()
  local ms = math.floor(core.wall_ms and core.wall_ms() or os.time() * 1000)
  return os.date("!%Y-%m-%dT%H:%M:%S", ms // 1000) .. ("." .. ("%03dZ"):format(ms % 1000))
end

-- A tail of at most `limit` bytes: parts appended, the oldest bytes cut.
local function tail_new(limit) return { parts = {}, size = 0, limit = limit } end

local function tail_put(t, bytes)
  t.parts[#t.parts + 1] = bytes
  t.size = t.size + #bytes
  while t.size > t.limit do
    local first = t.parts[1]
    local excess = t.size - t.limit
    if #first <= excess then
      table.remove(t.parts, 1)
      t.size = t.size - #first
    else
      t.parts[1] = first:sub(excess + 1)
      t.size = t.size - excess
    end
  end
end

local function tail_text(t)
  if #t.parts > 1 then t.parts = { table.concat(t.parts) } end
  return t.parts[1] or ""
end
M.tail_new, M.tail_put, M.tail_text = tail_new, tail_put, tail_text

local Registry = {}
Registry.__index = Registry

function M.new()
  return setmetatable({ threads = {} }, Registry)
end

local function thread(self, key)
  local t = self.threads[key]
  if not t then
    t = { list = {}, by_id = {} }
    self.threads[key] = t
  end
  return t
end

local function running_count(t)
  local n = 0
  for _, rec in ipairs(t.list) do
    if rec.status == "running" then n = n + 1 end
  end
  return n
end

local function forget_old(t)
  local ended = 0
  for i = #t.list, 1, -1 do
    local rec = t.list[i]
    if rec.status ~= "running" then
      ended = ended + 1
      if ended > KEEP_ENDED then
        table.remove(t.list, i)
        t.by_id[rec.id] = nil
      end
    end
  end
end

-- Output of the process, as it comes: the pid mark out of stdout first, then into the tails
-- and to whoever follows the logs.
local function on_output(rec)
  local head = ""
  return function(stream, bytes)
    if stream == "stdout" and rec.pid == nil then
      head = head .. bytes
      if #head < #PID_MARK and PID_MARK:sub(1, #head) == head then return end
      local pid, rest = head:match("^%z" .. PID_MARK:sub(2) .. "(%d+)\n(.*)$")
      if head:sub(1, #PID_MARK) == PID_MARK and not pid then
        if #head < 64 then return end -- the mark's line is not whole yet
        rest = head
      end
      rec.pid = tonumber(pid) or false
      rec.pid_known:abort("pid")
      bytes = rest or head
      head = nil
      if bytes == "" then return end
    end
    tail_put(rec.tails[stream], bytes)
    for follower in pairs(rec.followers) do follower(stream, bytes) end
  end
end

-- The record's end, from the proc result.
local function ended(rec, r)
  rec.endedAt = iso_now()
  if rec.killed_by or (r and (r.aborted or r.timed_out)) then
    rec.status = "killed"
  elseif r and r.signal then
    rec.status = "killed"
  else
    rec.status = "exited"
  end
  rec.exitCode = r and r.exit or nil
  rec.signal = r and r.signal or nil
  if r and r.timed_out then rec.reason = "awake-limit" end
  if r and r.aborted and not rec.killed_by then rec.reason = "instance-slept" end
  if not rec.pid_known.aborted then rec.pid_known:abort("ended") end
  rec.done:abort("ended")
  for follower in pairs(rec.followers) do follower(nil) end
end

-- Starts the command in the thread's instance; `inst` is the fleet's, acquired by the caller:
-- on success the acquisition is the process's (released when it ends), on failure the caller
-- releases it.
function Registry:start(ctx, snap, key, inst, call)
  local limits = M.limits(snap)
  local t = thread(self, key)
  if running_count(t) >= limits.max_processes then
    return nil, 409, ("this thread already runs %d background processes, the most it may "
      .. "(timeouts sandbox.max_processes); end one first (DELETE /processes/<id>)")
      :format(limits.max_processes), "too-many-processes"
  end
  local runner = inst.runner
  local dir, err = runner:ensure()
  if not dir then return nil, 500, tostring(err and err.message or err), "workspace" end
  local ws = runner.ws
  local rec = {
    id = "p" .. core.crypto.hex(core.crypto.random_bytes(6)),
    command = call.command, status = "running", startedAt = iso_now(),
    tails = { stdout = tail_new(limits.process_log_bytes), stderr = tail_new(limits.process_log_bytes) },
    followers = {}, done = core.signal(), pid_known = core.signal(),
    stop = core.signal(ws.stopped), -- the instance's sleep ends it too
    started_ms = core.now_ms(),
  }
  local proc, spawn_err = run.start{
    command = "printf '\\0sbpid %d\\n' $$\n" .. call.command, env = call.env,
    cwd = not ws.walls and dir or nil, instance = ws.walls and ws.instance or nil,
    deadline_ms = limits.process_awake_ms, kill_grace_ms = snap.timeouts.bash.kill_grace_ms,
    max_output = 1, -- the tails below keep the output, the engine's capture nothing
    signal = rec.stop, on_output = on_output(rec),
  }
  if not proc then
    return nil, 500, "the process could not start: " .. tostring(spawn_err and spawn_err.message), "spawn"
  end
  t.list[#t.list + 1] = rec
  t.by_id[rec.id] = rec
  forget_old(t)
  core.go(function()
    local r = proc:wait()
    ended(rec, r)
    ctx.fleet:release(inst)
    ctx.log("debug", "sandboxd.process_ended", { instance = inst.label, process = rec.id,
      status = rec.status, exit = rec.exitCode })
  end)
  -- the answer carries the pid: the shell's first line, at once unless the instance is slow
  core.sleep(snap.timeouts.walls.ready_ms, rec.pid_known)
  return rec
end

-- Running processes of every thread (the switchboard_background_processes gauge).
function Registry:running()
  local n = 0
  for _, t in pairs(self.threads) do n = n + running_count(t) end
  return n
end

function Registry:list(key)
  local t = self.threads[key]
  return t and t.list or {}
end

function Registry:get(key, id)
  local t = self.threads[key]
  return t and t.by_id[id] or nil
end

function Registry:kill(rec, wait_ms)
  if rec.status == "running" then
    rec.killed_by = "request"
    rec.stop:abort("killed by DELETE /processes")
    core.sleep(wait_ms, rec.done)
  end
  return rec
end

function M.document(rec)
  return {
    id = rec.id, pid = rec.pid or nil, command = rec.command, status = rec.status,
    exitCode = rec.exitCode, signal = rec.signal, reason = rec.reason,
    startedAt = rec.startedAt, endedAt = rec.endedAt,
  }
end

-- A route table's answer for a request: name, arg — or nil (no route has the path), or false,
-- allow (a known path with another method: the methods it takes, for the 405's Allow). A route:
-- path (a pattern), methods (method → name), arg (true: the pattern's capture is the argument;
-- a function: that capture converted).
function M.route(routes, method, path)
  for _, r in ipairs(routes) do
    local captured = path:match(r.path)
    if captured then
      local name = r.methods[method]
      if not name then
        local allow = {}
        for m in pairs(r.methods) do allow[#allow + 1] = m end
        table.sort(allow)
        return false, table.concat(allow, ", ")
      end
      if r.arg == true then return name, captured end
      return name, r.arg and r.arg(captured) or nil
    end
  end
  return nil
end

local ROUTES = {
  { path = "^/processes$", methods = { POST = "start", GET = "list" } },
  { path = "^/processes/(p%x+)/logs$", methods = { GET = "logs" }, arg = true },
  { path = "^/processes/(p%x+)$", methods = { DELETE = "kill" }, arg = true },
}

-- The routes under /processes: name, id — or nil (not one of them), or false, allow.
function M.match(method, path) return M.route(ROUTES, method, path) end

return M

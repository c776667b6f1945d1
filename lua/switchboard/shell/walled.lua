-- Running a thread's work behind its instance's walls (docs/isolation.md): the runner-side
-- glue between a runner (sandboxd's, or the local executor's when policy asks) and
-- shell/instance.lua. A runner `r` has r.dir (its workspace on the host), r.walls (the host's
-- walls), r.stopped (its sleep signal) and r.network (nil = the policy's); this adds r.instance, r.handle (the workspace's
-- directory handle, opened once when the instance is made and held until it sleeps) and the
-- workspace-size state.
--
--   walled.ensure(r)          → dir | nil, err    the instance exists (made on first use)
--   walled.exec(r, spec)      → proc result | nil, err   as core.spawn's, with limit lines
--   walled.with_root(r, fn)   → fn(root)'s results      the held handle, as the instance's uid
--   walled.over_cap(r)        → err | nil               refusal while the workspace is too big
--   walled.stop(r)            every process gone, cgroups removed, the handle closed
local core = require("switchboard.core")
local instance = require("switchboard.shell.instance")
local run = require("switchboard.shell.run")

local M = {}

local function append_line(text, line)
  if text ~= "" and text:sub(-1) ~= "\n" then text = text .. "\n" end
  return text .. line .. "\n"
end

-- Instance starts at once, server-wide (policies/isolation.lua starts_at_once). Each start is
-- spawns and pipes on the event loop; a thousand threads arriving together would otherwise
-- start a thousand instances in one loop turn, and every running command's heartbeat would
-- wait for the whole turn (issue 28: gaps of 9-25 s at 2,000 commands). Waiting here yields, so
-- the loop turns over between starts.
local gate = { busy = 0, queue = {} }

-- A slot is handed from the task that leaves to the first in the queue (busy stays), so a
-- waiter is woken exactly once and never re-queued.
local function leave_gate()
  local turn = table.remove(gate.queue, 1)
  if turn then turn:abort("your turn") else gate.busy = gate.busy - 1 end
end

-- A closer that leaves the gate, or nil when `stop` (the runner's sleep) came first.
local function enter_gate(limit, stop)
  if gate.busy < limit then
    gate.busy = gate.busy + 1
  else
    local turn = core.signal()
    gate.queue[#gate.queue + 1] = turn
    local either = core.signal(turn, stop)
    while not turn.aborted and not stop.aborted do core.sleep(60000, either) end
    if not turn.aborted then -- stopped while waiting: out of the queue, no slot taken
      for i, t in ipairs(gate.queue) do
        if t == turn then table.remove(gate.queue, i) break end
      end
      return nil
    end
  end
  return setmetatable({}, { __close = leave_gate })
end

function M.ensure(r)
  if r.instance and r.instance.state == "ready" then return r.dir end
  if not r.instance then
    local ok, err = core.fs.mkdir_p(r.dir, tonumber("700", 8))
    if not ok then
      return nil, core.error("workspace", "the workspace could not be created: " .. tostring(err and err.message))
    end
    -- a spare built ahead when one fits this thread's network (the agent's, from the request)
    r.instance = r.walls:claim(r.dir, r.key, r.network)
  end
  local ok, err
  if r.instance.state ~= "ready" and not r.instance.starting then
    local slot <close> = enter_gate(r.instance.snap.isolation.starts_at_once, r.stopped)
    if not slot then return nil, core.error("workspace", "the instance is asleep") end
    ok, err = r.instance:start()
  else
    ok, err = r.instance:start()
  end
  if not ok then return nil, err end
  if not r.handle then
    -- Held from here on: a later swap of the host path (a symlink in its place) changes
    -- nothing for /read and /write, which go through this handle as the instance's uid.
    local root, root_err = core.fs.root(r.dir, r.instance:owner())
    if not root then return nil, core.error("workspace", tostring(root_err and root_err.message)) end
    r.handle = root
  end
  return r.dir
end

function M.over_cap(r)
  local iso = r.instance and r.instance.snap.isolation
  if not (iso and r.used_bytes and r.used_bytes > iso.workspace_max_bytes) then return nil end
  return core.error("too_large", ("refused: this sandbox's workspace holds %s, over its limit (%s) "
    .. "— policies/isolation.lua workspace_max_bytes; delete files to go on"):format(
      instance.size_text(r.used_bytes), instance.size_text(iso.workspace_max_bytes)))
end

-- The workspace's size, measured after a command (one measurement at a time, at most one per
-- MEASURE_EVERY_MS, off the command's path: a `du` per command would cost more than the
-- command); the answer gates the next command and write.
local MEASURE_EVERY_MS = 5000

local function measure(r)
  if r.measuring or (r.measured_ms and core.now_ms() - r.measured_ms < MEASURE_EVERY_MS) then return end
  r.measuring = true
  r.measured_ms = core.now_ms()
  core.go(function()
    local proc = core.spawn{ argv = { "du", "-s", "-x", "-P", "--block-size=1", r.dir },
      env = { PATH = os.getenv("PATH") }, deadline_ms = 60000, signal = r.stopped }
    local res = proc and proc:wait()
    local n = res and tonumber((res.stdout or ""):match("^(%d+)"))
    if n then r.used_bytes = n end
    r.measuring = false
  end)
end

function M.exec(r, spec)
  local dir, err = M.ensure(r)
  if not dir then return nil, err end
  local refused = M.over_cap(r)
  if refused then
    return { exit = 1, stdout = "", stderr = refused.message .. "\n", duration_ms = 0 }
  end
  local inst = r.instance
  local signal = spec.signal and core.signal(r.stopped, spec.signal) or r.stopped
  local before = inst:counters()
  local res, spawn_err = run.bash{
    command = spec.command, env = spec.env, deadline_ms = spec.deadline_ms,
    kill_grace_ms = spec.kill_grace_ms, max_output = spec.max_output, signal = signal,
    on_output = spec.on_output, instance = inst,
  }
  if not res then return nil, spawn_err end
  local why = inst:explain(before, res.exit)
  if why then res.stderr = append_line(res.stderr or "", why) end
  measure(r)
  return res
end

-- For /read and /write: the instance exists (its handle is opened with it); a write past the
-- workspace cap is refused.
function M.with_root(r, fn, writing)
  local dir, err = M.ensure(r)
  if not dir then return nil, err end
  return fn(r.handle)
end

function M.stop(r)
  if r.instance then r.instance:stop() end
  if r.handle then
    r.handle:close()
    r.handle = nil
  end
end

return M

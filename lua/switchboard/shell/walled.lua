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

-- How long a request waits for another request of its thread that is claiming the instance:
-- a claim waits at most for a spare's start (the helper's 60 s ready timeout).
local CLAIM_WAIT_MS = 120000

-- The thread's instance, claimed once: a claim may wait for a spare being built, and a second
-- request of the thread arriving meanwhile must wait for that claim, not make an instance of
-- its own — whose helper would take the workspace directory from the first instance's uid
-- ("walls: chdir /workspace: Permission denied") and live on with no runner.
local function claim(r)
  if r.claiming then
    core.sleep(CLAIM_WAIT_MS, core.signal(r.claiming, r.stopped))
    if r.instance then return true end
    return nil, core.error("workspace", "the thread's instance was not made: "
      .. (r.stopped.aborted and "the thread went to sleep" or "its other request's claim did not end"))
  end
  local ok, err = core.fs.mkdir_p(r.dir, tonumber("700", 8))
  if not ok then
    return nil, core.error("workspace", "the workspace could not be created: " .. tostring(err and err.message))
  end
  r.claiming = core.signal()
  local claiming <close> = setmetatable({}, { __close = function()
    local s = r.claiming
    r.claiming = nil
    s:abort("claimed")
  end })
  -- a spare built ahead when one fits this thread's network (the agent's, from the request)
  r.instance = r.walls:claim(r.dir, r.key, r.network)
  return true
end

function M.ensure(r)
  if r.instance and r.instance.state == "ready" then return r.dir end
  if not r.instance then
    local ok, err = claim(r)
    if not ok then return nil, err end
  end
  local ok, err = r.instance:start()
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

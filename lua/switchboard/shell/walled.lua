-- Running a thread's work behind its instance's walls (docs/isolation.md): the runner-side
-- glue between a runner (sandboxd's, or the local executor's when policy asks) and
-- shell/instance.lua, for a walled workspace (shell/workspace.lua). The workspace `r` has r.dir
-- (its directory on the host), r.walls (the host's walls), r.stopped (its stop signal),
-- r.network (nil = the policy's), r.existing (its files outlive its instances), r.ro_binds;
-- this adds r.instance, r.handle (the workspace's directory handle, opened once when the
-- instance is made and held until it stops), r.files_uid and the workspace-size state.
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

-- What the user reads when the thread's instance was replaced, by why.
local RETIRED = {
  dead = "this sandbox instance ended: every process in it was killed (a command such as "
    .. "`kill -9 -1`, or its memory limit). The thread's next command starts a fresh instance on "
    .. "the same /workspace files; /tmp, /dev/shm and background processes do not carry over",
  memory = "this sandbox's memory stayed full after the command was killed: files in /dev/shm or "
    .. "/tmp hold it (policies/isolation.lua memory_bytes). Its instance was replaced: /workspace "
    .. "is kept, /tmp and /dev/shm start empty",
}
M.RETIRED = RETIRED

local RETIRE_WAIT_MS = 60000 -- a bound only: stop's own waits are shorter

-- The instance can no longer run anything (its spawner is gone, or its memory is held by files
-- no kill frees): it is stopped — every process, its cgroups, and with its processes its
-- mount namespace — and the next ensure builds a fresh one on the same workspace, whose files
-- stay. Marked before the stop yields, so a request meanwhile builds the replacement; a caller
-- that finds it being retired waits until it is gone, so whoever says it is gone is right.

-- fields (optional): more for the log line; note (optional): what the command running in it
-- is told instead of RETIRED.dead (the instance's retired_note).
local function retire(r, why, old, fields, note)
  old = old or r.instance
  if not old then return end
  if old.retired then -- another task is retiring it: done when that one is
    core.sleep(RETIRE_WAIT_MS, old.retired)
    return
  end
  old.retired = core.signal()
  old.retired_note = note
  if r.lane_disarm then r.lane_disarm() end -- sandboxd's exec lane stops taking its commands
  local handle
  if r.instance == old then -- (else it was replaced already: nothing of the runner is its)
    r.instance, r.replacing = nil, true
    handle, r.handle = r.handle, nil
  end
  if r.log then
    local line = { instance = r.label, reason = why }
    for k, v in pairs(fields or {}) do line[k] = v end
    r.log("warn", "sandboxd.instance_retired", line)
  end
  old:stop()
  if handle then handle:close() end
  old.retired:abort("retired")
end
M.retire = retire

-- Its commands running now: the Lua path's and those of sandboxd's exec lane (r.lane_running,
-- set by sandboxd/lane.lua when it arms the instance).
local function running(r)
  return (r.running or 0) + (r.lane_running and r.lane_running() or 0)
end

-- Retired by sandboxd's file-table watch (sandboxd/file_table.lua): its processes held more of
-- the host's file table than its share. c: {files, cut (counting stopped there), share}. The
-- command running in it is told why; when none was, the thread's next command is.
function M.retire_over_files(r, old, c)
  local note = ("this sandbox instance was ended: its processes held %s%d of the host's file objects "
    .. "(open files, and files kept by mmap after their descriptor was closed), over its share of %d "
    .. "(policies/isolation.lua pids_max × open_files). The thread's next command starts a fresh "
    .. "instance on the same /workspace files; /tmp, /dev/shm and background processes do not carry over")
    :format(c.cut and "more than " or "", c.cut and c.share or c.files, c.share)
  if running(r) == 0 then r.notice = note end
  retire(r, "file_table", old, { files = c.files, share = c.share, counted_past_share = c.cut or nil }, note)
end

-- The workspace's files belong to its instance's uid. A fresh instance on an empty directory
-- has it already (the helper hands it the directory); a replacement, or a new instance of a
-- workspace whose files outlive its instances (r.existing), may have another uid: the files
-- become its own — once per change of uid.
local function hand_over(r)
  local uid = r.instance:owner().uid
  if r.files_uid == uid then return true end
  if r.files_uid == nil and not r.existing then
    r.files_uid = uid
    return true
  end
  -- (r.instance:files(): a workspace of its own file system is reached through the instance)
  local res = run.tool{ argv = { "chown", "-R", "-h", "-P", ("%d:%d"):format(uid, uid), "--", r.instance:files() },
    deadline_ms = r.instance.snap.timeouts.file_op.budget_ms }
  if not res or res.exit ~= 0 then
    return nil, core.error("workspace", "the workspace could not be handed to its instance's user (chown): "
      .. tostring(res and res.stderr or "chown did not start"):match("^[^\n]*"))
  end
  r.files_uid = uid
  return true
end

-- How long a request waits for another request of its thread that is claiming the instance:
-- a claim waits at most for a spare's start (timeouts walls.ready_ms), then its own.
local function claim_wait_ms(r) return 2 * r.walls:bounds().ready_ms end

-- The thread's instance, claimed once: a claim may wait for a spare being built, and a second
-- request of the thread arriving meanwhile must wait for that claim, not make an instance of
-- its own — whose helper would take the workspace directory from the first instance's uid
-- ("walls: chdir /workspace: Permission denied") and live on with no runner.
local function make(r)
  if r.replacing then -- the workspace is there, with the thread's files: no spare, no mkdir
    r.instance = r.walls:new(r.dir, r.key, nil, { network = r.network })
    r.instance.ro_binds = r.ro_binds
    return true
  end
  if r.claiming then
    core.sleep(claim_wait_ms(r), core.signal(r.claiming, r.stopped))
    if r.instance then return true end
    return nil, core.error("workspace", "the thread's instance was not made: "
      .. (r.stopped.aborted and "the thread went to sleep" or "its other request's claim did not end"))
  end
  r.claiming = core.signal()
  local claiming <close> = setmetatable({}, { __close = function()
    local s = r.claiming
    r.claiming = nil
    s:abort("claimed")
  end })
  -- (off the loop: 500 threads arriving together made 500 directories in one burst, up to
  -- 0.5 ms of the loop each on a busy disk; claiming is set first, as the mkdir yields)
  local ok, err = core.fs.mkdir_p_off_loop(r.dir, tonumber("700", 8))
  if not ok then
    return nil, core.error("workspace", "the workspace could not be created: " .. tostring(err and err.message))
  end
  if r.existing then -- the thread's files are there: never a spare renamed onto them
    r.instance = r.walls:new(r.dir, r.key, nil, { network = r.network })
    r.instance.ro_binds = r.ro_binds
  else -- a spare built ahead when one fits this thread's network (the agent's, from the request)
    r.instance = r.walls:claim(r.dir, r.key, r.network)
  end
  return true
end

-- Instance starts at once, server-wide (policies/isolation.lua starts_at_once). Each start is
-- spawns and pipes on the event loop; a thousand threads arriving together would otherwise
-- start a thousand instances in one loop turn, and every running command's heartbeat would
-- wait for the whole turn (issue 28: gaps of 9-25 s at 2,000 commands). Waiting here yields, so
-- the loop turns over between starts.
--
-- The queue is a ring of turns, first to last: entering, leaving and giving up are O(1) however
-- many wait (2,000 threads arriving together wait here).
local gate = { busy = 0, waiting = 0, first = 1, last = 0, turns = {}, given_up = {} }

-- A slot is handed from the task that leaves to the first in the queue (busy stays), so a
-- waiter is woken exactly once and never re-queued. A turn given up (its thread went to sleep
-- while waiting) stays in the queue, marked, and is passed over.
local function leave_gate()
  while gate.first <= gate.last do
    local turn = gate.turns[gate.first]
    gate.turns[gate.first] = nil
    gate.first = gate.first + 1
    if gate.given_up[turn] then
      gate.given_up[turn] = nil
    else
      gate.waiting = gate.waiting - 1
      turn:abort("your turn")
      return
    end
  end
  gate.busy = gate.busy - 1
end

-- A closer that leaves the gate, or nil when `stop` (the runner's sleep) came first.
local function enter_gate(limit, stop)
  if gate.busy < limit then
    gate.busy = gate.busy + 1
  else
    local turn = core.signal()
    gate.last = gate.last + 1
    gate.turns[gate.last] = turn
    gate.waiting = gate.waiting + 1
    local either = core.signal(turn, stop)
    while not turn.aborted and not stop.aborted do core.sleep(60000, either) end
    if not turn.aborted then -- stopped while waiting: out of the queue, no slot taken
      gate.given_up[turn] = true
      gate.waiting = gate.waiting - 1
      return nil
    end
  end
  return setmetatable({}, { __close = leave_gate })
end

local build_failed = instance.build_failed -- (a build that went wrong, not a refusal)

-- Starts waiting for a slot now, and starts running (/metrics switchboard_instance_starts,
-- sandboxd/load_gauges.lua, reads them when scraped).
function M.start_queue() return gate.waiting, gate.busy end

-- One start of the thread's instance through the gate: → true | nil, err.
local function gated_start(r, inst, attempt)
  local slot <close> = enter_gate(inst.snap.isolation.starts_at_once, r.stopped)
  if not slot then return nil, core.error("workspace", "the instance is asleep") end
  local ok, err = inst:start()
  -- the client's answer keeps only the reason's last words: the helper's and bwrap's own
  -- lines (why the kernel refused) are the operator's, in the log, once per failed build
  if not ok and r.log then
    local retry = attempt == 1 and build_failed(err) and not r.stopped.aborted
    r.log("warn", "sandboxd.instance_failed", { instance = r.label, error = err and err.message,
      retry = retry and 1 or nil, attempt = attempt })
  end
  return ok, err
end

-- The thread's instance failed to start (it is stopped): the next start builds a fresh one on
-- the same workspace — this request's retry, or the thread's next command.
local function forget_failed(r, inst)
  if r.instance == inst then r.instance, r.replacing = nil, true end
end

-- Starts r.instance; a build failure is retried once with a fresh instance, and only a second
-- failure reaches the client. Other requests of the thread wait on r.start_ended meanwhile.
local function start_instance(r)
  local inst = r.instance
  local ended = core.signal()
  r.start_ended = ended
  local ok, err = gated_start(r, inst, 1)
  if not ok and build_failed(err) and not r.stopped.aborted then
    forget_failed(r, inst)
    local mok, merr = make(r)
    if mok then
      inst = r.instance
      ok, err = gated_start(r, inst, 2)
    else
      err = merr
    end
  end
  if not ok then forget_failed(r, inst) end
  if r.start_ended == ended then r.start_ended = nil end
  ended:abort("started")
  return ok, err, inst
end

function M.ensure(r, waited)
  if r.instance and r.instance:dead() then retire(r, "dead") end
  if r.instance and r.instance.state == "ready" then
    if r.files_uid == nil then -- files made anew under an awake instance (files_remade)
      local ok, err = hand_over(r)
      if not ok then return nil, err end
    end
    return r.dir
  end
  if not r.instance then
    local ok, err = make(r)
    if not ok then return nil, err end
  end
  local inst = r.instance
  local ok, err
  if inst.state ~= "ready" and not inst.starting then
    ok, err, inst = start_instance(r)
  else
    ok, err = inst:start()
    -- another request of the thread is starting it, and may be retrying: its outcome is ours
    if not ok and r.start_ended and not waited then
      core.sleep(2 * inst.snap.timeouts.walls.ready_ms, core.signal(r.start_ended, r.stopped))
      if not r.stopped.aborted then return M.ensure(r, true) end
    end
  end
  if not ok then return nil, err end
  -- ended on its own later: retired at once, so nothing of it outlives it
  inst.on_exit = function() if r.instance == inst then retire(r, "dead", inst) end end
  if r.instance == inst then
    r.replacing = nil
    local hok, herr = hand_over(r)
    if not hok then return nil, herr end
  end
  if not r.handle then
    -- Held from here on: a later swap of the host path (a symlink in its place) changes
    -- nothing for /read and /write, which go through this handle as the instance's uid.
    local root, root_err = core.fs.root(r.instance:files(), r.instance:owner())
    if not root then return nil, core.error("workspace", tostring(root_err and root_err.message)) end
    r.handle = root
  end
  return r.dir
end

function M.over_cap(r)
  if r.instance and r.instance.disk then return nil end -- the kernel holds the limit: never gated
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
-- The engine's words when a walled command's socket ended without its wait status
-- (src/proc/supervise.c); the holder's exit may take timeouts walls.stop_ms to follow.
local LOST = "the sandbox instance ended while the command ran"

local function measure(r, snap)
  if r.instance and r.instance.disk then return end -- its own file system: the kernel counts
  if r.measuring or (r.measured_ms and core.now_ms() - r.measured_ms < MEASURE_EVERY_MS) then return end
  r.measuring = true
  r.measured_ms = core.now_ms()
  core.go(function()
    local res = run.tool{ argv = { "du", "-s", "-x", "-P", "--block-size=1", r.dir },
      deadline_ms = snap.timeouts.file_op.budget_ms, signal = r.stopped }
    local n = res and tonumber((res.stdout or ""):match("^(%d+)"))
    if n then r.used_bytes = n end
    r.measuring = false
  end)
end

-- What the kernel says when a write meets the end of the workspace's file system.
local FULL = { "No space left on device", "Disk quota exceeded" }
function M.full(text)
  for _, words in ipairs(FULL) do
    if type(text) == "string" and text:find(words, 1, true) then return true end
  end
  return false
end

function M.full_text(inst)
  return ("this sandbox's /workspace holds at most %s (policies/isolation.lua workspace_max_bytes); "
    .. "delete files to go on (rm always works)"):format(instance.size_text(inst.snap.isolation.workspace_max_bytes))
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
  -- an earlier instance retired while no command ran in it: this command's answer says so
  local notice = r.notice
  r.notice = nil
  r.running = (r.running or 0) + 1
  local res, spawn_err = run.bash{
    command = spec.command, env = spec.env, deadline_ms = spec.deadline_ms,
    kill_grace_ms = spec.kill_grace_ms, max_output = spec.max_output, signal = signal,
    on_output = spec.on_output, instance = inst,
  }
  r.running = r.running - 1
  if notice and res then res.stderr = append_line(res.stderr or "", "earlier: " .. notice) end
  if not res then
    r.notice = r.notice or notice -- (told with the answer that comes)
    -- the spawner did not answer: when its holder has ended (it follows its socket at once),
    -- the instance is retired and the command runs in a fresh one — once
    if inst.done and not spec.retried then core.sleep(inst.snap.timeouts.walls.stop_ms, inst.done) end
    if (inst:dead() or inst.retired) and not spec.retried then
      retire(r, "dead", inst)
      spec.retried = true
      return M.exec(r, spec)
    end
    return nil, spawn_err
  end
  return M.settle(r, inst, before, res)
end

-- What a command's end says beyond its own output: the limit it ran into (the counters
-- `before` it), a full workspace, the instance's end or a memory retire, said on its stderr
-- (res changed in place and returned). M.exec's tail, and sandboxd's exec lane's (a command
-- the lane ran whose outcome it hands back: sandboxd/lane.lua).
function M.settle(r, inst, before, res)
  local after = inst:counters() -- read once: for the words and the memory check below
  local why = inst:explain(before, res.exit, after)
  if why then res.stderr = append_line(res.stderr or "", why) end
  -- a write the workspace's file system refused: named in the user's terms (a full /tmp, a
  -- memory-backed tmpfs, says the same words; the line says which limit /workspace has)
  if inst.disk and res.exit ~= 0 and M.full(res.stderr) then
    res.stderr = append_line(res.stderr or "", "refused: no space left — " .. M.full_text(inst))
  end
  -- the socket ended without an answer: the spawner is gone, its holder's exit follows
  if inst.done and (res.stderr or ""):find(LOST, 1, true) then core.sleep(inst.snap.timeouts.walls.stop_ms, inst.done) end
  if inst:dead() or inst.retired then -- (retired already when its holder's exit came first)
    retire(r, "dead", inst)
    res.stderr = append_line(res.stderr or "", inst.retired_note or RETIRED.dead)
  elseif after.oom > before.oom and inst:memory_held_by_files() then
    retire(r, "memory", inst)
    res.stderr = append_line(res.stderr or "", RETIRED.memory)
  end
  measure(r, inst.snap)
  return res
end

-- For /read and /write: the instance exists (its handle is opened with it); a write past the
-- workspace's own file system fails in the kernel (ENOSPC, as a command's would), said in words.
function M.with_root(r, fn, writing)
  local dir, err = M.ensure(r)
  if not dir then return nil, err end
  local inst = r.instance
  local ok, ferr = fn(r.handle)
  if ok == nil and inst.disk and M.full(ferr and ferr.message) then
    return nil, core.error("too_large", "refused: the workspace is full, the file was not written — " .. M.full_text(inst))
  end
  return ok, ferr
end

function M.stop(r)
  if r.lane_disarm then r.lane_disarm() end
  if r.instance then r.instance:stop() end
  if r.handle then
    r.handle:close()
    r.handle = nil
  end
end

return M

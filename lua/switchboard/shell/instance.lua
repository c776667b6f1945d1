-- Walls around a sandbox instance (docs/isolation.md): its own user, PID, mount, IPC and UTS
-- namespaces (and network, for network = "none"), cgroups with the limits of
-- policies/isolation.lua, rlimits per process, and a host uid of its own. The C helper
-- switchboard-walls does the kernel work; this decides the paths, numbers and lifecycle.
--
--   local walls, err = instance.host{snap, helper?, log?, spares?, owner?}  -- once per server; err
--                                        (core.error kind "walls") names what the host lacks; code
--                                        "uids" when the host's uid registry is the obstacle
--   local inst = walls:new(workspace_dir, label, snap?, {network?}) -- nothing runs yet
--   local inst = walls:claim(workspace_dir, label, network?) -- the spare when it fits (below)
--   inst.ro_binds = {dir, ...}           (before start) host directories shown read-only at the
--                                        same path inside (the resident's shared git objects)
--   inst:start()  → true | nil, err      the namespaces and cgroups, on the first operation
--   inst:spawn_args(args) → args         core.spawn's arguments that run the command inside
--   inst:files() → path                  where the server reaches the workspace's files while the
--                                        instance is awake (its own file system: through the
--                                        instance's /proc root; else the host directory)
--   inst:argv(program_argv) → argv       the same through the `run` client (for diagnosis)
--   inst:counters() → {oom, pids}        the limit counters, before a command
--   inst:procs_file() → path             its processes' cgroup.procs (sandboxd/file_table.lua)
--   inst:explain(before, exit, after?) → text?   a line naming the limit a command hit, or nil
--   inst:stop()                          every process gone (cgroup kill), cgroups removed, its
--                                        loop device given back (shell/loop_devices.lua)
--   walls:close()                        the server's cgroup tree removed (every instance cgroup in
--                                        it, known or not) and its uid claim released
--   instance.close_all()                 every host of this process not closed yet, closed
--   walls:bounds()                       policies/timeouts.lua walls, of the policy current now
local core = require("switchboard.core")
local uids = require("switchboard.shell.uids")
local run = require("switchboard.shell.run")
local bridge = require("switchboard.shell.bridge")
local locale_view = require("switchboard.shell.locale_view")
local child_env = require("switchboard.shell.child_env")
local loop_devices = require("switchboard.shell.loop_devices")
local walls_dir = require("switchboard.shell.walls_dir")

local M = {}

local CONTROLLERS = { "memory", "pids", "cpu" }
-- The workspace's own file system (docs/isolation.md "Workspace size while writing"): an image
-- of this name inside the workspace's host directory, mounted over it for the instance only.
local DISK_IMAGE = ".workspace.img"
M.DISK_IMAGE = DISK_IMAGE
-- The first words of the helper's refusal when a workspace does not fit the host's disk
-- (src/walls/disk.c no_room; docs/isolation.md "The host's disk").
M.HOST_DISK_FULL = "the host's disk is full"

local Host = {}
Host.__index = Host
local build_spare -- below, with Host:claim
local Instance = {}
Instance.__index = Instance
-- Every host of this process not closed yet (M.close_all).
local open_hosts = setmetatable({}, { __mode = "k" })

-- Why this host cannot wall (the one error kind of M.host): the message says what to do.
local function cannot(message, fields) return core.error("walls", message, fields) end

-- A file's text, or nil (a /proc or cgroup file: read to its end, whatever its stat says).
local function read_text(path) return (core.fs.read_file(path)) end

local function gib(bytes)
  if bytes % (1024 * 1024 * 1024) == 0 then return ("%d GiB"):format(bytes // (1024 ^ 3)) end
  if bytes % (1024 * 1024) == 0 then return ("%d MiB"):format(bytes // (1024 ^ 2)) end
  return ("%d bytes"):format(bytes)
end
M.size_text = gib

-- The helper lives next to the switchboard binary.
local function find_helper()
  local env = os.getenv("SWITCHBOARD_WALLS_HELPER")
  if env and env ~= "" then return env end
  local exe = core.fs.realpath("/proc/self/exe")
  local dir = exe and exe:match("^(.*)/[^/]+$")
  return dir and (dir .. "/switchboard-walls") or nil
end

-- Where this process's cgroups are: {version = 1|2, dirs = {controller → dir}} or nil, why.
local function cgroup_layout(parent)
  local own = read_text("/proc/self/cgroup") or ""
  local function below(mount, path)
    if parent ~= "auto" then path = parent end
    return (mount .. path):gsub("/+$", "")
  end
  if core.fs.exists("/sys/fs/cgroup/cgroup.controllers") then
    local path = own:match("0::([^\n]*)") or "/"
    local base = below("/sys/fs/cgroup", path)
    local dirs = {}
    for _, c in ipairs(CONTROLLERS) do dirs[c] = base end
    return { version = 2, dirs = dirs, base = base }
  end
  local dirs, missing = {}, {}
  for _, c in ipairs(CONTROLLERS) do
    local mount = "/sys/fs/cgroup/" .. c
    local path
    for line in own:gmatch("[^\n]+") do
      local ctrls, p = line:match("^%d+:([^:]*):(.*)$")
      for name in (ctrls or ""):gmatch("[^,]+") do
        if name == c then path = p end
      end
    end
    if core.fs.exists(mount .. "/cgroup.procs") and path then
      dirs[c] = below(mount, path)
    else
      missing[#missing + 1] = c
    end
  end
  if #missing > 0 then
    return nil, cannot("the cgroup v1 controller(s) " .. table.concat(missing, ", ")
      .. " are not mounted at /sys/fs/cgroup/<controller> (and there is no cgroup v2)")
  end
  return { version = 1, dirs = dirs }
end

-- The walls' bounds (policies/timeouts.lua walls) of the policy current now.
local function bounds(self)
  return (self.snap_fn and self.snap_fn() or self.snap).timeouts.walls
end
Host.bounds = bounds

-- Runs the helper to its end; returns the result.
local function run_helper(self, args)
  local argv = { self.helper }
  for _, a in ipairs(args) do argv[#argv + 1] = a end
  local proc, err = core.spawn{ argv = argv, env = { PATH = self.path }, deadline_ms = bounds(self).helper_ms }
  if not proc then return { exit = 127, stderr = tostring(err and err.message), stdout = "" } end
  return proc:wait()
end

-- The helper takes at most 64 --cgroup per run (src/walls/walls.h MAX_LIST): a tree is reaped in
-- runs of this many, so that a killed server with hundreds of instances is swept whole.
local REAP_BATCH = 64

-- One server's cgroup tree in one hierarchy, `base`/switchboard-<pid>: every instance cgroup
-- (i<N>) emptied and removed, children first, then the server's directory (the helper's reap:
-- whatever still runs in one is killed). → how many instance cgroups went, and the helper's
-- words when something stayed.
local function reap_tree(self, base, name)
  local dir = base .. "/" .. name
  local instances = {}
  for _, inst in ipairs(core.fs.list(dir) or {}) do
    if type(inst) == "table" then inst = inst.name end
    if type(inst) == "string" and inst:match("^i%d+$") then instances[#instances + 1] = dir .. "/" .. inst end
  end
  local said
  local function run(paths)
    local args = { "reap" }
    for _, path in ipairs(paths) do args[#args + 1] = "--cgroup"; args[#args + 1] = path end
    local r = run_helper(self, args)
    if r.exit ~= 0 and not said then said = (r.stderr or ""):match("[^\n]+") or ("status " .. tostring(r.exit)) end
  end
  -- the server's directory last, once its children are gone (runs go in order)
  local paths = table.move(instances, 1, #instances, 1, {})
  paths[#paths + 1] = dir
  for first = 1, #paths, REAP_BATCH do
    run(table.move(paths, first, math.min(first + REAP_BATCH - 1, #paths), 1, {}))
  end
  local removed = 0
  for _, path in ipairs(instances) do
    if not core.fs.exists(path) then removed = removed + 1 end
  end
  return removed, said
end

-- The hierarchies' directories where this server makes its own tree, each once (v2: one).
local function bases(self)
  local out, seen = {}, {}
  for _, c in ipairs(CONTROLLERS) do
    local base = self.layout.dirs[c]
    if not seen[base] then seen[base] = true; out[#out + 1] = base end
  end
  return out
end

-- The cgroup trees of walled servers that are gone (docs/isolation.md "Cgroups of a server that
-- is gone"): a kill -9, the OOM killer, a process ended before its close. Each instance cgroup
-- costs the kernel ~470 KB that nothing else frees (22,000 of them held 10.5 GB here). Only
-- directories named exactly switchboard-<pid>, under the parents where this server makes its
-- own; a tree is live while the host's uid registry (shell/uids.lua) holds a live claim of that
-- pid (a server claims before it makes its tree and releases after removing it) — so a pid
-- reused by another process (pid_max 32,768 here) no longer keeps a dead tree, and a live
-- server's is never touched, whatever its binary (a spec's in-process host runs in lua). An
-- instance cgroup that still has members holds an orphan of the dead server: reap kills them
-- (no server answers for them; their uid block is free for the next claim). Runs in the
-- background (22,000 rmdirs took ~9 s); one line says what went.
local function sweep(self)
  local trees, instances, failures = 0, 0, {}
  for _, base in ipairs(bases(self)) do
    for _, name in ipairs(core.fs.list(base) or {}) do
      if type(name) == "table" then name = name.name end
      local pid = tonumber(type(name) == "string" and name:match("^switchboard%-(%d+)$"))
      -- the registry read after the tree was seen, each time: a server that made its tree
      -- claimed before, so its claim is there now unless it is gone (read once before the
      -- listing, a server started meanwhile had its tree taken for a dead one: its start
      -- failed "cannot create the cgroup …/switchboard-<pid>/i1")
      if pid and pid ~= self.pid and not uids.live_pids(self.uid_registry)[pid] then
        local removed, said = reap_tree(self, base, name)
        instances = instances + removed
        if said then failures[#failures + 1] = base .. "/" .. name .. ": " .. said else trees = trees + 1 end
      end
    end
  end
  if trees > 0 or instances > 0 or #failures > 0 then
    self.log(#failures > 0 and "warn" or "info", "walls.cgroups_swept", { trees = trees, instances = instances,
      failed = #failures > 0 and table.concat(failures, "; ") or nil })
  end
end

-- A killed server's walls directory and loop devices (shell/walls_dir.lua): its recorded devices
-- are handed to our keeper (recorded as ours first), given back by the same rules as our own
-- (the pool, the kernel's EBUSY for one in use); its directory removed. One line says what went.
local function sweep_dead_servers(self, euid)
  local kept = self.snap.isolation.loop_devices_kept
  local swept = walls_dir.sweep{ pid = self.pid, euid = euid, path = self.path,
    deadline_ms = bounds(self).helper_ms, adopt = function(n) self.loops:adopt(n, kept) end }
  if swept.dirs + swept.devices + swept.mounted > 0 then
    self.log(swept.mounted > 0 and "warn" or "info", "walls.swept", { dirs = swept.dirs,
      devices = swept.devices, mounted = swept.mounted > 0 and swept.mounted or nil })
  end
end

-- Checks what the walls need, then proves it with a real instance (namespaces, cgroups, enter).
-- opts: snap (policy snapshot), helper?, log?, scratch (a directory for the proof's workspace).
function M.host(opts)
  local iso = opts.snap.isolation
  local helper = opts.helper or find_helper()
  if not helper or not core.fs.exists(helper) then
    return nil, cannot("the walls helper switchboard-walls is not next to the switchboard binary "
      .. "(build it: cmake --build build)")
  end
  local path = os.getenv("PATH") or "/usr/bin:/bin"
  local has_bwrap = false
  for dir in path:gmatch("[^:]+") do
    if core.fs.exists(dir .. "/bwrap") then has_bwrap = true end
  end
  if not has_bwrap then return nil, cannot("bwrap is not installed (apt-get install bubblewrap)") end
  if not core.fs.exists("/proc/self/ns/user") then
    return nil, cannot("this kernel has no user namespaces (CONFIG_USER_NS)")
  end
  local max_userns = tonumber((read_text("/proc/sys/user/max_user_namespaces") or ""):match("%d+"))
  if max_userns == 0 then return nil, cannot("user namespaces are disabled (user.max_user_namespaces = 0)") end
  -- The helper gives each instance a host uid of its own (setresuid), its cgroups and its
  -- workspace (chown): as a service user (switchboard-bot.service's User=) every step fails,
  -- so say the cause here rather than the first step's errno.
  local euid = tonumber((read_text("/proc/self/status") or ""):match("\nUid:%s+%d+%s+(%d+)"))
  if euid and euid ~= 0 then
    return nil, cannot(("the walls need root, and this process runs as uid %d (each instance gets a host "
      .. "uid, cgroups and a workspace of its own)"):format(euid))
  end
  local layout, why = cgroup_layout(iso.cgroup_parent)
  if not layout then return nil, why end
  local self = setmetatable({
    helper = helper, path = path, log = opts.log or function() end, layout = layout,
    pid = core.pid and core.pid() or tonumber((read_text("/proc/self/stat") or ""):match("^(%d+)")),
    slots = {}, next_slot = 0, snap_fn = opts.policy, snap = opts.snap, live = {}, spares = {},
    spares_on = opts.spares == true, -- spare instances built ahead (Host:claim)
    -- each workspace a file system of workspace_max_bytes of its own, so the kernel refuses a
    -- write past it while the command writes: only where the caller asks (sandboxd, whose
    -- workspaces are new and live as long as their thread is awake; the resident's worktrees
    -- are long-lived directories of the host and keep the measured size)
    disks = opts.disks == true,
  }, Host)
  -- This server's block of host uids, registered so that no other walled server on the host
  -- takes the same (shell/uids.lua); fixed until close, whatever a reload says.
  local claim, claim_why = uids.claim{ base = iso.uid_base, count = iso.uid_count, blocks = iso.uid_blocks,
    owner = opts.owner, dir = opts.uid_registry }
  if not claim then return nil, claim_why end
  self.uid_claim = claim
  self.uid_registry = opts.uid_registry
  -- The instances' spawner sockets and the record of its loop devices: a directory of the
  -- server's own, 0700, outside every instance's view (instances get a private /tmp; /run is
  -- not exposed); short, for sun_path's 108 bytes (shell/walls_dir.lua says where).
  local wdir, wdir_why = walls_dir.open{ pid = self.pid }
  if not wdir then
    claim:release()
    return nil, cannot(wdir_why.message)
  end
  self.walls_dir, self.socket_dir = wdir, wdir.path
  self.devices = {} -- device number → the ready instance mounted from it
  -- the devices its instances' workspaces were attached to
  self.loops = loop_devices.new(self.log, wdir.records, function(n) return self.devices[n] ~= nil end)
  open_hosts[self] = true -- closed by M.close_all at the latest
  self.root = opts.scratch -- the server's --root
  self.server_dirs = {}
  for _, c in ipairs(CONTROLLERS) do
    self.server_dirs[c] = layout.dirs[c] .. "/switchboard-" .. self.pid
  end
  self.swept = core.signal() -- aborted when the sweep of dead servers' trees is over
  core.go(function() sweep(self); self.swept:abort("swept") end)
  for _, c in ipairs(CONTROLLERS) do
    local ok, err = core.fs.mkdir_p(self.server_dirs[c], tonumber("755", 8))
    if not ok then
      wdir:close()
      claim:release()
      return nil, cannot(("cannot create the cgroup %s: %s (sandboxd needs to be root, or cgroup_parent "
        .. "in policies/isolation.lua must name a cgroup delegated to it)"):format(
          self.server_dirs[c], tostring(err and err.message)), { cause = err })
    end
  end
  if layout.version == 2 then
    -- v2 hands controllers down explicitly; the server directory holds no process itself.
    local f = io.open(self.server_dirs.memory .. "/cgroup.subtree_control", "w")
    local ok = f and f:write("+memory +pids +cpu") and f:close()
    if not ok then
      self:close()
      return nil, cannot("cgroup v2: cannot enable memory, pids and cpu below " .. self.server_dirs.memory
        .. " (enable them in the parent's cgroup.subtree_control, or set cgroup_parent)")
    end
  end
  sweep_dead_servers(self, euid or 0)
  if opts.scratch then
    -- bwrap, as the instance's uid, resolves its workspace's path: the root must be
    -- traversable (not listable); each workspace stays 0700 and its own uid's.
    local cr = run.tool{ argv = { "chmod", "0711", opts.scratch }, env = { PATH = path },
      deadline_ms = bounds(self).helper_ms }
    if not cr or cr.exit ~= 0 then
      self:close()
      return nil, cannot("cannot make " .. opts.scratch .. " traversable (chmod 0711)")
    end
    -- the host's locales with an archive, shown at /usr/lib/locale in each instance where the
    -- host has none (shell/locale_view.lua says why); over the host's own /usr only, when shown
    local shows_usr = false
    for _, name in ipairs(iso.expose) do shows_usr = shows_usr or name == "usr" end
    if iso.rootfs == "/" and shows_usr then
      local view, lwhy = locale_view.prepare(opts.scratch, self.pid, bounds(self).helper_ms)
      self.locale = view
      self.log(view and "info" or "debug", "walls.locale", view and { archive = view.dir } or { host = tostring(lwhy) })
    end
    -- sandboxd's instances reach outside through a bridge where it can make one (policies/
    -- isolation.lua outbound; shell/bridge.lua), else through pasta, one process each
    if self.spares_on then
      -- a killed server of this root left its bridges and table: removed whatever outbound is now
      local swept, sweep_why = bridge.sweep{ root = opts.scratch, helper = helper, path = path,
        deadline_ms = bounds(self).helper_ms }
      if not swept or #swept > 0 then
        self.log(swept and "info" or "warn", "walls.bridge_swept", swept and { removed = table.concat(swept, " ") }
          or { error = tostring(sweep_why) })
      end
      local b, why = bridge.open{ iso = iso, root = opts.scratch, helper = helper, path = path,
        deadline_ms = bounds(self).helper_ms, scratch = self.socket_dir, uid_count = claim.count }
      if not b and iso.outbound == "bridge" then
        self:close()
        return nil, cannot('policies/isolation.lua outbound is "bridge", but ' .. tostring(why))
      end
      self.bridge = b
      self.log("info", "walls.outbound", b and { mode = "bridge", bridge = b.name, subnet = b.subnet }
        or { mode = "pasta", why = tostring(why) })
    end
    local ok, err = self:prove(opts.snap, opts.scratch)
    if not ok then
      self:close()
      return nil, err
    end
    build_spare(self, opts.scratch) -- the first thread's instance is ready before it asks
  end
  return self
end

-- Whether a failed start was a build of the walls that went wrong — the helper ran, and it or
-- bwrap could not finish the instance (a kernel's transient refusal under a burst of starts,
-- such as "bwrap: loopback: Failed RTM_NEWADDR: No child processes") — worth one more try with a
-- fresh instance; not a refusal, which a retry cannot change: the instance asleep, the host's
-- disk full (code "host-disk-full"), every host uid of the block taken, the helper not started.
-- A helper that did not answer within walls.ready_ms is not retried either: the host is too
-- busy to start instances, and a second start would add to it.
function M.build_failed(err)
  local message = type(err) == "table" and err.code == nil and tostring(err.message) or ""
  return message:find("the instance's walls could not be built:", 1, true) == 1
    and not message:find("did not answer within", 1, true)
end

-- One real instance, one command inside it: the only honest answer to "can this host wall?".
function Host:prove(snap, scratch)
  local dir = scratch .. "/.walls-probe-" .. core.crypto.hex(core.crypto.random_bytes(4))
  local ok, err = core.fs.mkdir_p(dir, tonumber("700", 8))
  if not ok then return nil, cannot("cannot make " .. dir .. ": " .. tostring(err and err.message), { cause = err }) end
  local inst = self:new(dir, "probe", snap)
  local started, start_err = inst:start()
  if not started and M.build_failed(start_err) then -- once more, as a thread's start (M.build_failed)
    inst:stop()
    inst = self:new(dir, "probe", snap)
    started, start_err = inst:start()
  end
  local result
  if started then
    local proc = core.spawn(inst:spawn_args{ argv = { "sh", "-c", "test -d /workspace && test ! -e /proc/1/environ -o -r /proc/1/environ" },
      env = { PATH = self.path }, deadline_ms = snap.timeouts.walls.probe_ms })
    result = proc and proc:wait()
  end
  inst:stop()
  core.fs.remove_tree(dir)
  if not started then return nil, cannot(start_err.message, { cause = start_err }) end
  if not result or result.exit ~= 0 then
    return nil, cannot("a command could not enter a test instance: " .. tostring(result and result.stderr))
  end
  return true
end

local function take_slot(self, count)
  for _ = 1, count do
    local n = self.next_slot % count
    self.next_slot = self.next_slot + 1
    if not self.slots[n] then
      self.slots[n] = true
      return n
    end
  end
  return nil
end

-- snap: the policy snapshot the instance keeps for its life. opts.network: "host" | "none"
-- for this instance (the agent's, from the request), else the snapshot's isolation.network.
function Host:new(workspace_dir, label, snap, opts)
  local inst = setmetatable({
    host = self, dir = workspace_dir, label = label, snap = snap or self.snap_fn(), state = "new",
    network = opts and opts.network or nil,
  }, Instance)
  inst.disk = self.disks and inst.snap.isolation.workspace_size ~= "measured"
  return inst
end

-- A spare that a new thread claimed while it was being built, and whose build failed: the
-- thread builds an instance of its own instead (Host:claim, failed.successor). The spare's retry
-- waits until that instance's start has settled, up to walls.ready_ms — built beside it, the
-- spare nobody is waiting for could take the room a waiting thread needs (a host's disk with
-- room for one workspace: the retried spare's image made first, and the thread refused "the
-- host's disk is full": the likely cause of e2e/walls_disk's run with both threads refused
-- under a plain retry, ae7684e).
local function await_successor(self, failed)
  local deadline = core.now_ms() + bounds(self).ready_ms
  while not self.closed and core.now_ms() < deadline do
    local own = failed.successor
    if own and (own.state == "ready" or own.state == "stopped") then return end
    core.sleep(50)
  end
end

-- Spare instances (policies/isolation.lua spare_instances): building an instance costs
-- 15-20 ms on a quiet host, most of it the kernel's (the first cgroup-v1 attach waits an RCU
-- grace period; bwrap's two dozen mounts; its init's exec), and much more under load. So the
-- server keeps spare_instances of them built ahead, each on a workspace of its own in the
-- same root (".spare-<16 hex>", swept at start like any leftover workspace), and a new thread
-- takes one: its workspace directory is renamed onto the thread's (the bind mount follows the
-- directory, not its name), and a replacement is built in the background. A spare built under
-- an older policy snapshot or another network is not used (it is stopped; the thread's
-- instance is built as before). Only where the caller asks (instance.host{spares = true}:
-- sandboxd, whose new threads start on empty workspaces in its root).
function build_spare(self, root)
  if self.refilling or self.closed or not self.spares_on then return end
  local want = self.snap_fn and (self.snap_fn().isolation.spare_instances or 0) or 0
  if #self.spares >= want then return end
  self.refilling = true
  core.go(function()
    local attempt = 0
    while not self.closed and #self.spares < want do
      local snap = self.snap_fn()
      local dir = ("%s/.spare-%s"):format(root, core.crypto.hex(core.crypto.random_bytes(8)))
      local inst, err, claimed
      local made, mkdir_err = core.fs.mkdir_p(dir, tonumber("700", 8))
      if made then
        inst = self:new(dir, "spare", snap)
        inst.spare = true
        self.building = inst
        local ok
        ok, err = inst:start()
        self.building = nil
        -- a failed start has stopped its instance (launch); its image is no loop device's
        -- by then (20 of 20 failed starts with an image, beside stress-ng at load 39)
        if not ok and not inst.claimed then
          inst:stop(); core.fs.remove_tree(dir)
        end
        if not ok then inst, claimed = nil, inst.claimed and inst or nil end
      else
        err = core.error("workspace", "cannot create " .. dir .. ": " .. tostring(mkdir_err and mkdir_err.message))
      end
      if not inst then
        -- said with the helper's and bwrap's words (a build that went wrong under load, such as
        -- bwrap's "loopback: Failed RTM_NEWADDR: No child processes"), and tried once more as a
        -- thread's own start is (M.build_failed); a refusal or a second failure leaves it to the
        -- next claim — a host that cannot build one now
        attempt = attempt + 1
        local retry = attempt == 1 and M.build_failed(err) and not self.closed
        self.log("warn", "walls.spare_failed", { error = err and err.message, retry = retry and 1 or nil,
          attempt = attempt })
        if not retry then break end
        if claimed then await_successor(self, claimed) end
        goto next_spare
      end
      attempt = 0
      if self.closed and not inst.claimed then
        inst:stop(); core.fs.remove_tree(dir)
      elseif not inst.claimed then
        self.spares[#self.spares + 1] = inst
      end
      ::next_spare::
    end
    self.refilling = false
  end)
end

local function discard(inst)
  core.go(function()
    inst:stop()
    core.fs.remove_tree(inst.dir)
  end)
end

-- The instance for a new thread's workspace (an empty directory the caller just made): a spare
-- renamed onto it when one fits, else a new one (started on first use, as from new).
function Host:claim(workspace_dir, label, network)
  local snap = self.snap_fn()
  local root = workspace_dir:match("^(.*)/[^/]+$")
  local inst, failed_build
  local building = self.building
  if #self.spares == 0 and building and building.snap == snap and not building.claimed then
    -- one is being built: waiting for it is never slower than building another beside it
    building.claimed = true
    if building:start() then self.spares[1] = building else failed_build = building; discard(building) end
  end
  while #self.spares > 0 and not inst do
    local spare = table.remove(self.spares, 1)
    local fits = spare.snap == snap and spare.state == "ready"
      and (network or snap.isolation.network) == (spare.network or spare.snap.isolation.network)
      and spare.dir:match("^(.*)/[^/]+$") == root
    if fits and os.rename(spare.dir, workspace_dir) then
      spare.dir, spare.label, spare.network, spare.spare = workspace_dir, label, network, nil
      inst = spare
    else
      discard(spare)
    end
  end
  inst = inst or self:new(workspace_dir, label, snap, { network = network })
  if failed_build then failed_build.successor = inst end -- the spare's retry waits for it
  if root and root ~= "" then build_spare(self, root) end
  return inst
end

-- "FIRST-LAST": the host uids this server's instances take (for its start line).
function Host:uid_range()
  local c = self.uid_claim
  return ("%d-%d"):format(c.base, c.base + c.count - 1)
end

-- The devices of the instances just stopped, and of holders that failed before saying theirs
-- (recorded, never told): given back within timeouts walls.loops_ms. Whatever is still queued then (a
-- mount the kernel has not released yet) stays recorded, with the directory, for the next start.
local function close_loops(self)
  local kept = self.snap.isolation.loop_devices_kept
  for _, n in ipairs(self.walls_dir:recorded()) do
    if not self.devices[n] then self.loops:release(n, kept) end
  end
  local pending = self.loops:close(bounds(self).loops_ms)
  local removed, left = self.walls_dir:close()
  if not removed then
    self.log("warn", "walls.loops_recorded", { devices = table.concat(pending, " "), records = left,
      dir = self.walls_dir.path, why = (#pending > 0 and "not given back within timeouts walls.loops_ms"
        or "its instances still had them") .. ": the next start gives them back" })
  end
end

function Host:close()
  if self.reaped then return end
  self.closed = true
  for _, spare in ipairs(self.spares) do
    spare:stop()
    core.fs.remove_tree(spare.dir)
  end
  self.spares = {}
  local building = self.building
  if building and not building.claimed then -- killed mid-build: its start returns a failure
    building:stop()
    core.fs.remove_tree(building.dir)
  end
  if self.bridge then self.bridge:close() end
  close_loops(self)
  if self.locale then locale_view.remove(self.locale) end
  -- every instance cgroup of the tree, not only those of instances it still knows: one whose
  -- stop's reap failed, or whose owner never stopped it (the local executor's, at exit)
  self.reaped = true
  for _, base in ipairs(bases(self)) do
    local _, said = reap_tree(self, base, "switchboard-" .. self.pid)
    if said then self.log("warn", "walls.cgroups_left", { tree = base .. "/switchboard-" .. self.pid, error = said }) end
  end
  open_hosts[self] = nil
  -- released last: while the claim is live, no other server's sweep takes this tree for a dead one
  if self.uid_claim then self.uid_claim:release() end
end

-- Closes every host this process opened and has not closed: its instances' processes killed and
-- its cgroup trees removed. For a process that ends without closing its walls itself (the local
-- executor's hosts, one per workspace root, live as long as the process: `switchboard exec`,
-- console and the Slack front call this when they are done).
function M.close_all()
  local hosts = {}
  for host in pairs(open_hosts) do hosts[#hosts + 1] = host end
  for _, host in ipairs(hosts) do host:close() end
end

local function cgroup_args(self)
  local args = {}
  local seen = {}
  for _, c in ipairs(CONTROLLERS) do
    if not seen[self.cgroups[c]] then
      seen[self.cgroups[c]] = true
      args[#args + 1] = "--cgroup"; args[#args + 1] = self.cgroups[c]
    end
  end
  return args
end

local function limit_writes(self)
  local iso, v2, cg = self.snap.isolation, self.host.layout.version == 2, self.cgroups
  local w = {}
  local function set(dir, file, value) w[#w + 1] = "--cg-write"; w[#w + 1] = dir .. "/" .. file .. "=" .. value end
  if v2 then
    set(cg.memory, "memory.max", tostring(iso.memory_bytes))
    set(cg.memory, "memory.swap.max", "0")
    set(cg.pids, "pids.max", tostring(iso.pids_max))
    set(cg.cpu, "cpu.max", ("%d 100000"):format(iso.cpu_percent * 1000))
  else
    set(cg.memory, "memory.limit_in_bytes", tostring(iso.memory_bytes))
    set(cg.pids, "pids.max", tostring(iso.pids_max))
    set(cg.cpu, "cpu.cfs_period_us", "100000")
    set(cg.cpu, "cpu.cfs_quota_us", tostring(iso.cpu_percent * 1000))
  end
  return w
end

-- The whole text of a held file, read again from its start (nil when it cannot be read: a
-- process gone reads as an error): one pread in the engine (core.fs.reread), not a seek and
-- two reads through stdio — it runs six times per command.
local function reread(f)
  if not f then return nil end
  return core.fs.reread(f)
end

-- The stat line's fields after the state, up to the start time (field 22), as one pattern.
local START_TIME = "^" .. ("%S+ "):rep(18) .. "(%d+)"

-- The init's pid namespace dies with it — a fork into it fails from then on — before bwrap and
-- the holder have noticed; so the init itself is looked at too (its /proc entry, the same
-- process by its start time, not a zombie: one small read; once the instance is awake, a poll
-- of its pidfd instead, dead()).
local function init_state(pid, held)
  local stat
  if held then
    stat = reread(held)
  else
    local f = pid and io.open("/proc/" .. pid .. "/stat", "r")
    stat = f and f:read("a")
    if f then f:close() end
  end
  if not stat then return nil end
  local state, rest = stat:match("^%d+ %b() (%S) (.*)$")
  local start = rest and rest:match(START_TIME)
  return state, start
end

-- Why the holder ended before "ready", in words: its own "walls:" line, else how it ended (a
-- signal — killed from outside, or its parent thread gone — or a bare exit status), never "".
local function hold_failure(r, ready_ms)
  if not r then
    return ("the walls helper did not answer within %g s (policies/timeouts.lua walls.ready_ms)"):format(ready_ms / 1000)
  end
  local said = (r.stderr or ""):gsub("^%s+", ""):gsub("%s+$", "")
  if said ~= "" then return said end
  if r.signal then
    return ("the walls helper was killed by signal %d and said nothing (see the server's log "
      .. "and the kernel's: dmesg)"):format(r.signal)
  end
  return ("the walls helper exited with status %s and said nothing"):format(tostring(r.exit))
end

-- The interface of the host's IPv4 default route (/proc/net/route; the lowest metric wins).
-- An instance with network "host" has pasta's sockets bound to it (docs/isolation.md "An
-- instance's own network"): there the host's addresses on its other interfaces (a container
-- bridge's) are not local, so a command cannot reach what the host listens on through them. nil
-- where the host has no such route (pasta, IPv4 only, then refuses to start and says why).
local function default_route_interface()
  local f = io.open("/proc/net/route", "r")
  if not f then return nil end
  local best, best_metric
  for line in f:lines() do
    local name, dest, flags, metric, mask =
      line:match("^(%S+)%s+(%x+)%s+%x+%s+(%x+)%s+%d+%s+%d+%s+(%d+)%s+(%x+)")
    if name and dest == "00000000" and mask == "00000000" and tonumber(flags, 16) & 1 == 1
        and (not best or tonumber(metric) < best_metric) then
      best, best_metric = name, tonumber(metric)
    end
  end
  f:close()
  return best
end

-- A pidfd of the init (core.pid_watch) is held open while the instance is awake: the init's
-- death is seen without a /proc walk. The two cgroup counter files are opened per read (an open
-- and a close each, per command): held, they cost two descriptors per awake instance in
-- sandboxd's budget (sandboxd/descriptors.lua), and with them 2,000 instances no longer fit in
-- a 20,000 open-files limit; opened per read, the CPU per request moved by less than the run's
-- noise (bench/README.md "sandboxd's descriptors per instance").
local function counter_paths(self)
  local cg, v2 = self.cgroups, self.host.layout.version == 2
  return cg.memory .. (v2 and "/memory.events" or "/memory.oom_control"), cg.pids .. "/pids.events"
end

local function hold_files(self)
  self.held = { init = core.pid_watch(self.pid) }
end

local function release_files(self)
  for _, f in pairs(self.held or {}) do f:close() end
  self.held = nil
end

-- Creates the namespaces and cgroups (once; later calls return at once). Waits for the
-- helper's "ready <pid>".
local launch, holder_exited -- below: the helper started and its "ready" awaited; its end heard

function Instance:start()
  if self.state == "ready" then return true end
  if self.state == "stopped" then return nil, core.error("workspace", "the instance is asleep") end
  if self.starting then
    core.sleep(self.snap.timeouts.walls.ready_ms, self.starting)
    -- the helper's line (or its end) wakes every waiter at once, this one maybe before the task
    -- that starts the instance, which then settles the state (core.spawn yields to it: a waiter
    -- can come first): its verdict, not the line, is the answer
    if self.starting.aborted then core.sleep(self.snap.timeouts.walls.ready_ms, self.settled) end
    if self.state == "ready" then return true end
    return nil, self.start_err
  end
  local host = self.host
  local block = host.uid_claim
  self.slot = take_slot(host, block.count)
  if not self.slot then
    return nil, core.error("workspace", ("every host uid of this server's block (%d + %d: policies/isolation.lua "
      .. "uid_base, uid_count) is taken by an awake instance"):format(block.base, block.count))
  end
  self.uid = block.base + self.slot
  self.cgroups = {}
  for _, c in ipairs(CONTROLLERS) do self.cgroups[c] = host.server_dirs[c] .. "/i" .. self.slot end
  self.starting, self.settled = core.signal(), core.signal()
  local ok, err = launch(self)
  self.settled:abort("settled")
  return ok, err
end

-- The holder's end, told by the engine on the loop (core.spawn's on_exit): no task waits for it
-- — a coroutine per awake instance was ~1 KiB of each of 2,000 at once (issue 43's RSS row).
function holder_exited(self, r)
  self.hold_result = r
  if not self.pid then self.starting:abort("exited") end
  self.done:abort("exited")
  -- ended on its own (not stopped by us): whoever owns the instance retires it (a task: that
  -- stops the instance, which waits)
  if self.state == "ready" and self.on_exit then core.go(self.on_exit, self) end
end

function launch(self)
  local host, iso = self.host, self.snap.isolation
  self.socket = ("%s/i%d.sock"):format(host.socket_dir, self.slot)
  local argv = { host.helper, "hold", "--uid", tostring(self.uid), "--gid", tostring(self.uid),
    "--workspace", self.dir, "--rootfs", iso.rootfs, "--net", self.network or iso.network,
    "--socket", self.socket, "--nofile", tostring(iso.open_files),
    "--fsize", tostring(iso.file_size_bytes), "--hostname", iso.hostname }
  if self.spare then argv[#argv + 1] = "--nice"; argv[#argv + 1] = "10" end -- built in the background
  local outbound = (self.network or iso.network) == "host"
  local outbound_if = outbound and not host.bridge and default_route_interface()
  if outbound and host.bridge then argv[#argv + 1] = "--bridge-port"; argv[#argv + 1] = host.bridge:port_spec(self.slot) end
  if outbound_if then argv[#argv + 1] = "--outbound-if"; argv[#argv + 1] = outbound_if end
  if self.disk then
    argv[#argv + 1] = "--disk-image"; argv[#argv + 1] = DISK_IMAGE
    argv[#argv + 1] = "--disk-bytes"; argv[#argv + 1] = tostring(iso.workspace_max_bytes)
    argv[#argv + 1] = "--disk-reserve"; argv[#argv + 1] = tostring(iso.disk_reserve_bytes)
    argv[#argv + 1] = "--loop-record"; argv[#argv + 1] = host.walls_dir.records
  end
  for _, a in ipairs(cgroup_args(self)) do argv[#argv + 1] = a end
  for _, a in ipairs(limit_writes(self)) do argv[#argv + 1] = a end
  for _, name in ipairs(iso.expose) do argv[#argv + 1] = "--expose"; argv[#argv + 1] = name end
  for _, p in ipairs(iso.hide) do argv[#argv + 1] = "--hide"; argv[#argv + 1] = p end
  -- No server's state is in view: the allow-list (expose) leaves out /var, and whatever it
  -- lets in, this server's own root (every workspace; the resident's repos/), the workspace's
  -- directory and every other walled server's registered root are covered.
  local hidden = {}
  for _, dir in ipairs({ host.root or "", self.dir:match("^(.*)/[^/]+$") or "", table.unpack(host.uid_claim:roots()) }) do
    if dir ~= "" and not hidden[dir] then
      hidden[dir] = true
      argv[#argv + 1] = "--hide"; argv[#argv + 1] = dir
    end
  end
  for _, p in ipairs(self.ro_binds or {}) do argv[#argv + 1] = "--ro-bind"; argv[#argv + 1] = p end
  if host.locale then argv[#argv + 1] = "--locale"; argv[#argv + 1] = host.locale.dir end
  argv[#argv + 1] = "--home"; argv[#argv + 1] = child_env.walled_home(self.snap) -- its commands' HOME (shell/child_env.lua)
  local passwd, group = child_env.walled_accounts(self.snap) -- its own /etc/passwd and /etc/group
  argv[#argv + 1] = "--passwd"; argv[#argv + 1] = passwd
  argv[#argv + 1] = "--group"; argv[#argv + 1] = group
  local line = ""
  self.stopped = core.signal()
  self.done = core.signal()
  local proc, err = core.spawn{
    argv = argv, env = { PATH = host.path }, signal = self.stopped,
    on_output = function(stream, bytes)
      if stream ~= "stdout" or self.pid then return end
      line = line .. bytes
      local pid, loop = line:match("^ready (%d+)%s*(.-)\n")
      if pid then
        self.pid = tonumber(pid)
        local device = loop:match("^loop (%d+)$") -- given back at the stop (with --disk-image)
        self.loop = device and tonumber(device)
        if self.loop then host.devices[self.loop] = self end
        self.starting:abort("ready")
      end
    end,
    on_exit = function(r) holder_exited(self, r) end,
  }
  if not proc then
    self.done = nil
    self.start_err = core.error("workspace", "the walls helper could not start: " .. tostring(err and err.message))
    self.starting:abort("failed")
    return nil, self.start_err
  end
  self.proc = proc
  core.sleep(self.snap.timeouts.walls.ready_ms, self.starting)
  if not self.pid then
    local why = hold_failure(self.hold_result, self.snap.timeouts.walls.ready_ms)
    local full = self.disk and why:match("(" .. M.HOST_DISK_FULL .. "[^\n]*)")
    if full then
      -- the host's disk, not the walls: the helper's own words, alone (docs/isolation.md
      -- "The host's disk"); nothing was made, nothing ran
      self.start_err = core.error("workspace", full, { code = "host-disk-full" })
      self:stop()
      return nil, self.start_err
    end
    if self.disk and why:find("the workspace's own file system", 1, true) then
      why = why .. " — or, where no loop device can be had, set workspace_size = \"measured\" in "
        .. "policies/isolation.lua (the size is then measured after commands: one command can write past it)"
    end
    self.start_err = core.error("workspace", "the instance's walls could not be built: " .. why)
    self:stop()
    return nil, self.start_err
  end
  self.init_start = select(2, init_state(self.pid))
  hold_files(self)
  self.state = "ready"
  return true
end

-- core.spawn argv running `program` (a list) inside the instance through the `run` client
-- (a process of its own; the engine speaks the same protocol itself: spawn_args). Kept for
-- diagnosis from a shell.
function Instance:argv(program)
  local argv = { self.host.helper, "run", self.socket, "--" }
  for _, a in ipairs(program) do argv[#argv + 1] = a end
  return argv
end

-- shell/run.lua's instance interface: the core.spawn arguments of a command, made to run
-- inside this instance (started first when it is not yet). The engine hands the command, its
-- pipes and its environment to the instance's spawner (the holder, already inside the
-- namespaces and cgroups, so nothing migrates per command and no process of ours sits in
-- between); the env travels over the socket, never in argv.
function Instance:spawn_args(args)
  local ok, err = self:start()
  if not ok then return nil, err end
  args.walls = self.socket
  args.cwd = "/workspace" -- inside the instance
  return args
end

-- Where the server reaches the workspace's files while the instance is awake. A workspace of its
-- own file system is mounted in the instance's mount namespace only (nothing of it in the
-- host's, so nothing outlives the instance), and reached through the instance's init's root.
function Instance:files()
  if self.disk and self.pid then return ("/proc/%d/root/workspace"):format(self.pid) end
  return self.dir
end

-- The owner of the workspace's files, for core.fs.root(dir, owner).
function Instance:owner() return { uid = self.uid, gid = self.uid } end

local function counter(self, which, key)
  if self.state == "stopped" then return 0 end -- its cgroups are gone or going
  local oom, pids = counter_paths(self)
  local f = io.open(which == "oom" and oom or pids, "r")
  if not f then return 0 end
  local text = f:read("a")
  f:close()
  return text and tonumber(text:match(key)) or 0
end

function Instance:counters()
  return { oom = counter(self, "oom", "oom_kill (%d+)"), pids = counter(self, "pids", "max (%d+)") }
end

-- A line in words for the limit a command ran into, or nil. `now`: the counters after it, when
-- the caller has read them already.
function Instance:explain(before, exit, now)
  local iso = self.snap.isolation
  now = now or self:counters()
  local lines = {}
  if now.oom > before.oom then
    lines[#lines + 1] = ("killed: this sandbox's memory limit (%s) was reached — policies/isolation.lua memory_bytes")
      :format(gib(iso.memory_bytes))
  end
  if now.pids > before.pids then
    lines[#lines + 1] = ("refused: this sandbox's process limit (%d processes) was reached, so fork failed — policies/isolation.lua pids_max")
      :format(iso.pids_max)
  end
  if #lines == 0 then return nil end
  return table.concat(lines, "\n")
end

-- The instance's processes (its pids cgroup's cgroup.procs), for sandboxd's file-table watch.
function Instance:procs_file()
  return self.cgroups and self.cgroups.pids .. "/cgroup.procs" or nil
end

-- Whether the instance ended on its own: its holder (the spawner) exited while it was ready —
-- a command killed every process of it (`kill -9 -1` ends the PID namespace's init, and bwrap
-- with it), or the kernel did at its memory limit. Nothing can run in it any more.
function Instance:dead()
  if self.state ~= "ready" then return false end
  if self.hold_result ~= nil then return true end
  -- the pidfd pins the init itself (never a reused pid) and polls readable once it is a zombie
  -- or gone: the states the stat line's look below treats as ended, with no line formatted
  if self.held and self.held.init then return self.held.init:exited() end
  local state, start = init_state(self.pid)
  return state == nil or state == "Z" or state == "X" or start ~= self.init_start
end

-- Whether files in its tmpfs mounts (/dev/shm, /tmp: memory charged to its cgroup, which no
-- kill frees) hold at least half of its memory limit.
function Instance:memory_held_by_files()
  if self.state ~= "ready" or not self.cgroups then return false end
  local f = io.open(self.cgroups.memory .. "/memory.stat", "r")
  local text = f and f:read("a") or ""
  if f then f:close() end
  local shmem = tonumber(text:match("^shmem (%d+)") or text:match("\nshmem (%d+)"))
  return shmem ~= nil and shmem >= self.snap.isolation.memory_bytes / 2
end

-- Every process of the instance is gone when this returns: the holder (and with it bwrap's
-- init, and with that the whole PID namespace) is killed, then whatever is still in the
-- instance's cgroups is killed and the cgroups removed.
function Instance:stop()
  if self.state == "stopped" then return end
  self.state = "stopped"
  release_files(self)
  if self.stopped then self.stopped:abort("instance asleep") end
  if self.done then core.sleep(self.snap.timeouts.walls.stop_ms, self.done) end
  if self.cgroups then
    local args = { "reap" }
    for _, a in ipairs(cgroup_args(self)) do args[#args + 1] = a end
    local r = run_helper(self.host, args)
    -- left to the server's close (and a later server's sweep), which reap the whole tree
    if r.exit ~= 0 then
      self.host.log("warn", "walls.reap_failed", { instance = self.label,
        error = (r.stderr or ""):match("[^\n]+") or ("status " .. tostring(r.exit)) })
    end
  end
  if self.socket then os.remove(self.socket) end
  if self.slot then self.host.slots[self.slot] = nil end
  -- every process reaped: the mount, the device's last user, is gone or going
  if self.loop then
    if self.host.devices[self.loop] == self then self.host.devices[self.loop] = nil end
    local image = (core.fs.realpath(self.dir) or self.dir) .. "/" .. DISK_IMAGE -- as the kernel names it
    self.host.loops:release(self.loop, self.snap.isolation.loop_devices_kept, image)
  end
end

return M

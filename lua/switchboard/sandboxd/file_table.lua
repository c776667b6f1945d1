-- sandboxd's watch over the host's file table (issue 35; docs/isolation.md "The host's file
-- table"). No kernel limit counts the file objects an instance holds: RLIMIT_NOFILE counts
-- descriptors, and a file that is mmap'd and closed keeps its file object with no descriptor
-- (one instance took 480,000 of the host's 2.4 M with 4 descriptors open). So this watches:
--
--   local w = file_table.start{instances = fn → {key → {runner, label}} (the fleet's awake ones;
--                               the resident's attached threads), log = fn, policy = fn → snapshot,
--                               read_table?, count_refs?}   (core.file_table, core.file_refs)
--   w:stop()
--
-- Every isolation.file_table_check_ms it reads the host's count (/proc/sys/fs/file-nr: one small
-- read, microseconds). Only when the count has risen isolation.file_table_rise files since it
-- last looked does it count, off the loop (core.file_refs), what each awake instance holds —
-- descriptors plus file-backed mappings of its processes — and an instance over its share
-- (pids_max × open_files of its snapshot, the share docs/isolation.md promises) is retired
-- (shell/walled.lua): its processes killed like a dead instance's, the command running answered
-- with a note naming the mechanism, the thread's next command in a fresh instance on the same
-- /workspace files.
local core = require("switchboard.core")
local walled = require("switchboard.shell.walled")

local M = {}

local Watch = {}
Watch.__index = Watch

-- An instance's share of the host's file table: what its rlimits let it hold in descriptors.
function M.share(iso) return iso.pids_max * iso.open_files end

-- The walled instances awake now: {ws, inst} with the cgroup.procs file to count.
local function awake(instances)
  local list = {}
  for _, fi in pairs(instances) do
    local ws = fi.runner and fi.runner.ws
    local inst = ws and ws.instance
    local procs = inst and not inst.retired and inst.state == "ready" and inst:procs_file()
    if procs then list[#list + 1] = { ws = ws, inst = inst, procs = procs, label = fi.label } end
  end
  return list
end

-- Counts every awake instance's file references and retires those over their share. The
-- count of one instance stops past the largest share (only "over or not" is asked).
local function attribute(self)
  local list = awake(self.instances())
  if #list == 0 then return 0 end
  local paths, most = {}, 0
  for i, e in ipairs(list) do
    paths[i] = e.procs
    most = math.max(most, M.share(e.inst.snap.isolation))
  end
  local t0 = core.now_ms()
  local counts = self.count_refs(paths, most)
  local retired = 0
  for i, c in ipairs(counts) do
    local e = list[i]
    local share = M.share(e.inst.snap.isolation)
    if c and c.files > share and e.ws.instance == e.inst and not e.inst.retired then
      retired = retired + 1
      core.go(walled.retire_over_files, e.ws, e.inst, { files = c.files, cut = c.cut, share = share })
    end
  end
  self.log("info", "sandboxd.file_table_counted", { instances = #list, retired = retired,
    count_ms = math.floor(core.now_ms() - t0) })
  return retired
end

local function loop(self)
  while not self.stopped.aborted do
    local iso = self.policy().isolation
    local allocated = self.read_table()
    if allocated then
      if self.base == nil or allocated < self.base then self.base = allocated end
      if allocated >= self.base + iso.file_table_rise then
        local ok, err = pcall(attribute, self)
        if not ok then self.log("error", "sandboxd.file_table_count_failed", { error = tostring(err) }) end
        -- looked at this level: the next count when the host's count rises as much again (a
        -- retired instance's files drop the count, and the level follows it down)
        self.base = self.read_table() or allocated
      end
    end
    core.sleep(iso.file_table_check_ms, self.stopped)
  end
end

function M.start(opts)
  local self = setmetatable({
    instances = opts.instances, log = opts.log or core.log, policy = opts.policy, stopped = core.signal(),
    read_table = opts.read_table or core.file_table, count_refs = opts.count_refs or core.file_refs,
  }, Watch)
  local allocated, err = self.read_table()
  if not allocated then
    self.log("warn", "sandboxd.file_table_unwatched", { error = tostring(err),
      hint = "the host's file table cannot be read: no instance is held to its share of it" })
    return self
  end
  self.base = allocated
  core.go(loop, self)
  return self
end

function Watch:stop() self.stopped:abort("stopped") end

return M

-- The thread → instance bookkeeping of sandboxd (docs/contract.md#workspaces, #capacity):
-- which threads have an awake instance, how many are awake against the ceiling, when an idle
-- one is put to sleep. It knows nothing about HOW an instance runs commands: that is the runner
-- the fleet is given
-- (new_runner(thread_key) → runner with :stop(reason)), so a later runner that puts each instance
-- in its own namespaces changes nothing here.
--
--   local fleet = fleet.new{max_instances = fn → n, sleep_after_ms = fn → ms | false (never on idle),
--                           new_runner = fn(key, want?) → runner, label = fn(key) → text, log = fn,
--                           dir_name = fn(key) → the workspace's directory name (optional),
--                           close_at_once = fn → n (instances put to sleep at once by close; 1),
--                           in_use = fn(key) → bool (in use elsewhere: not idle),
--                           refresh = fn() (brings idle_since up to date before an idle look)}
--   fleet.awake_dirs                      -- with dir_name: directory name → true for each awake
--                                         -- instance, kept as instances wake and sleep (the
--                                         -- slept workspaces' keeper reads it after every sleep:
--                                         -- no walk over the fleet per sleep, issue 43)
--   local inst, err = fleet:acquire(key, want?) -- one more operation in flight; err: core.error
--                                         -- whose code is the protocol's reason: "fleet-busy"
--                                         -- (kind capacity) | "closed" (kind closed) |
--                                         -- "network-mismatch" (kind refused; want: {network})
--   fleet:release(inst)                   -- that operation ended; idle from now when none is left
--   fleet:close()                         -- every instance to sleep; nothing wakes any more
--
-- Idle means idle: an instance with an operation in flight is never put to sleep, however long
-- the operation runs (docs/contract.md#workspaces); the idle clock starts when the last one ends.
-- Sleep = the runner's stop(): its processes are killed and its resources (the workspace) are
-- released. The thread's next request wakes a fresh instance.
local core = require("switchboard.core")

local M = {}

local Fleet = {}
Fleet.__index = Fleet

local function nolog() end

function M.new(opts)
  assert(type(opts.new_runner) == "function", "fleet.new: new_runner is required")
  assert(type(opts.max_instances) == "function", "fleet.new: max_instances (a function) is required")
  assert(type(opts.sleep_after_ms) == "function", "fleet.new: sleep_after_ms (a function) is required")
  return setmetatable({
    instances = {},       -- thread key → instance (awake ones only)
    awake_dirs = {},      -- dir_name(key) → true, for the awake ones (opts.dir_name given)
    awake = 0,
    slept = {},           -- thread key → true: put to sleep and not woken since (metrics)
    sleeping = 0,
    closed = false,
    stop = core.signal(), -- ends every idle watch when the fleet closes
    opts = opts,
    label = opts.label or tostring,
    log = opts.log or nolog,
  }, Fleet)
end

function Fleet:max() return self.opts.max_instances() end

function Fleet:get(key) return self.instances[key] end

-- The idle watch of one instance: one task per idle period, gone as soon as it is busy again.
local function watch(self, inst)
  while self.instances[inst.key] == inst and inst.busy == 0 and not self.closed do
    local due = inst.idle_since + self.opts.sleep_after_ms() - core.now_ms()
    if due <= 0 and self.opts.refresh then -- last uses counted elsewhere in batches: now
      self.opts.refresh()
      due = inst.idle_since + self.opts.sleep_after_ms() - core.now_ms()
    end
    if due <= 0 and self.opts.in_use and self.opts.in_use(inst.key) then
      inst.idle_since = core.now_ms() -- (sandboxd's exec lane: commands still run in it)
      due = self.opts.sleep_after_ms()
    end
    if due <= 0 then
      self:sleep(inst, "idle")
      break
    end
    core.sleep(math.ceil(due), self.stop)
  end
  inst.watching = false
end

-- want (optional): {network} — what the instance is made with when this wakes it; an awake
-- instance made with another network is not handed out ("network-mismatch", and the instance).
function Fleet:acquire(key, want)
  if self.closed then return nil, core.error("closed", "the fleet is closed: the server is shutting down", { code = "closed" }) end
  local inst = self.instances[key]
  if inst ~= nil and want and want.network and want.network ~= inst.network then
    return nil, core.error("refused", ("the thread's instance is awake with network %s, not %s")
      :format(tostring(inst.network), tostring(want.network)), { code = "network-mismatch" }), inst
  end
  if inst == nil then
    if self.awake >= self:max() then
      return nil, core.error("capacity", ("every instance is awake (%d of %d)"):format(self.awake, self:max()),
        { code = "fleet-busy" })
    end
    inst = {
      key = key, label = self.label(key), runner = self.opts.new_runner(key, want), busy = 0,
      woke_ms = core.now_ms(), idle_since = core.now_ms(), watching = false,
      network = want and want.network or nil,
    }
    self.instances[key] = inst
    self.awake = self.awake + 1
    if self.opts.dir_name then
      inst.dir_name = self.opts.dir_name(key)
      self.awake_dirs[inst.dir_name] = true
    end
    if self.slept[key] then self.slept[key], self.sleeping = nil, self.sleeping - 1 end
    self.log("info", "sandboxd.instance_woke", { instance = inst.label, awake = self.awake })
  end
  inst.busy = inst.busy + 1
  return inst
end

function Fleet:release(inst)
  assert(inst.busy > 0, "fleet:release without a matching acquire")
  inst.busy = inst.busy - 1
  if inst.busy > 0 or self.instances[inst.key] ~= inst then return end
  inst.idle_since = core.now_ms()
  -- false: instances never sleep on idle (sandboxd's pod mode: the pod's end is the thread's
  -- sleep, decided by whoever claimed the pod)
  if not inst.watching and not self.closed and self.opts.sleep_after_ms() then
    inst.watching = true
    core.go(watch, self, inst)
  end
end

-- Put one instance to sleep now (idle, or the whole fleet closing).
function Fleet:sleep(inst, reason)
  if self.instances[inst.key] ~= inst then return end
  self.instances[inst.key] = nil
  self.awake = self.awake - 1
  if inst.dir_name then self.awake_dirs[inst.dir_name] = nil end
  if not self.slept[inst.key] then self.slept[inst.key], self.sleeping = true, self.sleeping + 1 end
  inst.asleep = true
  local ok, err = pcall(inst.runner.stop, inst.runner, reason)
  self.log(ok and "info" or "error", "sandboxd.instance_slept", {
    instance = inst.label, reason = reason, awake = self.awake,
    awake_ms = math.floor(core.now_ms() - inst.woke_ms),
    error = not ok and tostring(err) or nil,
  })
end

function Fleet:close()
  if self.closed then return end
  self.closed = true
  self.stop:abort("closed")
  local all = {}
  for _, inst in pairs(self.instances) do all[#all + 1] = inst end
  -- several at once (opts.close_at_once, else one): each sleep is a few spawns and waits
  -- (~100 ms on a quiet host), and a fleet of hundreds put to sleep one by one outlasts a service
  -- manager's stop timeout, whose SIGKILL then leaves the rest's cgroups to the next start's sweep
  local at_once = math.max(1, math.min(#all, self.opts.close_at_once and self.opts.close_at_once() or 1))
  local next_i, running, done = 1, at_once, core.signal()
  local function worker()
    while next_i <= #all do
      local inst = all[next_i]
      next_i = next_i + 1
      self:sleep(inst, "shutdown")
    end
    running = running - 1
    if running == 0 then done:abort("slept") end
  end
  if #all == 0 then return end
  for _ = 1, at_once do core.go(worker) end
  while running > 0 do core.sleep(60000, done) end -- a wake-up bound only: each sleep has its own
end

return M

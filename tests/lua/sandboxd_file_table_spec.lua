-- sandboxd's file-table watch (sandboxd/file_table.lua) with the host's count and the counts
-- of the instances given to it: when it counts (a rise of file_table_rise since it last looked,
-- the level following the count down), whom it retires (over pids_max × open_files) and what it
-- tells. The real kernel side — the attack, /proc/sys/fs/file-nr — is
-- tests/e2e/walls_file_table_spec.lua; the counting is tests/lua/filerefs_spec.lua.
local core = require("switchboard.core")
local file_table = require("switchboard.sandboxd.file_table")

local ISO = { pids_max = 10, open_files = 100, file_table_check_ms = 10, file_table_rise = 5000 }
local SHARE = 1000

local function snapshot() return { isolation = ISO } end

-- A walled workspace's shape as the watch sees it: fleet.instances[key].runner.ws.instance.
local function instance(name, logs)
  local inst = { state = "ready", snap = snapshot(), stops = 0, name = name }
  function inst.procs_file() return "/sys/fs/cgroup/pids/x/" .. name .. "/cgroup.procs" end
  function inst.stop(self) self.stops = self.stops + 1; self.state = "stopped" end
  local ws = { instance = inst, label = "t-" .. name, log = function(level, event, fields)
    logs[#logs + 1] = { level = level, event = event, fields = fields }
  end }
  return ws, inst
end

local function until_true(pred, ms)
  local t0 = core.now_ms()
  while not pred() and core.now_ms() - t0 < ms do core.sleep(5) end
  return pred()
end

-- A watch over instances a and b whose host count and per-instance counts the spec sets.
local function watch(host)
  local logs, fleet = {}, { instances = {} }
  local a_ws, a = instance("a", logs)
  local b_ws, b = instance("b", logs)
  fleet.instances.A = { runner = { ws = a_ws }, label = "t-a" }
  fleet.instances.B = { runner = { ws = b_ws }, label = "t-b" }
  local held = { a = 10, b = 10 }
  local t = { logs = logs, a = a, b = b, a_ws = a_ws, held = held, counts = 0, host = host }
  t.w = file_table.start{
    instances = function() return fleet.instances end, policy = snapshot,
    log = function(level, event, fields) logs[#logs + 1] = { level = level, event = event, fields = fields } end,
    read_table = function() return t.host end,
    count_refs = function(paths, stop_at)
      t.counts = t.counts + 1
      t.stop_at = stop_at
      if t.raise then error("the count failed") end
      local out = {}
      for i, p in ipairs(paths) do
        local n = held[p:match("/(%a)/cgroup.procs$")]
        out[i] = { files = math.min(n, stop_at + 1), processes = 1, cut = n > stop_at }
      end
      return out
    end,
  }
  return t
end

local function event(logs, name)
  for _, l in ipairs(logs) do
    if l.event == name then return l end
  end
end

describe("sandboxd's file-table watch", function()
  it("counts only after the host's count rose file_table_rise, and retires the instance over its share", function()
    core.run(function()
      local t = watch(100000)
      t.held.a = 60000
      t.host = 104999 -- under the rise: nothing is counted
      core.sleep(60)
      assert.equal(0, t.counts)
      t.host = 105000
      assert.is_true(until_true(function() return t.a.stops == 1 end, 5000))
      assert.equal(1, t.counts)
      assert.equal(SHARE, t.stop_at) -- only "over or not" is asked
      assert.equal(0, t.b.stops) -- under its share: kept
      assert.is_nil(t.a_ws.instance) -- the next command makes a fresh one
      local line = event(t.logs, "sandboxd.instance_retired")
      assert.same({ instance = "t-a", reason = "file_table", files = SHARE + 1, share = SHARE,
        counted_past_share = true }, line.fields)
      -- retired with no command running: the thread's next command is told
      assert.truthy(t.a_ws.notice:find("held more than 1000 of the host's file objects", 1, true), t.a_ws.notice)
      assert.truthy(t.a_ws.notice:find("over its share of 1000 (policies/isolation.lua pids_max × open_files)", 1, true))
      assert.truthy(t.a.retired_note == t.a_ws.notice)
      t.w:stop()
    end)
  end)

  it("looks again only after as much more rise; a lower count lowers the level", function()
    core.run(function()
      local t = watch(100000)
      t.host = 105000
      assert.is_true(until_true(function() return t.counts == 1 end, 5000))
      t.host = 109999 -- the level looked at was 105,000
      core.sleep(60)
      assert.equal(1, t.counts)
      t.host = 90000 -- files freed: the level follows down
      core.sleep(60)
      t.host = 95000
      assert.is_true(until_true(function() return t.counts == 2 end, 5000))
      assert.equal(0, t.a.stops + t.b.stops) -- nobody over their share
      assert.truthy(event(t.logs, "sandboxd.file_table_counted"))
      t.w:stop()
    end)
  end)

  it("logs a count that fails and goes on watching; stop ends it", function()
    core.run(function()
      local t = watch(100000)
      t.raise = true
      t.host = 105000
      assert.truthy(until_true(function() return event(t.logs, "sandboxd.file_table_count_failed") end, 5000))
      t.raise = false
      t.held.b = 5000
      t.host = 110000
      assert.is_true(until_true(function() return t.b.stops == 1 end, 5000))
      t.w:stop()
      local n = t.counts
      t.host = 200000
      core.sleep(60)
      assert.equal(n, t.counts)
    end)
  end)
end)

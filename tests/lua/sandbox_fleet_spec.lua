-- Thread → instance bookkeeping (issue items 6, 7), with a stand-in runner: which instance a
-- thread gets, the ceiling on awake instances, and sleep after sleepAfter of idle — never while
-- an operation is in flight. Intervals are milliseconds here; bounds are generous.
local core = require("switchboard.core")
local fleet = require("switchboard.sandboxd.fleet")

local function make(opts)
  opts = opts or {}
  local made, stopped, logs = {}, {}, {}
  local f = fleet.new{
    max_instances = function() return opts.max or 3 end,
    sleep_after_ms = function() return opts.sleep_after or 60 end,
    new_runner = function(key)
      local r = { key = key, n = #made + 1 }
      function r.stop() stopped[#stopped + 1] = key end
      made[#made + 1] = r
      return r
    end,
    log = function(level, event, fields) logs[#logs + 1] = { level, event, fields } end,
  }
  return f, made, stopped, logs
end

describe("sandboxd fleet", function()
  it("a thread's follow-ups reuse its instance; another thread gets its own", function()
    core.run(function()
      local f, made = make()
      local a1 = assert(f:acquire("A")); f:release(a1)
      local a2 = assert(f:acquire("A")); f:release(a2)
      local b = assert(f:acquire("B")); f:release(b)
      assert.equal(a1, a2)
      assert.are_not.equal(a1, b)
      assert.equal(2, #made)
      assert.equal(2, f.awake)
      f:close()
    end)
  end)

  it("counts awake instances against the ceiling: one more thread is fleet-busy and nothing is made", function()
    core.run(function()
      local f, made = make{ max = 2 }
      assert(f:acquire("A")); assert(f:acquire("B"))
      local inst, why = f:acquire("C")
      assert.is_nil(inst)
      assert.equal("fleet-busy", why.code)
      assert.equal(2, #made)
      -- an awake thread is still served at the ceiling
      assert.truthy(f:acquire("A"))
      f:close()
    end)
  end)

  it("the ceiling is read on every wake (a reload or --max-instances changes it)", function()
    core.run(function()
      local max = 1
      local f = fleet.new{ max_instances = function() return max end, sleep_after_ms = function() return 1000 end,
        new_runner = function() return { stop = function() end } end }
      assert(f:acquire("A"))
      assert.is_nil((f:acquire("B")))
      max = 2
      assert.truthy(f:acquire("B"))
      f:close()
    end)
  end)

  it("an idle instance sleeps after sleepAfter: its runner is stopped and a slot frees", function()
    core.run(function()
      local f, made, stopped, logs = make{ max = 1, sleep_after = 50 }
      local a = assert(f:acquire("A")); f:release(a)
      assert.is_nil((f:acquire("B")))
      core.sleep(200)
      assert.same({ "A" }, stopped)
      assert.equal(0, f.awake)
      assert.is_true(a.asleep)
      -- the next request for the slept thread gets a fresh instance
      local a2 = assert(f:acquire("A"))
      assert.are_not.equal(a, a2)
      assert.equal(2, #made)
      local slept
      for _, l in ipairs(logs) do if l[2] == "sandboxd.instance_slept" then slept = l[3] end end
      assert.equal("idle", slept.reason)
      f:close()
    end)
  end)

  it("an operation in flight never counts as idle, however long it runs", function()
    core.run(function()
      local f, _, stopped = make{ sleep_after = 30 }
      local a = assert(f:acquire("A"))
      core.sleep(250) -- eight sleepAfters with the operation in flight
      assert.same({}, stopped)
      f:release(a)
      -- the idle clock starts when the last operation ends
      core.sleep(10)
      assert.same({}, stopped)
      core.sleep(200)
      assert.same({ "A" }, stopped)
      f:close()
    end)
  end)

  it("activity restarts the idle clock; overlapping operations keep it awake", function()
    core.run(function()
      local f, _, stopped = make{ sleep_after = 100 }
      for _ = 1, 6 do
        local a = assert(f:acquire("A"))
        local b = assert(f:acquire("A"))
        f:release(a)
        core.sleep(40)
        f:release(b)
      end
      assert.same({}, stopped)
      core.sleep(300)
      assert.same({ "A" }, stopped)
      f:close()
    end)
  end)

  it("close puts every instance to sleep and wakes nothing more", function()
    core.run(function()
      local f, _, stopped = make()
      assert(f:acquire("A")); local b = assert(f:acquire("B")); f:release(b)
      f:close()
      table.sort(stopped)
      assert.same({ "A", "B" }, stopped)
      local inst, why = f:acquire("C")
      assert.is_nil(inst)
      assert.equal("closed", why.code)
    end)
  end)

  it("close puts close_at_once instances to sleep at a time, and returns when every one slept", function()
    core.run(function()
      local running, most, stopped = 0, 0, {}
      local f = fleet.new{ max_instances = function() return 20 end, sleep_after_ms = function() return 60000 end,
        close_at_once = function() return 4 end,
        new_runner = function(key)
          return { stop = function()
            running = running + 1
            most = math.max(most, running)
            core.sleep(30) -- a stop yields (the holder's end, the reap)
            running = running - 1
            stopped[#stopped + 1] = key
          end }
        end }
      for i = 1, 10 do f:release(assert(f:acquire("T" .. i))) end
      f:close()
      assert.equal(10, #stopped)
      assert.equal(0, running)
      assert.equal(4, most) -- one at a time before (most = 1)
    end)
  end)

  it("a runner whose stop raises is logged and the slot still frees", function()
    core.run(function()
      local f = fleet.new{ max_instances = function() return 1 end, sleep_after_ms = function() return 10 end,
        new_runner = function() return { stop = function() error("disk on fire") end } end,
        log = function() end }
      local a = assert(f:acquire("A")); f:release(a)
      core.sleep(100)
      assert.equal(0, f.awake)
      assert.truthy(f:acquire("B"))
      f:close()
    end)
  end)
end)

describe("sandboxd fleet: an instance's network", function()
  it("is handed to the runner when the instance wakes, and an awake instance is not handed out for another", function()
    core.run(function()
      local wants = {}
      local f = fleet.new{
        max_instances = function() return 5 end, sleep_after_ms = function() return 60000 end,
        new_runner = function(key, want)
          wants[#wants + 1] = want
          return { stop = function() end }
        end,
      }
      local a = assert(f:acquire("A", { network = "none" }))
      assert.equal("none", wants[1].network)
      assert.equal("none", a.network)
      local inst, why, awake = f:acquire("A", { network = "host" })
      assert.is_nil(inst)
      assert.equal("network-mismatch", why.code)
      assert.equal(a, awake)
      assert.equal(a, assert(f:acquire("A", { network = "none" })))
      assert.equal(a, assert(f:acquire("A"))) -- no want: not a question of network (the resident)
      assert.equal(1, #wants)
      -- once it slept, the thread's next request makes it with its own network
      f:release(a); f:release(a); f:release(a)
      f:sleep(a, "idle")
      local b = assert(f:acquire("A", { network = "host" }))
      assert.equal("host", b.network)
      f:close()
    end)
  end)

  it("keeps awake_dirs as instances wake and sleep: dir_name asked once per wake (issue 43)", function()
    core.run(function()
      local asked = 0
      local f = fleet.new{ max_instances = function() return 3 end, sleep_after_ms = function() return false end,
        new_runner = function() return { stop = function() end } end,
        dir_name = function(key) asked = asked + 1; return "d-" .. key end }
      local a = assert(f:acquire("A")); f:release(a)
      local b = assert(f:acquire("B")); f:release(b)
      f:release(assert(f:acquire("A"))) -- A's follow-up: awake already, not asked again
      assert.same({ ["d-A"] = true, ["d-B"] = true }, f.awake_dirs)
      assert.equal(2, asked)
      f:sleep(a, "idle")
      assert.same({ ["d-B"] = true }, f.awake_dirs)
      f:release(assert(f:acquire("A"))) -- woken again
      assert.same({ ["d-A"] = true, ["d-B"] = true }, f.awake_dirs)
      f:close()
      assert.same({}, f.awake_dirs)
    end)
  end)
end)

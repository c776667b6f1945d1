-- The engine's tasks share one loop (docs/engine.md): a task that waits lets every other task
-- and the loop's I/O run, even when it waits as little as it can.
local core = require("switchboard.core")
local async = require("support.async")

describe("core.sleep", function()
  it("a task looping on core.sleep(0) lets other tasks and I/O run", async(function()
    local other_ran, output = false, nil
    core.go(function() other_ran = true end)
    local proc = assert(core.spawn{ argv = { "/bin/echo", "io" }, env = {}, deadline_ms = 30000 })
    core.go(function() output = proc:wait().stdout end)
    -- libuv runs a timer due at the loop's time in the same pass: a 0 ms timer re-armed from
    -- its own callback once kept the timer phase going until this loop's bound ran out
    local t0, turns = core.now_ms(), 0
    while not (other_ran and output) and core.now_ms() - t0 < 30000 do
      core.sleep(0)
      turns = turns + 1
    end
    assert.is_true(other_ran, "the other task never ran (" .. turns .. " turns)")
    assert.equal("io\n", output)
  end))

  it("still waits what it is given, and a fraction of a millisecond is a turn, not a hang", async(function()
    local t0 = core.now_ms()
    assert.is_true(core.sleep(50))
    assert.is_true(core.now_ms() - t0 >= 49)
    assert.is_true(core.sleep(0.3))
  end))

  -- libuv measures a timer from the time it read at the start of the loop's turn: started after
  -- long work in the same turn, a timer once fired early by as much as the work took
  it("waits its whole time, and a command its whole deadline, when started after long work in one turn", async(function()
    local function hold_the_loop(ms)
      local t0 = core.now_ms()
      while core.now_ms() - t0 < ms do end
    end
    hold_the_loop(300)
    local t0 = core.now_ms()
    assert.is_true(core.sleep(200))
    local slept = core.now_ms() - t0
    assert.is_true(slept >= 199, ("core.sleep(200) after 300 ms of work returned after %.1f ms"):format(slept))
    hold_the_loop(300)
    local proc = assert(core.spawn{ argv = { "sleep", "30" }, env = {}, deadline_ms = 400 })
    local r = proc:wait()
    assert.is_true(r.timed_out)
    assert.is_true(r.duration_ms >= 399, ("a 400 ms deadline after 300 ms of work ended the command at %.1f ms"):format(r.duration_ms))
  end))
end)

-- core.join (issue 42): a task's results, or its raise with the traceback of where it was raised
-- (the task's own stack, which a pcall in the joiner could never see).
describe("core.join", function()
  local function deep_raise(v) error(v, 0) end
  local function named_frame_that_raises(v) deep_raise(v) end

  it("returns true and the task's results once it ends, waiting while it runs", async(function()
    local t = core.go(function(a, b) core.sleep(20) return a + b, "two", nil end, 1, 2)
    local r = table.pack(core.join(t))
    assert.same({ n = 4, true, 3, "two", nil }, r)
  end))

  it("returns false and a string raise with the raising task's traceback appended", async(function()
    local t = core.go(function() core.sleep(5) named_frame_that_raises("the bug") end)
    local ok, err = core.join(t)
    assert.is_false(ok)
    assert.equal("string", type(err))
    assert.truthy(err:find("^the bug\nstack traceback:"), err)
    assert.truthy(err:find("named_frame_that_raises", 1, true), err)
  end))

  it("returns an error object as itself, its traceback in err.traceback", async(function()
    local raised = core.error("internal", "a kind of bug", { code = 7 })
    local ok, err = core.join(core.go(function() named_frame_that_raises(raised) end))
    assert.is_false(ok)
    assert.equal(raised, err)
    assert.equal(7, err.code)
    assert.truthy(tostring(err.traceback):find("named_frame_that_raises", 1, true), tostring(err.traceback))
  end))

  it("answers at once for a task that has already ended, with its results or its raise", async(function()
    local quiet = core.go(function() end)
    local valued = core.go(function() return "kept" end)
    local raising = core.go(function() error("late", 0) end)
    core.sleep(20)
    assert.same({ n = 1, true }, table.pack(core.join(quiet)))
    assert.same({ n = 2, true, "kept" }, table.pack(core.join(valued)))
    local ok, err = core.join(raising)
    assert.is_false(ok)
    assert.truthy(err:find("^late\nstack traceback:"), err)
  end))

  it("wakes every task that waits for the same one, and refuses a task waiting for itself", async(function()
    local t = core.go(function() core.sleep(10) return "x" end)
    local got = {}
    local function waiter() local _, v = core.join(t) got[#got + 1] = v end
    local a, b = core.go(waiter), core.go(waiter)
    core.join(a)
    core.join(b)
    assert.same({ "x", "x" }, got)
    local ok, err = core.join(core.go(function() return core.join(core.current()) end))
    assert.is_false(ok)
    assert.truthy(err:find("cannot wait for itself", 1, true), err)
  end))
end)

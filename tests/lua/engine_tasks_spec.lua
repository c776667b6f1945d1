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
end)

-- core.loop_lag (src/engine/loop_lag.c, docs/engine.md): a task that holds the loop shows as
-- lag — the delay every timer (every heartbeat) of the process waited — and an idle loop does not.
local core = require("switchboard.core")

describe("core.loop_lag", function()
  it("shows a task that held the loop, and nothing much when the loop was free", function()
    core.run(function()
      core.loop_lag() -- sampling starts
      core.sleep(1000) -- a free loop: ten samples or so
      local free = core.loop_lag()
      assert.truthy(free.count >= 3, "too few samples: " .. free.count)
      assert.is_number(free.p50)
      -- the loop held for 600 ms by a task that never yields
      local held_from = os.clock()
      while os.clock() - held_from < 0.6 do end
      -- the next samples come after the hold: wait for the one that saw it
      local seen = core.loop_lag()
      local deadline = core.now_ms() + 30000
      while seen.max_window < 0.4 and core.now_ms() < deadline do
        core.sleep(100)
        seen = core.loop_lag()
      end
      assert.truthy(seen.max_window >= 0.4, ("the hold did not show: max %.3f s"):format(seen.max_window))
      assert.truthy(seen.max >= seen.max_window)
      assert.truthy(seen.p99 <= seen.max_window)
      assert.truthy(seen.window_s > 0 and seen.window_s <= 60)
    end)
  end)
end)

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

  it("a burst of ready tasks leaves the loop's timers their turn (the ready queue's budget per turn)", function()
    core.run(function()
      local busy_done = 0
      local n = 400
      -- 400 tasks made ready at once, each holding the loop 0.5 ms, then a timer due in 1 ms
      -- (this task's own sleep, armed before any of them runs)
      for _ = 1, n do
        core.go(function()
          local t = os.clock()
          while os.clock() - t < 0.0005 do end
          busy_done = busy_done + 1
        end)
      end
      core.sleep(1)
      local done_at_wake = busy_done
      while busy_done < n do core.sleep(10) end
      -- the whole burst is 200 ms of work: the timer waited for a slice of it, not all
      assert.truthy(done_at_wake < n / 2, ("the timer ran after %d of %d tasks"):format(done_at_wake, n))
    end)
  end)

  it("hundreds of tasks woken by one pass of timers leave the next timer its turn (in-place resumes' budget)", function()
    core.run(function()
      local n, armed, done = 2000, 0, 0
      -- 2,000 tasks asleep until about the same moment, each holding the loop 1 ms once woken:
      -- their timers fire in one pass of the loop, and each wakes its task in place
      for _ = 1, n do
        core.go(function()
          armed = armed + 1
          core.sleep(300)
          local t = os.clock()
          while os.clock() - t < 0.001 do end
          done = done + 1
        end)
      end
      while armed < n do core.sleep(1) end
      -- a timer due 400 ms after the last of theirs (armed after every one of them): only a
      -- process held off its CPU for that long would see both due in one pass (once, at load
      -- ~50 with a 150 ms gap, it was)
      core.sleep(700)
      local done_at_wake = done
      local deadline = core.now_ms() + 60000
      while done < n and core.now_ms() < deadline do core.sleep(10) end
      assert.equal(n, done)
      -- the burst is two seconds of work: this timer waited for a slice of it (~400 ms), not all of it
      assert.truthy(done_at_wake < n / 2, ("the timer ran after %d of %d woken tasks"):format(done_at_wake, n))
    end)
  end)

  it("a timer that fell due while the loop was held runs at the next poll, not a stale timeout later", function()
    core.run(function()
      local dir = require("support.tmp").dir("lag")
      -- Six rounds: the engine's own 1 s timer (the collector's pace) may wake a stale poll
      -- early by chance in one round (~50 %), not in all six.
      for round = 1, 6 do
        local mark = dir .. "/spoke" .. round
        -- a child that leaves a file 2.3 s after it started: an event outside the loop at a
        -- known time that wakes no poll (its start heard first: no event of its spawn wakes one)
        local started = false
        local child = assert(core.spawn{ argv = { "sh", "-c", "echo started; sleep 2.3; : > " .. mark },
          on_output = function(stream, chunk) if stream == "stdout" and chunk:find("started") then started = true end end })
        while not started do core.sleep(1) end
        -- a timer due 1.7 s from now, which looks whether the child's file is there when it runs
        local armed, file_when_timer_ran = false, nil
        local me = core.current()
        core.go(function()
          armed = true
          core.sleep(1700)
          file_when_timer_ran = core.fs.exists(mark)
          core.wake(me)
        end)
        while not armed do core.sleep(1) end
        -- a ticker whose first tick (1 s from now) holds the loop for 0.8 s, touching no timer,
        -- so that nothing else of the turn reads the clock: the timer is overdue when the hold
        -- ends and the file comes ~500 ms later. The poll that follows must see the timer
        -- overdue (timeout 0); one sized from the turn's first clock reading sleeps ~700 ms more.
        -- (The hold blocks rather than spins: a thread that spun for 0.8 s is made to wait for
        -- the CPU afterwards on a loaded host, past the child's file.)
        local stop = core.signal()
        core.every(1000, function() os.execute("sleep 0.8") end, stop)
        core.suspend()
        stop:abort("done")
        child:wait()
        assert.is_false(file_when_timer_ran, "round " .. round .. ": the timer ran after the child's file")
      end
    end)
  end)
end)

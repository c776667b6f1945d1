-- core.every(ms, fn, signal): fn on the loop every ms until the signal fires — what a task
-- looping on core.sleep did, without a coroutine (sandboxd's heartbeat of a running command).
local core = require("switchboard.core")
local async = require("support.async")

local function wait_until(pred, ms)
  local t0 = core.now_ms()
  while not pred() and core.now_ms() - t0 < ms do core.sleep(5) end
  return pred()
end

describe("core.every", function()
  it("calls fn every interval until the signal fires, and never after", async(function()
    local stop, times = core.signal(), {}
    local t0 = core.now_ms()
    core.every(50, function() times[#times + 1] = core.now_ms() end, stop)
    assert.is_true(wait_until(function() return #times >= 3 end, 30000), "three ticks never came")
    stop:abort("done")
    local n = #times
    for i = 2, n do assert.is_true(times[i] - times[i - 1] >= 45, "two ticks closer than the interval") end
    assert.is_true(times[1] - t0 >= 45, "the first tick came before one interval")
    core.sleep(200)
    assert.are.equal(n, #times, "a tick after the signal fired")
  end))

  it("stops when fn itself fires the signal", async(function()
    local stop, ticks = core.signal(), 0
    core.every(10, function()
      ticks = ticks + 1
      if ticks == 2 then stop:abort("enough") end
    end, stop)
    assert.is_true(wait_until(function() return stop.aborted end, 30000))
    core.sleep(100)
    assert.are.equal(2, ticks)
  end))

  it("does nothing with a signal that has fired", async(function()
    local stop, ticks = core.signal(), 0
    stop:abort("before")
    core.every(10, function() ticks = ticks + 1 end, stop)
    core.sleep(100)
    assert.are.equal(0, ticks)
  end))

  it("goes on ticking after fn raises", async(function()
    local stop, ticks = core.signal(), 0
    core.every(10, function()
      ticks = ticks + 1
      error("tick " .. ticks)
    end, stop)
    assert.is_true(wait_until(function() return ticks >= 3 end, 30000), "the ticks ended at the first error")
    stop:abort("done")
  end))

  it("requires a signal and an interval of at least 1 ms", function()
    assert.has_error(function() core.every(10, function() end) end)
    assert.has_error(function() core.every(0, function() end, core.signal()) end)
    assert.has_error(function() core.every(10, nil, core.signal()) end)
  end)

  it("keeps no task: a ticker costs far less Lua heap than a sleeping task", async(function()
    local stops = {}
    for i = 1, 200 do stops[i] = core.signal() end
    collectgarbage("collect")
    collectgarbage("stop")
    local before = collectgarbage("count")
    for i = 1, 200 do core.every(60000, function() end, stops[i]) end
    local ticker = (collectgarbage("count") - before) * 1024 / 200
    before = collectgarbage("count")
    for i = 1, 200 do core.go(function() core.sleep(60000, stops[i]) end) end
    local task = (collectgarbage("count") - before) * 1024 / 200
    collectgarbage("restart")
    for _, s in ipairs(stops) do s:abort("done") end
    assert.is_true(ticker < task / 4, ("a ticker %.0f bytes, a sleeping task %.0f"):format(ticker, task))
  end))
end)

-- The collector's pace (src/engine/gc_pace.c, docs/engine.md "The collector's pace"): a large
-- heap is collected once a few MiB of garbage have piled up past what it holds live, not once it
-- has doubled (Lua's default); a small heap keeps Lua's default pace.
local core = require("switchboard.core")

-- The highest heap size (KiB) while `mib` MiB of short-lived strings are made and dropped.
local function peak_while_churning(mib)
  local peak = collectgarbage("count")
  local pad = ("x"):rep(1000)
  for i = 1, mib * 1024 do
    local garbage = pad .. i -- a new 1 KiB string each time, dropped at once
    if #garbage == 0 then error("unreachable") end
    if i % 64 == 0 then peak = math.max(peak, collectgarbage("count")) end
  end
  return peak
end

-- Holds about `mib` MiB live: strings of 4 KiB, each its own.
local function hold(mib)
  local live, pad = {}, ("y"):rep(4096 - 8)
  for i = 1, mib * 256 do live[i] = pad .. ("%08d"):format(i) end
  return live
end

describe("the collector's pace", function()
  -- the binary's state runs Lua's default, incremental collector (luaL_newstate); busted's runs
  -- generational, which the engine's pace turns incremental the same way
  before_each(function() collectgarbage("incremental", 200, 100) end)

  it("lets a 48 MiB heap grow by a fraction of itself, not double, while garbage is made", function()
    core.run(function()
      local live = hold(48)
      collectgarbage("collect")
      local base = collectgarbage("count")
      core.sleep(1500) -- the engine reads the heap's size every second: its pause is set
      collectgarbage("collect") -- a cycle takes the pause it finds when it ends: this one
      local peak = peak_while_churning(256)
      assert.equal(48 * 256, #live)
      -- Lua's default pause (200) lets it reach about twice `base`; the paced heap stays near it
      assert.truthy(peak < base * 1.35,
        ("the heap of %.1f MiB live grew to %.1f MiB (%.2f×)"):format(base / 1024, peak / 1024, peak / base))
    end)
  end)

  it("leaves a small heap at Lua's default pace (garbage up to about its own size)", function()
    core.run(function()
      collectgarbage("collect")
      local base = collectgarbage("count")
      core.sleep(1500)
      collectgarbage("collect")
      local peak = peak_while_churning(64)
      assert.truthy(base < 4096, ("the test's own heap is not small: %.1f MiB"):format(base / 1024))
      -- the default pace lets it double (a cycle starts at 2× what the last one left)
      assert.truthy(peak > base * 1.6,
        ("a small heap of %.1f MiB was collected early: peak %.1f MiB"):format(base / 1024, peak / 1024))
    end)
  end)
end)

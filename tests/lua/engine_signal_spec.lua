-- core.signal: its Lua listeners (none, one, several; added after it fired), its parents, and
-- what a signal costs in the Lua heap — a server holds thousands at once (eight per walled
-- request waiting at 2,000 threads, issue 43's RSS row), so a signal with no listener and no
-- parent makes no table.
local core = require("switchboard.core")

describe("core.signal", function()
  it("runs each Lua listener once, in the order they were added, with the reason", function()
    for n = 0, 3 do
      local sig, heard = core.signal(), {}
      for i = 1, n do sig:on_abort(function(reason) heard[#heard + 1] = i .. ":" .. tostring(reason) end) end
      sig:abort("why")
      sig:abort("again") -- a second abort changes nothing
      local want = {}
      for i = 1, n do want[i] = i .. ":why" end
      assert.are.same(want, heard)
      assert.is_true(sig.aborted)
      assert.are.equal("why", sig.reason)
    end
  end)

  it("runs a listener added after the abort at once, and one added by a listener", function()
    local sig, heard = core.signal(), {}
    sig:on_abort(function(reason)
      heard[#heard + 1] = "first " .. reason
      sig:on_abort(function(r) heard[#heard + 1] = "inner " .. r end)
    end)
    sig:abort("now")
    sig:on_abort(function(r) heard[#heard + 1] = "late " .. r end)
    assert.are.same({ "first now", "inner now", "late now" }, heard)
  end)

  it("aborts with any parent, and keeps its parents alive while it lives", function()
    local child = core.signal(core.signal(), core.signal())
    local heard
    child:on_abort(function(reason) heard = reason end)
    collectgarbage("collect")
    collectgarbage("collect")
    local a = core.signal()
    local both = core.signal(a, child)
    a:abort("from a")
    assert.is_true(both.aborted)
    assert.are.equal("from a", both.reason)
    assert.is_false(child.aborted)
    assert.is_nil(heard)
    local p = core.signal()
    local kid = core.signal(p)
    p = nil
    collectgarbage("collect")
    assert.is_false(kid.aborted) -- (its parent is kept: a collected parent could not abort it)
  end)

  it("costs under 160 bytes of Lua heap when it has no listener and no parent", function()
    collectgarbage("collect")
    collectgarbage("stop")
    local keep = {}
    for i = 1, 1000 do keep[i] = false end -- the array's room made before the count
    local before = collectgarbage("count")
    for i = 1, 1000 do keep[i] = core.signal() end
    local per = (collectgarbage("count") - before) * 1024 / 1000
    collectgarbage("restart")
    -- (a userdata of 48 bytes with two user values: ~120 bytes; with its two empty tables it
    -- was ~230)
    assert.is_true(per < 160, ("%.0f bytes a signal"):format(per))
  end)
end)

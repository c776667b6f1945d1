-- The console front on a terminal (fronts/console.lua), byte for byte: what fits in a row,
-- the typed line's editing keys, and the live area (status line, input line) redrawn so that
-- output and status never overwrite what is typed. The screen itself is checked through a
-- real pty in tests/e2e/console_tty_spec.lua.
local front_mod = require("switchboard.fronts.console")

local function tty_front(width)
  local out = {}
  local f = front_mod.new{ tty = true, edit = true, width = width or 40,
                           write = function(b) out[#out + 1] = b end }
  f.thread, f.user = "main", "ana"
  f.editing = true
  return f, out
end

describe("the console front on a terminal", function()
  it("fits text into a row by characters, never cutting inside one, controls made spaces", function()
    assert.equal("abc", front_mod.fit("abc", 3))
    assert.equal("ab…", front_mod.fit("abcd", 3))
    assert.equal("wö…", front_mod.fit("wörld", 3))
    assert.equal("a [31mb", front_mod.fit("a\27[31mb", 10)) -- no escape reaches the screen
    assert.equal("a b", front_mod.fit("a\194\155b", 10))     -- C1 CSI (U+009B) either
    assert.equal("a?b", front_mod.fit("a\255b", 10))          -- a broken byte
    assert.equal("…örld", front_mod.fit_tail("hello wörld", 5))
    assert.equal("", front_mod.fit("abc", 0))
  end)

  it("edits the typed line: UTF-8, Backspace, Ctrl-W, Ctrl-U; escape sequences are dropped", function()
    local f = tty_front()
    f:keys("hé", function() end)
    f:keys("\127", function() end)
    assert.equal("h", f.input)
    f:keys("ello big wörld  \23", function() end)
    assert.equal("hello big ", f.input)
    f:keys("\27[A\27[1;5D\27Ox\t!", function() end) -- arrows, a function key, a tab
    assert.equal("hello big  !", f.input)
    f:keys("\21", function() end)
    assert.equal("", f.input)
    f:keys("\27[", function() end) -- an escape split across chunks
    f:keys("Bz", function() end)
    assert.equal("z", f.input)
  end)

  it("Enter submits (CR LF counts once); Ctrl-D ends input only on an empty line", function()
    local f = tty_front()
    local lines = {}
    local on_line = function(l) lines[#lines + 1] = l end
    assert.is_nil(f:keys("one\r\ntwo\rthr", on_line))
    assert.same({ "one", "two" }, lines)
    assert.is_nil(f:keys("\4", on_line))
    assert.equal("thr", f.input)
    f:keys("\21", on_line)
    assert.equal("eof", f:keys("\4ignored", on_line))
  end)

  it("a status update rewrites only the status row; the typed line is drawn again under it", function()
    local f, out = tty_front(40)
    f:redraw()
    f:keys("ab", function() end)
    local h = f:post("main", { summary = "[main] coding running 1s" })
    local bytes = table.concat(out)
    -- the input row alone, then both rows from the live area's top when the status appears
    assert.truthy(bytes:find("\r\27[2K> ab", 1, true))
    assert.truthy(bytes:find("\r\27[J[main] coding running 1s\r\n> ab", 1, true))
    out[1] = nil
    for k in pairs(out) do out[k] = nil end
    f:update(h, { summary = "[main] coding running 2s" })
    assert.equal("\27[1A\r\27[2K[main] coding running 2s\27[1B\r\27[4C", table.concat(out))
  end)

  it("prints output above the live area, and a submitted line on a line of its own", function()
    local f, out = tty_front(40)
    f:redraw()
    f:post("main", { summary = "[main] coding running 1s" })
    for k in pairs(out) do out[k] = nil end
    f:keys("/thread\r", function(l) f:line(l) end)
    assert.equal("\r\27[1A\27[J> /thread\r\n[main] coding running 1s\r\n> "
      .. "\r\27[1A\27[Jthread: main\n\n[main] coding running 1s\r\n> ", table.concat(out))
  end)

  it("cuts the status to the width and cuts it again on a resize", function()
    local f, out = tty_front(20)
    f:post("main", { summary = "[a-long-thread] coding running 12s" })
    assert.same({ "[a-long-thread] co…", "> " }, f.shown) -- 19 columns: never the last
    for k in pairs(out) do out[k] = nil end
    f:resize(12)
    assert.same({ "[a-long-th…", "> " }, f.shown)
    assert.equal("\r\27[1A\27[J[a-long-th…\r\n> ", table.concat(out))
  end)

  it("without an input line (standard input not a terminal) the status line is today's", function()
    local out = {}
    local f = front_mod.new{ tty = true, width = 80, write = function(b) out[#out + 1] = b end }
    local h = f:post("main", { summary = "[main] coding running 1s" })
    f:update(h, { summary = "[main] coding running 2s" })
    f:update(h, { final = true, text = "card" })
    f:close()
    assert.equal("[main] coding running 1s\r\27[2K[main] coding running 2s\r\27[J[main] card\n\n",
      table.concat(out))
  end)
end)

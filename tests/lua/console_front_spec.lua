-- The console front's input side (fronts/console.lua): lines out of arbitrary chunks, and the
-- console's own commands (/thread, /help) told apart from messages for the dispatcher.
local front_mod = require("switchboard.fronts.console")

local function front()
  local said = {}
  local f = front_mod.new{ tty = false, write = function(b) said[#said + 1] = b end }
  f.thread, f.user = "main", "ana"
  return f, said
end

describe("the console front's input", function()
  it("cuts chunks into lines wherever the chunks end; the last line may lack its newline", function()
    local chunks = { "run `a`\nru", "n `b`", "\n\nlast" }
    local i = 0
    local lines = {}
    local how = front_mod.read_lines(nil, function(l) lines[#lines + 1] = l end, function()
      i = i + 1
      return chunks[i]
    end)
    assert.equal("eof", how)
    assert.same({ "run `a`", "run `b`", "", "last" }, lines)
  end)

  it("a stop while reading ends with stopped", function()
    local how = front_mod.read_lines(nil, function() end, function() return nil, { kind = "aborted" } end)
    assert.equal("stopped", how)
  end)

  it("/thread switches and names the thread; a bad name and an unknown /command are said, not sent", function()
    local f, said = front()
    assert.is_nil(f:line("/thread ci"))
    assert.equal("ci", f.thread)
    assert.is_nil(f:line("/thread"))
    assert.is_nil(f:line("/thread a b"))
    assert.equal("ci", f.thread)
    assert.is_nil(f:line("/bogus"))
    assert.is_nil(f:line("   \r"))
    local text = table.concat(said)
    assert.truthy(text:find("thread: ci\n\nthread: ci\n\n", 1, true))
    assert.truthy(text:find('"a b" is not a thread name', 1, true))
    assert.truthy(text:find("/bogus is not a console command", 1, true))
  end)

  it("anything else is a message of the current thread, trimmed; /help goes to the dispatcher", function()
    local f = front()
    assert.same({ thread = "main", user = "ana", text = "run `ls`" }, f:line("  run `ls`  \r"))
    assert.same({ thread = "main", user = "ana", text = "/help" }, f:line("/help"))
  end)

  it("serve hands each message to the dispatcher", function()
    local f = front()
    local got = {}
    local d = { handle = function(_, msg) got[#got + 1] = msg.thread .. ":" .. msg.text end }
    local chunks = { "run `a`\n/thread t2\nrun `b`\n" }
    local i = 0
    f:serve(d, { thread = "one", user = "u", read = function() i = i + 1; return chunks[i] end })
    assert.same({ "one:run `a`", "t2:run `b`" }, got)
  end)
end)

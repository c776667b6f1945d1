-- Black-box: the console keeps its threads across restarts (issue 40: the record belongs to
-- the process that hosts the dispatcher, launch/host.lua). The real `switchboard console`,
-- twice, with the same state directory, asks on its standard input, the Messages API stand-in:
-- the second session's follow-up in the default thread carries the first session's ask and
-- answer; /new starts a thread with nothing before its ask; /thread NAME resumes another.
local core = require("switchboard.core")
local cjson = require("cjson")
local bin = require("support.bin")
local files = require("support.files")
local model = require("support.model")

local function say(text) return { content = { { type = "text", text = text } } } end

describe("console: a thread's record across restarts", function()
  local state, m
  before_each(function() state = files.tmpdir() end)
  after_each(function()
    if m then core.run(function() m.stop() end) end
    m = nil
    os.execute("rm -rf '" .. state .. "'")
  end)

  -- One console session with these lines on its standard input; returns its result.
  local function session(lines)
    return bin.run({ "console" }, { stdin = table.concat(lines, "\n") .. "\n", deadline_ms = 120000,
      env = { HOME = state, SWITCHBOARD_STATE_DIR = state, ANTHROPIC_BASE_URL = m.url, ANTHROPIC_API_KEY = m.key } })
  end

  local function said(req)
    return cjson.encode(req.body.messages)
  end

  it("answers a follow-up after a restart with the earlier ask and answer in the request", function()
    local reqs, r1, r2, r3, r4
    core.run(function()
      m = model.start()
      m:script{ say("It is 42."), say("Still 42, doubled 84."), say("A fresh start."), say("Back in other.") }
      -- one thread per session: two threads of one session would run at the same time and take
      -- the scripted answers in either order
      r1 = session({ "agent:general what is the answer?" })
      local r1b = session({ "/thread other", "agent:general remember kiwi" })
      assert(r1b.exit == 0, r1b.stderr)
      r2 = session({ "agent:general and doubled?" })
      r3 = session({ "/new", "agent:general anything before this?" })
      r4 = session({ "/thread other", "agent:general which fruit?" })
      reqs = m:requests()
    end)
    assert.equal(0, r1.exit, r1.stderr)
    assert.equal(0, r2.exit, r2.stderr)
    assert.equal(0, r3.exit, r3.stderr)
    assert.equal(0, r4.exit, r4.stderr)
    assert.equal(5, #reqs)
    -- the second session's first ask: the default thread continues where it stopped
    local second = said(reqs[3])
    assert.truthy(second:find("what is the answer?", 1, true), second)
    assert.truthy(second:find("It is 42.", 1, true), second)
    assert.truthy(second:find("and doubled?", 1, true), second)
    assert.is_nil(second:find("kiwi", 1, true), second) -- another thread's stays there
    -- /new: nothing before its ask
    local fresh = said(reqs[4])
    assert.equal(1, #reqs[4].body.messages, fresh)
    assert.is_nil(fresh:find("42", 1, true), fresh)
    assert.truthy(r3.stdout:find("thread: new%-%d+T%d+ %(new%)"), r3.stdout)
    -- /thread other resumes that thread's conversation
    local other = said(reqs[5])
    assert.truthy(other:find("remember kiwi", 1, true), other)
    assert.truthy(other:find("which fruit?", 1, true), other)
  end)
end)

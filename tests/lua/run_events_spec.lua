-- One event stream per agent run (lua/switchboard/dispatch/run_events.lua): every subscriber
-- gets every event in the order emitted, one event at a time (an event emitted while another is
-- delivered, by a subscriber or by another task while a subscriber yields, waits its turn); a
-- subscriber that raises is logged and does not stop the others; finish delivers the last
-- event and drops every subscriber. And the narrow run context: dispatch/agent_run.lua reads
-- nothing of the dispatcher, agent/run.lua writes no card and no transcript.
local core = require("switchboard.core")
local run_events = require("switchboard.dispatch.run_events")
local run_card = require("switchboard.dispatch.run_card")
local files = require("support.files")

local function collector(into, name)
  return function(e) into[#into + 1] = name .. ":" .. e.type end
end

describe("a run's event stream", function()
  it("delivers each event to every subscriber, in order, one event at a time", function()
    local got = {}
    core.run(function()
      local s = run_events.new()
      s:subscribe("a", function(e)
        got[#got + 1] = "a:" .. e.type
        -- an event emitted during a delivery comes after this one has reached every subscriber
        if e.type == "one" then s:emit{ type = "from_a" } end
      end)
      s:subscribe("b", collector(got, "b"))
      s:emit{ type = "one" }
      s:emit{ type = "two" }
    end)
    assert.same({ "a:one", "b:one", "a:from_a", "b:from_a", "a:two", "b:two" }, got)
  end)

  it("keeps the order when a subscriber yields and another task emits meanwhile", function()
    local got = {}
    core.run(function()
      local s = run_events.new()
      local yielded = core.signal()
      s:subscribe("slow", function(e)
        got[#got + 1] = "slow:" .. e.type
        if e.type == "first" then
          yielded:abort("yielding")
          core.sleep(50) -- a record write: the thread pool's round trip
        end
      end)
      s:subscribe("fast", collector(got, "fast"))
      core.go(function()
        core.sleep(3600 * 1000, yielded)
        s:emit{ type = "second" } -- another task (a fetch beside the run): queued, not interleaved
        got[#got + 1] = "emitter returned"
      end)
      s:emit{ type = "first" }
      s:finish{ type = "run_end" }
    end)
    assert.same({ "slow:first", "emitter returned", "fast:first", "slow:second", "fast:second",
                  "slow:run_end", "fast:run_end" }, got)
  end)

  it("logs a subscriber that raises, with its traceback, and the others still get the event", function()
    local got, logged = {}, {}
    core.run(function()
      local s = run_events.new{ fields = { thread = "main", ask = 7 },
        log = function(level, event, fields) logged[#logged + 1] = { level = level, event = event, fields = fields } end }
      s:subscribe("first", collector(got, "first"))
      s:subscribe("broken", function(e) if e.type == "turn" then error("the card broke") end end)
      s:subscribe("last", collector(got, "last"))
      s:emit{ type = "turn", turn = 1 }
      s:emit{ type = "answer" }
    end)
    assert.same({ "first:turn", "last:turn", "first:answer", "last:answer" }, got)
    assert.equal(1, #logged)
    assert.equal("error", logged[1].level)
    assert.equal("run_events.subscriber_failed", logged[1].event)
    assert.equal("broken", logged[1].fields.subscriber)
    assert.equal("turn", logged[1].fields.event)
    assert.equal("main", logged[1].fields.thread)
    assert.equal(7, logged[1].fields.ask)
    assert.matches("the card broke", logged[1].fields.error, 1, true)
    assert.matches("stack traceback", logged[1].fields.error, 1, true)
  end)

  it("drops every subscriber at finish: what is emitted after reaches nobody", function()
    local got = {}
    local s
    core.run(function()
      s = run_events.new()
      s:subscribe("a", collector(got, "a"))
      -- what a subscriber says about the last event (the GitHub reply's note) still goes out
      s:subscribe("replier", function(e) if e.type == "run_end" then s:emit{ type = "note" } end end)
      local off = s:subscribe("b", collector(got, "b"))
      s:emit{ type = "turn" }
      off() -- b unsubscribes itself
      s:emit{ type = "answer" }
      s:finish{ type = "run_end" }
      s:emit{ type = "note" }
      s:finish{ type = "run_end" }
    end)
    assert.same({ "a:turn", "b:turn", "a:answer", "a:run_end", "a:note" }, got)
    assert.equal(0, #s.subs)
  end)

  it("tells the facts a transcript keeps from what only a live card shows", function()
    for _, t in ipairs{ "run_start", "answer", "tool_result", "todos", "compaction", "message_in", "publish",
                        "diff", "run_end", "repository", "environment", "instructions", "asker", "model_error" } do
      assert.is_true(run_events.kept{ type = t }, t)
    end
    for _, t in ipairs{ "turn", "activity", "usage", "note", "thinking", "commentary", "waiting", "page", "steered",
                        "started", "phase", "saved" } do
      assert.is_false(run_events.kept{ type = t }, t)
    end
  end)

  it("is what the card follows: its state comes from the run's events", function()
    local c = run_card.new{ thread = "main", agent = "coding", ask = "fix it", max_turns = 5 }
    core.run(function()
      local s = run_card.events(c, function() return 5000 end)
      s:emit{ type = "turn", turn = 2 }
      s:emit{ type = "activity", text = "$ make test" }
      s:emit{ type = "usage", tokens_in = 1234, tokens_out = 56, cache_read = 0, cache_write = 0, cost_usd = 0.04 }
      s:emit{ type = "todos", todos = { { content = "read", status = "completed" }, { content = "fix", status = "in_progress" } } }
      s:emit{ type = "note", key = "compaction", text = "compacted once" }
      s:emit{ type = "note", key = "compaction", text = "compacted twice" }
      s:emit{ type = "steered", user = "ana", text = "also the docs" }
      s:emit{ type = "publish", state = "published", branch = "sb/x",
              pull_request = { url = "https://github.com/o/r/pull/3", number = 3, action = "opened", branch = "sb/x" } }
      s:emit{ type = "diff", added = 12, removed = 3, files = { {}, {} } }
      assert.equal(2, c.turns)
      assert.equal("$ make test", c.tool_now)
      assert.equal(1234, c.tokens_in)
      assert.same({ "☑ read", "▶ fix" }, c:checklist_lines())
      s:finish{ type = "run_end", state = "done", answer = "fixed" }
    end)
    assert.same({ "compacted twice", "↪ added to the running task: “also the docs”" }, c.notes)
    assert.equal("+12 −3 in 2 files", c:diff_line())
    assert.equal(3, c.pull_request.number)
    assert.equal("done", c.state)
    assert.equal(5000, c.finished_ms)
    assert.equal("fixed", c.answer)
  end)
end)

-- The narrow run context, read from the source: a kind of run reaches the dispatcher only
-- through the context the dispatcher builds for it (dispatch/dispatcher.lua run_context).
describe("the run context", function()
  local function code(path)
    -- the source without its comments
    return (files.read(path):gsub("%-%-[^\n]*", ""))
  end

  it("agent_run reads no dispatcher field and calls no dispatcher method", function()
    local src = code("lua/switchboard/dispatch/agent_run.lua")
    assert.is_nil(src:match("[^%w_]d[%.:][%a_]+"), "agent_run reaches into the dispatcher")
    assert.is_nil(src:find("remember(", 1, true) and src:match("[^%w_.]remember%("), "agent_run writes the record itself")
    for _, field in ipairs{ "card:", "card%.", "transcript:write" } do
      assert.is_nil(src:match(field), "agent_run writes " .. field .. " itself")
    end
    -- the record's writes are its subscriber's (dispatch/run_record.lua)
    for _, method in ipairs{ "run_start", "run_end", "run_cost", "event", "bind", "conversation", "save_conversation" } do
      assert.is_nil(src:match("record[%.:]" .. method .. "[^%w_]"), "agent_run calls the record's " .. method)
    end
  end)

  it("agent/run.lua writes no card and no transcript: it emits", function()
    local src = code("lua/switchboard/agent/run.lua")
    assert.is_nil(src:match("o%.card"), "agent/run.lua writes the card")
    assert.is_nil(src:match("o%.transcript"), "agent/run.lua writes the transcript")
    assert.truthy(src:match("o%.events:emit"))
  end)

  it("the Slack front keeps no reply address on the side: it travels in the ask", function()
    local src = code("lua/switchboard/fronts/slack/app.lua") .. code("lua/switchboard/fronts/slack/front.lua")
    assert.is_nil(src:match("note_ask"))
    -- and no ask is changed after the dispatcher took it
    assert.is_nil(src:match("ask%.review%s*="))
    assert.is_nil(src:match("ask%.card:add_note"))
  end)
end)

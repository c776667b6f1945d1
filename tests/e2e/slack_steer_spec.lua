-- Black-box: a person steers a working agent from its Slack thread (issue 40). The real
-- `switchboard slack` against the Slack stand-in (tests/support/slack_standin.py) and the
-- Messages API stand-in (tests/support/model_standin.py), commands on the local backend:
--   * a mention posted while the run's `sleep` runs reaches the run's next request, after the
--     tool results, and starts no second run; the card says so
--   * the model's todo_write checklist reaches chat.update; its commentary is on the card
--   * model:NAME reaches the request's `model` and sticks to the thread; effort:high turns
--     thinking on with the policy's budget
--   * a message posted in the thread between two runs reaches the second
local core = require("switchboard.core")
local cjson = require("cjson")
local async = require("support.async")
local tmp = require("support.tmp")
local files = require("support.files")
local P = require("support.policies")
local SL = require("support.slack")
local model = require("support.model")

local function say(text) return { content = { { type = "text", text = text } } } end
local function tool(name, input, text)
  local content = {}
  if text then content[1] = { type = "text", text = text } end
  content[#content + 1] = { type = "tool_use", name = name, input = input }
  return { content = content }
end

local function final_card(st, ts)
  return SL.wait(function()
    for _, c in ipairs(st:cards(ts)) do if SL.is_final(c) then return c end end
  end, "the final card in thread " .. ts, 120000)
end

-- The text of a request's last message (every text block, tool results' contents too).
local function last_text(req)
  local msgs = req.body.messages
  return cjson.encode(msgs[#msgs])
end

describe("slack: steering a working agent", function()
  local st, m, bot, dir
  before_each(async(function()
    m = model.start()
    st = SL.standin()
    dir = tmp.dir("steer")
  end))
  after_each(async(function()
    SL.kill_bot(bot)
    bot = nil
    st:close()
    m.stop()
    tmp.remove_all()
    P.cleanup()
  end))

  local function start_bot(policies)
    bot = SL.bot(st, { state_dir = dir .. "/st", policies = policies,
                       env = { ANTHROPIC_BASE_URL = m.url, ANTHROPIC_API_KEY = m.key } })
  end

  it("delivers a mention posted during a sleep to the run's next request, and starts no second run", async(function()
    local started = dir .. "/started"
    m:script{
      tool("bash", { command = ("touch %s; sleep 3"):format(started) }),
      say("All done, README checked too."),
    }
    start_bot()
    st:envelope("events_api", SL.mention{ ts = "1700001000.000100", text = "agent:coding count the files" })
    SL.wait(function() return files.read(started) end, "the sleep to start", 120000)
    st:envelope("events_api", SL.mention{ ts = "1700001000.000200", thread_ts = "1700001000.000100",
                                          text = "also check the README" })
    local card = SL.card_text(final_card(st, "1700001000.000100"))
    local reqs = m:requests()
    assert.equal(2, #reqs, "one run of two requests, no second run")
    local last = last_text(reqs[2])
    assert.truthy(last:find("tool_result", 1, true), last)
    assert.truthy(last:find("also check the README", 1, true), last)
    -- after the tool result, in the same user message
    assert.truthy(last:find("tool_result", 1, true) < last:find("also check the README", 1, true))
    assert.equal(1, #st:cards("1700001000.000100"), "one card in the thread")
    assert.truthy(card:find("added to the running task", 1, true), card)
    bot:signal("TERM")
    assert.equal(0, bot:wait().exit)
  end))

  it("shows the model's checklist and its commentary in chat.update while it works", async(function()
    local started = dir .. "/started"
    m:script{
      tool("todo_write", { todos = {
        { content = "read the code", status = "in_progress" },
        { content = "fix the bug", status = "pending" },
      } }, "I will make a plan first."),
      tool("bash", { command = ("touch %s; sleep 4"):format(started) }, "Now I run the check.\nLooking at the tests now."),
      { content = {
        { type = "tool_use", name = "todo_write", input = { todos = {
          { content = "read the code", status = "completed" },
          { content = "fix the bug", status = "in_progress" },
        } } },
        { type = "tool_use", name = "bash", input = { command = "sleep 4" } },
      } },
      say("Fixed."),
    }
    start_bot()
    st:envelope("events_api", SL.mention{ ts = "1700001100.000100", text = "agent:coding fix the bug" })
    SL.wait(function() return files.read(started) end, "the sleep to start", 120000)
    final_card(st, "1700001100.000100")
    -- chat.update is paced (slack.card.update_every_ms): the states that lasted seconds landed
    local updates = {}
    for _, c in ipairs(st:calls("chat.update")) do updates[#updates + 1] = cjson.encode(c.args) end
    local all = table.concat(updates, "\n")
    assert.truthy(all:find("▶ read the code", 1, true), all)
    assert.truthy(all:find("☐ fix the bug", 1, true), all)
    assert.truthy(all:find("Looking at the tests now.", 1, true), all)
    SL.wait(function()
      for _, c in ipairs(st:calls("chat.update")) do
        if cjson.encode(c.args):find("☑ read the code", 1, true) then return true end
      end
    end, "the completed item in a chat.update")
    -- the tool's result told the model the list was taken
    local reqs = m:requests()
    assert.truthy(last_text(reqs[2]):find("The list is updated (2 items, 0 completed)", 1, true))
    bot:signal("TERM")
    assert.equal(0, bot:wait().exit)
  end))

  it("takes model: and effort: from the ask into the request, and keeps them for the thread until changed", async(function()
    m:script{ say("2"), say("4"), say("6") }
    start_bot()
    local root = "1700001200.000100"
    st:envelope("events_api", SL.mention{ ts = root, text = "agent:coding model:opus effort:high what is 1+1?" })
    local card = SL.card_text(final_card(st, root))
    assert.truthy(card:find("claude-opus-4-5 · effort high", 1, true), card)
    st:envelope("events_api", SL.mention{ ts = "1700001200.000200", thread_ts = root, text = "agent:coding and 2+2?" })
    SL.wait(function() return #m:requests() >= 2 and #st:cards(root) == 2 and SL.is_final(st:cards(root)[2]) end,
      "the second run's final card", 120000)
    st:envelope("events_api", SL.mention{ ts = "1700001200.000300", thread_ts = root,
                                          text = "agent:coding model:claude-haiku-4-5 effort:low and 3+3?" })
    SL.wait(function() return #m:requests() >= 3 and #st:cards(root) == 3 and SL.is_final(st:cards(root)[3]) end,
      "the third run's final card", 120000)
    local reqs = m:requests()
    assert.equal("claude-opus-4-5", reqs[1].body.model)
    assert.equal(24000, reqs[1].body.thinking.budget_tokens)
    assert.truthy(reqs[1].body.max_tokens > 24000)
    assert.is_nil(reqs[1].body.temperature)
    -- the follow-up names neither: the thread's choice holds
    assert.equal("claude-opus-4-5", reqs[2].body.model)
    assert.equal(24000, reqs[2].body.thinking.budget_tokens)
    -- changed: another model, and effort:low turns thinking off
    assert.equal("claude-haiku-4-5", reqs[3].body.model)
    assert.is_nil(reqs[3].body.thinking)
    bot:signal("TERM")
    assert.equal(0, bot:wait().exit)
  end))

  it("refuses a model the agent does not allow, saying which it may use", async(function()
    start_bot()
    st:envelope("events_api", SL.mention{ ts = "1700001300.000100", text = "agent:coding model:gpt-9 hi" })
    local answer = SL.wait(function() return st:answers("1700001300.000100")[1] end, "the refusal")
    assert.truthy(answer:find("model:gpt-9 is not allowed for agent:coding", 1, true), answer)
    assert.truthy(answer:find("claude-opus-4-5", 1, true), answer)
    assert.equal(0, #m:requests())
    bot:signal("TERM")
    assert.equal(0, bot:wait().exit)
  end))

  it("gives the second run the messages posted in the thread since the first", async(function()
    m:script{ say("The first answer."), say("The second answer.") }
    start_bot()
    -- the stand-in's message timestamps count up from 1700000000.0001 by 0.0001: this ask comes
    -- before the bot's first card, as in Slack
    local root = "1700000000.000150"
    st:envelope("events_api", SL.mention{ ts = root, text = "agent:coding where are the tests?" })
    local card1 = final_card(st, root)
    local after = tonumber(card1.ts)
    st:control("thread", { channel = "C0GEN", ts = root, messages = {
      { ts = ("%.6f"):format(after + 0.00002), user = "U0BOB", text = "by the way, the tests are in spec/" },
    } })
    st:envelope("events_api", SL.mention{ ts = ("%.6f"):format(after + 0.00004), thread_ts = root,
                                          text = "agent:coding so please try them" })
    SL.wait(function() return #st:cards(root) == 2 and SL.is_final(st:cards(root)[2]) end, "the second run's final card", 120000)
    local reqs = m:requests()
    assert.equal(2, #reqs)
    local last = last_text(reqs[2])
    assert.truthy(last:find("since the previous run", 1, true), last)
    assert.truthy(last:find("U0BOB: by the way, the tests are in spec", 1, true), last)
    assert.is_nil(last_text(reqs[1]):find("by the way", 1, true))
    local card2 = SL.card_text(st:cards(root)[2])
    assert.truthy(card2:find("1 new message of this thread since the previous run", 1, true), card2)
    bot:signal("TERM")
    assert.equal(0, bot:wait().exit)
  end))
end)

-- Black-box (docs/slack.md "Running it"): a TERM ends `switchboard slack` within slack.drain_ms
-- whatever Slack is doing — refusing connections (the Socket Mode connection reconnecting, the
-- final cards failing) or accepting them and never answering — and a second TERM still ends it
-- at once. The real binary against the Slack stand-in, which is killed or stopped (SIGSTOP)
-- while an ask runs.
local core = require("switchboard.core")
local async = require("support.async")
local tmp = require("support.tmp")
local P = require("support.policies")
local SL = require("support.slack")

local DRAIN_S = 4
-- far under what Slack's outage holds a drain without a deadline (final cards are retried for
-- slack.api.final_give_up_ms, 10 min; one stalled call takes api.deadline_ms, 10 s), far over
-- what a busy machine adds to the drain
local SLACK_S = 12

local function start(st, state_dir)
  return SL.bot(st, { state_dir = state_dir, policies = P.dir{ slack = function(src)
    return src .. ("\ndrain_ms = %d * second\nflush_ms = 1 * second\n"):format(DRAIN_S)
  end } })
end

-- TERM, then the seconds until the process ended (or nil when it ran past the bound).
local function term_and_time(bot)
  bot.watched = true
  core.go(function() bot:wait() end)
  local t0 = core.now_ms()
  bot:signal("TERM")
  local ended = pcall(SL.wait, function() return bot.result end, "the bot to exit", (DRAIN_S + SLACK_S) * 1000)
  return ended and (core.now_ms() - t0) / 1000 or nil
end

local function kill(pid, sig)
  assert(core.spawn{ argv = { "/bin/kill", "-" .. sig, tostring(pid) } }):wait()
end

describe("a TERM while Slack is unreachable", function()
  local st, bot, state_dir, stopped

  before_each(async(function()
    state_dir = tmp.dir("slack-drain")
    st = SL.standin()
    stopped = false
  end))

  after_each(async(function()
    if bot and not bot.result then
      bot:signal("KILL")
      if bot.watched then SL.wait(function() return bot.result end, "the killed bot") else bot:wait() end
    end
    bot = nil
    if stopped then kill(st.proc.pid, "CONT") end
    st:close()
    tmp.remove_all()
    P.cleanup()
  end))

  -- A running ask whose card is up, so the drain has an ask to wait for and a final card to send.
  local function ask_running(T)
    bot = start(st, state_dir)
    st:envelope("events_api", SL.mention{ ts = T, text = "run `sleep 60`" })
    SL.wait(function() return st:cards(T)[1] end, "the running ask's card")
  end

  it("Slack refusing connections: the bot exits 0 within drain_ms, the running ask killed", async(function()
    ask_running("1700000601.000100")
    st:close() -- Slack is gone: the Web API refuses, Socket Mode reconnects
    SL.wait(function() return bot.err:find("slack.socket_dropped", 1, true) end, "the connection dropped")
    local took = term_and_time(bot)
    assert(took, ("still running %d s after TERM (drain_ms = %d s):\n%s"):format(DRAIN_S + SLACK_S, DRAIN_S, bot.err))
    assert.equals(0, bot.result.exit, bot.err)
    assert.matches("dispatch.drain_kill", bot.err, 1, true)
    assert.matches("slack.drain_cut", bot.err, 1, true)
    assert.matches("slack.stopped", bot.err, 1, true)
    st = SL.standin() -- for the teardown
  end))

  it("Slack accepting and never answering: the same, the calls in flight cut at the deadline", async(function()
    ask_running("1700000602.000100")
    kill(st.proc.pid, "STOP")
    stopped = true
    local took = term_and_time(bot)
    assert(took, ("still running %d s after TERM (drain_ms = %d s):\n%s"):format(DRAIN_S + SLACK_S, DRAIN_S, bot.err))
    assert.equals(0, bot.result.exit, bot.err)
    assert.matches("slack.drain_cut", bot.err, 1, true)
  end))

  it("a second TERM ends the drain at once", async(function()
    ask_running("1700000603.000100")
    kill(st.proc.pid, "STOP")
    stopped = true
    bot:signal("TERM")
    SL.wait(function() return bot.err:find("slack.draining", 1, true) end, "the drain to begin")
    local took = term_and_time(bot)
    assert(took, "a second TERM did not end the bot:\n" .. bot.err)
    assert.equals(0, bot.result.exit, bot.err)
    assert.is_true(took < DRAIN_S, ("the second TERM took %.1f s"):format(took))
  end))
end)

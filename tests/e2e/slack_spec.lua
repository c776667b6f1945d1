-- Black-box: `switchboard slack` against the Slack stand-in (tests/support/slack_standin.py),
-- which speaks Slack's Web API over HTTP and Socket Mode over a real WebSocket; Events API
-- requests are signed here the way Slack signs them.
local core = require("switchboard.core")
local cjson = require("cjson")
local async = require("support.async")
local tmp = require("support.tmp")
local P = require("support.policies")
local SL = require("support.slack")

local function final_card(st, thread_ts)
  local cards = st:cards(thread_ts)
  local last = cards[#cards]
  if last and SL.is_final(last) then return last, cards end
end

local function wait_final(st, thread_ts, n)
  return SL.wait(function()
    local cards = st:cards(thread_ts)
    local finals = {}
    for _, c in ipairs(cards) do if SL.is_final(c) then finals[#finals + 1] = c end end
    if #finals >= (n or 1) then return finals end
  end, "the final card in thread " .. thread_ts)
end

local function tokens_absent(text)
  for _, secret in ipairs({ SL.BOT_TOKEN, SL.APP_TOKEN, SL.SIGNING_SECRET, "standinbotsecret",
                            "standinappsecret", "ticket=" }) do
    assert.is_nil(text:find(secret, 1, true), "a secret in the log: " .. secret)
  end
end

local function policies(slack_lines)
  return P.dir{ slack = function(src) return src .. "\n" .. (slack_lines or "") end }
end

-- A case's teardown: its bot (if it is still running) and its stand-in go, with their files.
local function kill_bot_and_standin(bot, st)
  if bot and not bot.result then
    bot:signal("KILL")
    bot:wait()
  end
  st:close()
  tmp.remove_all()
  P.cleanup()
end

describe("switchboard slack, Socket Mode", function()
  local st, bot, state_dir

  before_each(async(function()
    state_dir = tmp.dir("slack")
    st = SL.standin()
    -- spans go to stderr too (--trace -), so the token checks below cover them
    bot = SL.bot(st, { state_dir = state_dir, policies = policies("drain_ms = 2 * second"),
                       args = { "--trace", "-" } })
  end))

  after_each(async(function() kill_bot_and_standin(bot, st) end))

  it("acks a mention, posts its card in the thread with a reaction, updates it, and the result lands", async(function()
    local sent = st:envelope("events_api", SL.mention{ ts = "1700000001.000100",
      text = "run `printf '%s\\n' a &amp;&amp; echo \"&lt;b&gt;\" &amp;&amp; sleep 4`" })
    local finals = wait_final(st, "1700000001.000100")
    local s = st:state()
    assert.equals(sent.envelope_id, s.acks[1].envelope_id)
    local text = SL.card_text(finals[1])
    assert.matches("✓ exit 0", text, 1, true)
    assert.matches("```a\n&lt;b&gt;```", text, 1, true)   -- the ask's escaping undone, the output's redone
    assert.equals(1, #st:cards("1700000001.000100"))      -- one card, edited in place
    assert.is_true(finals[1].updates >= 2)                 -- running… (card.update_every_ms: 3 s), then the result
    -- 👀 while it ran, replaced by ✅ at its end (slack.reaction_end)
    assert.same({ channel = "C0GEN", timestamp = "1700000001.000100", name = "eyes" }, st:calls("reactions.add")[1].args)
    SL.wait(function()
      local r = st:state().reactions
      return #r == 1 and r[1].name == "white_check_mark" and r[1].timestamp == "1700000001.000100"
    end, "✅ in place of 👀 on the ask")
    bot:signal("TERM")
    assert.equals(0, bot:wait().exit)
    tokens_absent(bot.err)
  end))

  it("paces a card's progress at most once per card.update_every_ms (3 s), coalescing the states in between", async(function()
    st:envelope("events_api", SL.mention{ ts = "1700000013.000100", text = "run `sleep 7; echo slow`" })
    local card = wait_final(st, "1700000013.000100")[1]
    local post, updates = nil, {}
    for _, c in ipairs(st:calls()) do
      if c.method == "chat.postMessage" and c.args.thread_ts == "1700000013.000100" then post = c end
      if c.method == "chat.update" and c.args.ts == card.ts then updates[#updates + 1] = c end
    end
    -- provisioning is posted; each progress update (running, its seconds) comes at least three
    -- seconds after the one before; the final one is not paced (the next case)
    assert.is_true(#updates >= 2, #updates .. " updates")
    local prev = post.at
    for i = 1, #updates - 1 do
      assert.is_true(updates[i].at - prev >= 2800, "progress updated after " .. (updates[i].at - prev) .. " ms")
      prev = updates[i].at
    end
    assert.matches("slow", SL.card_text(card), 1, true)
  end))

  it("runs a follow-up in the same thread's workspace while another thread runs", async(function()
    -- 12 s: the other thread's two cards, each updated at most every card.update_every_ms (3 s),
    -- land well before it
    st:envelope("events_api", SL.mention{ ts = "1700000002.000100", text = "run `sleep 12; echo slow`" })
    st:envelope("events_api", SL.mention{ ts = "1700000003.000100", text = "run `echo hi > marker.txt`" })
    st:envelope("events_api", SL.mention{ ts = "1700000003.000200", thread_ts = "1700000003.000100",
                                          text = "run `cat marker.txt`" })
    -- the two cards of the thread may be posted in either order; the queue runs the asks in order
    local follow_up
    for _, c in ipairs(wait_final(st, "1700000003.000100", 2)) do
      if SL.card_text(c):find("cat marker.txt", 1, true) then follow_up = c end
    end
    assert.is_not_nil(follow_up, "no card for the follow-up")
    assert.matches("```hi```", SL.card_text(follow_up), 1, true)
    assert.is_nil(final_card(st, "1700000002.000100"), "the slow thread held up the other one")
    wait_final(st, "1700000002.000100")
  end))

  it("stops a command with the Stop button and with a typed stop", async(function()
    st:envelope("events_api", SL.mention{ ts = "1700000004.000100", text = "run `sleep 60`" })
    st:envelope("events_api", SL.mention{ ts = "1700000005.000100", text = "run `sleep 60`" })
    SL.wait(function()
      local a, b = st:cards("1700000004.000100")[1], st:cards("1700000005.000100")[1]
      return a and b and SL.card_text(a):find("running", 1, true) and SL.card_text(b):find("running", 1, true)
    end, "both commands running")
    st:envelope("interactive", SL.stop_press("1700000004.000100"))
    st:envelope("events_api", SL.mention{ ts = "1700000005.000200", thread_ts = "1700000005.000100", text = "stop" })
    local a = wait_final(st, "1700000004.000100")[1]
    local b = wait_final(st, "1700000005.000100")[1]
    assert.matches("■ stopped", SL.card_text(a), 1, true)
    assert.matches("Stop pressed by", SL.card_text(a), 1, true)
    assert.matches("■ stopped", SL.card_text(b), 1, true)
    assert.matches("stop asked in this thread", SL.card_text(b), 1, true)
  end))

  it("answers a disconnect by opening the new connection first, losing and repeating nothing", async(function()
    st:envelope("events_api", SL.mention{ ts = "1700000006.000100", text = "run `sleep 2; echo done`" })
    SL.wait(function() return st:cards("1700000006.000100")[1] end, "the card")
    st:control("disconnect", { reason = "refresh_requested" })
    SL.wait(function() return st:state().hellos == 2 end, "the second connection")
    SL.wait(function() return #st:state().closed == 1 end, "the old connection closed")
    local s = st:state()
    assert.equals(1000, s.closed[1].code)             -- closed by us, cleanly, after the new one said hello
    assert.same({ 2 }, s.open_connections)
    -- the same event again on the new connection (a retry across the refresh) runs once
    local again = SL.mention{ ts = "1700000006.000100", text = "run `sleep 2; echo done`", event_id = "EvSame" }
    st:envelope("events_api", again)
    st:envelope("events_api", again)
    local finals = wait_final(st, "1700000006.000100")
    assert.matches("done", SL.card_text(finals[1]), 1, true)
    st:envelope("events_api", SL.mention{ ts = "1700000007.000100", text = "run `echo after`" })
    wait_final(st, "1700000007.000100")
    assert.equals(1, #st:cards("1700000006.000100"))
    assert.equals(4, #st:state().acks)                -- every envelope was acked …
    for _, a in ipairs(st:state().acks) do assert.is_true(a.latency_ms < 5000) end
    assert.equals(0, #st:state().unacked_junk)        -- … and nothing else was sent
  end))

  it("reconnects after a dropped connection", async(function()
    st:control("drop", {})
    SL.wait(function() return st:state().hellos == 2 end, "a new connection after the drop")
    st:envelope("events_api", SL.mention{ ts = "1700000008.000100", text = "run `echo back`" })
    assert.matches("back", SL.card_text(wait_final(st, "1700000008.000100")[1]), 1, true)
  end))

  it("still lands the final card through a storm of 429s on chat.update", async(function()
    st:control("rate_limit", { method = "chat.update", count = 4, retry_after = 1 })
    st:envelope("events_api", SL.mention{ ts = "1700000009.000100", text = "run `sleep 1; echo through`" })
    local card = wait_final(st, "1700000009.000100")[1]
    assert.matches("through", SL.card_text(card), 1, true)
    local limited = 0
    for _, c in ipairs(st:calls("chat.update")) do if c.answer == 429 then limited = limited + 1 end end
    assert.equals(4, limited)
  end))

  it("uploads output beyond the card as a file in the thread and links it", async(function()
    st:envelope("events_api", SL.mention{ ts = "1700000010.000100", text = "run `seq 1 20000`" })
    local card = wait_final(st, "1700000010.000100")[1]
    local text = SL.card_text(card)
    local s = st:state()
    local up
    for _, u in pairs(s.uploads) do up = u end
    assert.is_truthy(up, "no upload")
    assert.is_true(up.completed)
    assert.equals("1700000010.000100", up.thread_ts)
    assert.equals("C0GEN", up.channel_id)
    assert.matches("\n19999\n20000\n$", up.bytes)
    assert.equals(up.length, up.received)
    assert.matches("https://acme.slack.com/files/", text, 1, true)
    assert.matches("cut here", text, 1, true)
    for _, b in ipairs(card.blocks) do
      if b.text then assert.is_true(#b.text.text <= 3000) end
    end
  end))

  it("ignores bots, edits and other subtypes, and refuses whoever policy does not allow", async(function()
    st:envelope("events_api", SL.mention{ ts = "1700000011.000100", text = "run `echo bot`", bot_id = "B9" })
    st:envelope("events_api", SL.mention{ ts = "1700000011.000200", text = "run `echo edit`", subtype = "message_changed" })
    st:envelope("events_api", SL.mention{ ts = "1700000011.000300", text = "run `echo other`", team = "T0OTHER" })
    SL.wait(function() return #st:answers("1700000011.000300") == 1 end, "the refusal")
    assert.matches("Sorry", st:answers("1700000011.000300")[1], 1, true)
    assert.equals(0, #st:cards("1700000011.000100"))
    assert.equals(0, #st:cards("1700000011.000200"))
    assert.equals(0, #st:cards("1700000011.000300"))
    assert.equals(0, #st:calls("chat.update"))
  end))

  it("on TERM lets running asks finish up to the drain time, posts their final cards and exits 0", async(function()
    st:envelope("events_api", SL.mention{ ts = "1700000012.000100", text = "run `sleep 60`" })
    SL.wait(function()
      local c = st:cards("1700000012.000100")[1]
      return c and SL.card_text(c):find("running", 1, true)
    end, "the command running")
    bot:signal("TERM")
    local r = bot:wait()
    assert.equals(0, r.exit)
    local card = final_card(st, "1700000012.000100")
    assert.is_truthy(card, "no final card after TERM")
    assert.matches("stopped", SL.card_text(card), 1, true)
    tokens_absent(bot.err)
  end))
end)

describe("switchboard slack, a second TERM", function()
  local st, bot

  after_each(async(function() kill_bot_and_standin(bot, st) end))

  -- The drain is a minute, so the second TERM lands inside it; Slack holds every card update
  -- back (429, Retry-After 5 s), so the front still has a final update to send when the drain
  -- ends. The bot once slept for ever here: the flush got a signal already aborted.
  it("ends the drain at once and exits though Slack still holds a final card back", async(function()
    st = SL.standin()
    bot = SL.bot(st, { state_dir = tmp.dir("slack"), policies = policies("drain_ms = 60 * second") })
    st:envelope("events_api", SL.mention{ ts = "1700000040.000100", text = "run `sleep 120`" })
    SL.wait(function()
      local c = st:cards("1700000040.000100")[1]
      return c and SL.card_text(c):find("running", 1, true)
    end, "the command running")
    st:control("rate_limit", { method = "chat.update", count = 1000, retry_after = 5 })
    bot:signal("TERM")
    SL.wait(function() return bot.err:find("slack.draining", 1, true) end, "the drain to begin")
    bot:signal("TERM")
    -- 30 s: half the drain, and six of Slack's Retry-After; the bot must be gone well before
    SL.wait(function() return not require("support.procs").alive(bot.proc.pid) end,
      "the bot to exit after the second TERM", 30000)
    assert.equals(0, bot:wait().exit)
    tokens_absent(bot.err)
  end))
end)

describe("switchboard slack, Events API", function()
  local st, bot

  before_each(async(function()
    st = SL.standin()
    bot = SL.bot(st, { state_dir = tmp.dir("slack"), args = { "--listen", "127.0.0.1:0" },
                       env = { SLACK_APP_TOKEN = false, SLACK_SIGNING_SECRET = SL.SIGNING_SECRET } })
  end))

  after_each(async(function()
    if not bot.result then
      bot:signal("TERM")
      bot:wait()
    end
    st:close()
    tmp.remove_all()
  end))

  it("answers url_verification and /healthz with the build stamp", async(function()
    local body = cjson.encode({ type = "url_verification", token = "x", challenge = "ch4ll3nge" })
    local status, _, answer = bot:post("/slack/events", body, SL.sign(body))
    assert.equals(200, status)
    assert.equals("ch4ll3nge", cjson.decode(answer).challenge)
    local hs, _, hb = core.http.request{ url = ("http://127.0.0.1:%d/healthz"):format(bot.events_port), deadline_ms = 5000 }
    assert.equals(200, hs)
    assert.same(core.build.commit, cjson.decode(hb).build.commit)
    -- one spelling of the stamp on every /healthz (sandboxd's, the resident's, `version --json`)
    assert.same(core.build.built_at, cjson.decode(hb).build.builtAt)
    assert.is_nil(cjson.decode(hb).build.built_at)
  end))

  it("refuses unsigned, wrongly signed and stale requests with 401 and runs nothing", async(function()
    local body = cjson.encode(SL.mention{ ts = "1700000020.000100", text = "run `echo no`" })
    local stale_ts = tostring(math.floor(core.wall_ms() / 1000) - 301)
    local cases = {
      {},
      SL.sign(body, nil, "not-the-secret"),
      SL.sign(body, stale_ts),
      SL.sign(body .. " "),
    }
    for i, headers in ipairs(cases) do
      local status = bot:post("/slack/events", body, headers)
      assert.equals(401, status, "case " .. i)
    end
    -- a good one afterwards runs, so the 401s were not for another reason
    local good = cjson.encode(SL.mention{ ts = "1700000021.000100", text = "run `echo yes`" })
    assert.equals(200, (bot:post("/slack/events", good, SL.sign(good))))
    wait_final(st, "1700000021.000100")
    assert.equals(0, #st:cards("1700000020.000100"))
    assert.equals(1, #st:calls("chat.postMessage"))
  end))

  it("acks within the deadline, runs a retried event_id once, and stops from a signed action", async(function()
    local ev = SL.mention{ ts = "1700000022.000100", text = "run `sleep 60`", event_id = "EvRetry1" }
    local body = cjson.encode(ev)
    local t0 = core.now_ms()
    assert.equals(200, (bot:post("/slack/events", body, SL.sign(body))))
    assert.is_true(core.now_ms() - t0 < 3000)
    local h = SL.sign(body)
    h["x-slack-retry-num"] = "1"
    h["x-slack-retry-reason"] = "http_timeout"
    assert.equals(200, (bot:post("/slack/events", body, h)))
    SL.wait(function()
      local c = st:cards("1700000022.000100")[1]
      return c and SL.card_text(c):find("running", 1, true)
    end, "the command running")
    local form = "payload=" .. cjson.encode(SL.stop_press("1700000022.000100")):gsub("[^%w]", function(c)
      return ("%%%02X"):format(c:byte())
    end)
    local fh = SL.sign(form)
    fh["content-type"] = "application/x-www-form-urlencoded"
    assert.equals(200, (bot:post("/slack/actions", form, fh)))
    local card = wait_final(st, "1700000022.000100")[1]
    assert.matches("■ stopped", SL.card_text(card), 1, true)
    assert.equals(1, #st:cards("1700000022.000100"))
    assert.equals(1, #st:calls("chat.postMessage"))
  end))
end)

describe("switchboard slack, both modes at once", function()
  it("runs an event that arrives over Socket Mode and the Events API once", async(function()
    local st = SL.standin()
    local bot = SL.bot(st, { state_dir = tmp.dir("slack"), args = { "--listen", "127.0.0.1:0" },
                             env = { SLACK_SIGNING_SECRET = SL.SIGNING_SECRET } })
    local ev = SL.mention{ ts = "1700000040.000100", text = "run `echo once`", event_id = "EvBoth" }
    st:envelope("events_api", ev)
    local body = cjson.encode(ev)
    assert.equals(200, (bot:post("/slack/events", body, SL.sign(body))))
    local ev2 = SL.mention{ ts = "1700000041.000100", text = "run `echo http`" }
    local body2 = cjson.encode(ev2)
    assert.equals(200, (bot:post("/slack/events", body2, SL.sign(body2))))
    wait_final(st, "1700000040.000100")
    wait_final(st, "1700000041.000100")
    assert.equals(1, #st:cards("1700000040.000100"))
    assert.equals(2, #st:calls("chat.postMessage"))
    bot:signal("TERM")
    assert.equals(0, bot:wait().exit)
    st:close()
    tmp.remove_all()
  end))
end)

describe("switchboard slack, starting", function()
  local st
  before_each(async(function() st = SL.standin() end))
  after_each(async(function() st:close(); tmp.remove_all() end))

  it("fails the start naming the token Slack refused and what it answered", async(function()
    local bot = SL.bot(st, { no_wait = true, env = { SLACK_BOT_TOKEN = "xoxb-wrong-1234567890" } })
    local r = bot:wait()
    assert.equals(78, r.exit)
    assert.matches("SLACK_BOT_TOKEN was refused by Slack's auth.test: invalid_auth", bot.err, 1, true)
    assert.is_nil(bot.err:find("xoxb-wrong-1234567890", 1, true))
    bot = SL.bot(st, { no_wait = true, env = { SLACK_APP_TOKEN = "xapp-wrong-1234567890" } })
    r = bot:wait()
    assert.equals(78, r.exit)
    assert.matches("SLACK_APP_TOKEN was refused by Slack's apps.connections.open: invalid_auth", bot.err, 1, true)
    assert.is_nil(bot.err:find("xapp-wrong-1234567890", 1, true))
  end))

  it("serves /healthz on --health-listen in Socket Mode and reloads policies on HUP", async(function()
    local dir = policies()
    local bot = SL.bot(st, { state_dir = tmp.dir("slack"), policies = dir,
                             args = { "--health-listen", "127.0.0.1:0" } })
    local hs, _, hb = core.http.request{ url = ("http://127.0.0.1:%d/healthz"):format(bot.health_port), deadline_ms = 5000 }
    assert.equals(200, hs)
    assert.is_true(cjson.decode(hb).ok)
    local es = core.http.request{ method = "POST", url = ("http://127.0.0.1:%d/slack/events"):format(bot.health_port),
                                  body = "{}", deadline_ms = 5000 }
    assert.equals(404, es)
    P.write(dir .. "/slack.lua", P.read(dir .. "/slack.lua") .. '\nallow.users = { "U0ANA" }\n')
    bot:signal("HUP")
    SL.wait(function() return bot.err:find("policy.reloaded", 1, true) end, "the reload")
    st:envelope("events_api", SL.mention{ ts = "1700000030.000100", text = "run `echo no`", user = "U0BOB" })
    st:envelope("events_api", SL.mention{ ts = "1700000031.000100", text = "run `echo yes`", user = "U0ANA" })
    wait_final(st, "1700000031.000100")
    SL.wait(function() return #st:answers("1700000030.000100") == 1 end, "the refusal")
    assert.equals(0, #st:cards("1700000030.000100"))
    bot:signal("TERM")
    assert.equals(0, bot:wait().exit)
    P.cleanup()
  end))
end)

describe("switchboard slack, a card's final state", function()
  local st, bot

  before_each(async(function()
    st = SL.standin()
    -- progress paced far apart: a final state that waited for the next slot would come ~20 s late
    bot = SL.bot(st, { state_dir = tmp.dir("slack"), policies = policies("card.update_every_ms = 20 * second") })
  end))

  after_each(async(function() kill_bot_and_standin(bot, st) end))

  it("goes out at once when the run ends, not at the next progress slot (issue 36)", async(function()
    -- the command prints its own end on CLOCK_MONOTONIC, the stand-in's clock for its calls
    st:envelope("events_api", SL.mention{ ts = "1700000021.000100",
      text = "run `sleep 1; python3 -c 'import time; print(int(time.monotonic() * 1000))'`" })
    local card = wait_final(st, "1700000021.000100")[1]
    local ended_ms = tonumber(SL.card_text(card):match("```(%d+)```"))
    assert.is_not_nil(ended_ms, SL.card_text(card))
    local updates = {}
    for _, c in ipairs(st:calls()) do
      if c.method == "chat.update" and c.args.ts == card.ts then updates[#updates + 1] = c end
    end
    assert.equals(1, #updates) -- no progress within the 20 s pacing: the final alone
    local lag = updates[1].at - ended_ms
    -- compared with the pacing interval, not an absolute: at most a quarter of it
    assert.is_true(lag < 20000 / 4, ("the final card went %.0f ms after the command ended"):format(lag))
  end))
end)

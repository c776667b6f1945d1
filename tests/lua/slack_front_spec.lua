-- The Slack front's pure pieces: text, events, dedup, signatures, Block Kit, policy, Web API.
local core = require("switchboard.core")
local cjson = require("cjson")
local async = require("support.async")
local text = require("switchboard.fronts.slack.text")
local events = require("switchboard.fronts.slack.events")
local dedup = require("switchboard.fronts.slack.dedup")
local http = require("switchboard.fronts.slack.http")
local blocks = require("switchboard.fronts.slack.blocks")
local app = require("switchboard.fronts.slack.app")
local webapi = require("switchboard.fronts.slack.webapi")
local card_mod = require("switchboard.dispatch.card")
local front_mod = require("switchboard.fronts.slack.front")

local BOT = { user_id = "U0BOT", bot_id = "B0BOT", team_id = "T0ACME" }

describe("slack text", function()
  it("strips the bot's mention and undoes Slack's escaping, keeping backticks", function()
    assert.equals("run `a && b > c < d`", text.ask_text("<@U0BOT> run `a &amp;&amp; b &gt; c &lt; d`", "U0BOT"))
    assert.equals("run `ls` in https://github.com/acme/api",
      text.ask_text("<@U0BOT|switchboard>: run `ls` in <https://github.com/acme/api>", "U0BOT"))
    assert.equals("see acme.com and @U0ANA in #general, @here",
      text.ask_text("see <http://acme.com|acme.com> and <@U0ANA> in <#C1|general>, <!here>", "U0BOT"))
    assert.equals("echo &lt; literally", text.ask_text("echo &amp;lt; literally", "U0BOT"))
    assert.equals("a @U0BOT in the middle", text.ask_text("a <@U0BOT> in the middle", "U0BOT"))
  end)

  it("escapes for mrkdwn", function()
    assert.equals("a &amp;&amp; b &lt;c&gt;", text.escape("a && b <c>"))
  end)
end)

describe("slack events", function()
  local function cb(ev) return { type = "event_callback", team_id = "T0ACME", event_id = "Ev1", event = ev } end

  it("takes app_mentions and DMs, keyed by the thread's root", function()
    local a = events.ask(cb{ type = "app_mention", user = "U1", channel = "C1", ts = "2.0", thread_ts = "1.0",
                             text = "<@U0BOT> run `ls`" }, BOT)
    assert.same({ team = "T0ACME", channel = "C1", thread_ts = "1.0", ts = "2.0", user = "U1",
                  text = "run `ls`", event_id = "Ev1" }, a)
    local dm = events.ask(cb{ type = "message", channel_type = "im", user = "U1", channel = "D1", ts = "3.0",
                              text = "help" }, BOT)
    assert.equals("3.0", dm.thread_ts)
    assert.equals("T0ACME/D1/3.0", events.thread_name(dm.team, dm.channel, dm.thread_ts))
  end)

  it("ignores bots, itself, subtypes, edits and channel messages", function()
    local base = { type = "app_mention", user = "U1", channel = "C1", ts = "2.0", text = "x" }
    local function with(k, v) local e = {} for kk, vv in pairs(base) do e[kk] = vv end e[k] = v return e end
    assert.is_nil(events.ask(cb(with("bot_id", "B1")), BOT))
    assert.is_nil(events.ask(cb(with("user", "U0BOT")), BOT))
    assert.is_nil(events.ask(cb(with("subtype", "message_changed")), BOT))
    assert.is_nil(events.ask(cb(with("edited", { user = "U1" })), BOT))
    assert.is_nil(events.ask(cb(with("type", "message")), BOT))
    assert.is_nil(events.ask({ type = "url_verification" }, BOT))
  end)

  it("reads a Stop press and refuses one naming another thread", function()
    local p = { type = "block_actions", team = { id = "T0ACME" }, user = { id = "U1" }, channel = { id = "C1" },
                actions = { { action_id = events.STOP_ACTION, value = "T0ACME/C1/1.0" } } }
    assert.same({ team = "T0ACME", channel = "C1", thread_ts = "1.0", user = "U1", value = "T0ACME/C1/1.0" },
      events.stop_action(p, BOT))
    p.channel.id = "C2"
    assert.is_nil(events.stop_action(p, BOT))
  end)
end)

describe("slack dedup", function()
  it("says first once per key within the ttl, and forgets after it", function()
    local now = 0
    local d = dedup.new{ ttl_ms = 1000, max = 3, now_ms = function() return now end }
    assert.is_true(d:first("a"))
    assert.is_false(d:first("a"))
    now = 1500
    assert.is_true(d:first("a"))
    for _, k in ipairs({ "b", "c", "d", "e" }) do assert.is_true(d:first(k)) end
    assert.is_true(d:first("a")) -- pushed out by max
  end)
end)

describe("slack dedup with a store", function()
  it("asks the store only for keys memory has not seen, and lets memory decide when the store fails", function()
    local asked, answer = {}, false
    local store = { claim = function(_, key, ttl)
      asked[#asked + 1] = key .. "/" .. ttl
      if answer == nil then return nil, "disk full" end
      return answer
    end }
    local logged = {}
    local d = dedup.new{ ttl_ms = 1000, now_ms = function() return 0 end, store = store, prefix = "p:",
                         log = function(_, event) logged[#logged + 1] = event end }
    assert.is_false(d:first("a")) -- seen by another process, or before a restart
    assert.is_false(d:first("a")) -- and now memory knows
    answer = true
    assert.is_true(d:first("b"))
    assert.is_false(d:first("b"))
    assert.same({ "p:a/1000", "p:b/1000" }, asked)
    answer = nil
    assert.is_true(d:first("c"))
    assert.same({ "dedup.store_failed" }, logged)
  end)
end)

describe("slack signatures", function()
  local secret = "s3cr3t"
  local function sign(body, ts)
    return { ["x-slack-request-timestamp"] = ts,
             ["x-slack-signature"] = "v0=" .. core.crypto.hex(core.crypto.hmac_sha256(secret, "v0:" .. ts .. ":" .. body)) }
  end
  it("accepts Slack's v0 signature within the window and nothing else", function()
    assert.is_true(http.verify(secret, sign("{}", "1000"), "{}", 1000, 300))
    assert.is_true(http.verify(secret, sign("{}", "1000"), "{}", 1300, 300))
    assert.is_false(http.verify(secret, sign("{}", "1000"), "{}", 1301, 300))
    assert.is_false(http.verify(secret, sign("{}", "1000"), "{ }", 1000, 300))
    assert.is_false(http.verify(secret, {}, "{}", 1000, 300))
    assert.is_false(http.verify(secret, sign("{}", "1e3"), "{}", 1000, 300))
    assert.is_false(http.verify("other", sign("{}", "1000"), "{}", 1000, 300))
  end)
end)

describe("slack Events API while the bot stops", function()
  it("runs what it answered 200, counted until handed over; answers 503 once closing and runs nothing", async(function()
    local secret, closing = "s3cr3t", false
    local intake = require("switchboard.dispatch.in_flight").new()
    local ran, release = {}, core.signal()
    local h = http.handler{ secret = secret, intake = intake, closing = function() return closing end,
      policy = function() return { slack = { events = { window_ms = 300000 } } } end, log = function() end,
      on_event = function(p) ran[#ran + 1] = p.event_id; core.sleep(60000, release) end }
    local function post(id)
      local body = cjson.encode{ type = "event_callback", event_id = id }
      local ts = tostring(math.floor(core.wall_ms() / 1000))
      local got = {}
      h({ method = "POST", path = "/slack/events", body = body, headers = {
          ["x-slack-request-timestamp"] = ts,
          ["x-slack-signature"] = "v0=" .. core.crypto.hex(core.crypto.hmac_sha256(secret, "v0:" .. ts .. ":" .. body)) } },
        { send = function(_, status) got.status = status end })
      return got.status
    end
    assert.equals(200, post("Ev1"))
    assert.equals(1, intake.count) -- taken: the shutdown waits for it
    closing = true
    assert.equals(503, post("Ev2"))
    core.sleep(10)
    assert.same({ "Ev1" }, ran)
    release:abort("go on")
    assert.is_true(intake:wait())
  end))
end)

describe("slack Block Kit card", function()
  local function card(state, body)
    local c = card_mod.new{ thread = "T/C/1.0", agent = "coding", command = "echo <hi> ```", repo = "acme/api" }
    c:provisioned("local", "a note & more")
    c:running(0)
    if state == "done" then c:finished({ exit_code = 0, text = body }, 1500) end
    return c
  end

  it("shows the Stop button while running and the escaped output when done", function()
    local view = blocks.render(card("running"), { now_ms = 3000, thread = "T/C/1.0" })
    local last = view.blocks[#view.blocks]
    assert.equals("actions", last.type)
    assert.equals(events.STOP_ACTION, last.elements[1].action_id)
    assert.equals("T/C/1.0", last.elements[1].value)
    view = blocks.render(card("done", "a < b & c"), { now_ms = 3000, thread = "T/C/1.0" })
    local joined = cjson.encode(view.blocks)
    assert.is_nil(joined:find(events.STOP_ACTION, 1, true))
    assert.truthy(joined:find("a &lt; b &amp; c", 1, true))
    assert.truthy(joined:find("a note &amp; more", 1, true))
    assert.equals("✓ exit 0 after 1.5s", view.text)
  end)

  it("folds an agent card's notes into one context line and links its run page with a View run button", function()
    local run_card = require("switchboard.dispatch.run_card")
    local c = run_card.new{ thread = "T/C/1.0", agent = "coding", ask = "fix it", model = "claude-opus-4-5" }
    c:provisioned("local", "first note")
    for i = 1, 8 do c:add_note("note " .. i) end
    c.page_url = "http://127.0.0.1:1/runs/abc"
    c:running(0)
    local view = blocks.render(c, { now_ms = 1000, thread = "T/C/1.0" })
    local contexts = 0
    for _, b in ipairs(view.blocks) do if b.type == "context" then contexts = contexts + 1 end end
    assert.equals(2, contexts) -- who runs it where, and the notes
    assert.truthy(view.blocks[2].elements[1].text:find("first note · note 1 · note 2", 1, true))
    assert.truthy(view.blocks[1].elements[1].text:find("claude-opus-4-5", 1, true))
    local last = view.blocks[#view.blocks]
    assert.equals("Stop", last.elements[1].text.text)
    assert.same({ "View run", "http://127.0.0.1:1/runs/abc" }, { last.elements[2].text.text, last.elements[2].url })
    c:ended("done", 2000, "Fixed.")
    last = blocks.render(c, { now_ms = 2000, thread = "T/C/1.0" }).blocks
    last = last[#last]
    assert.same({ "View run" }, { last.elements[1].text.text })
    assert.equals(1, #last.elements)
  end)

  it("keeps every section within Slack's limit and asks for a file when the output does not fit", function()
    local big = string.rep("<&>\n", 5000)
    local c = card("done", big)
    assert.is_true(blocks.needs_file(c, 2900))
    local view = blocks.render(c, { now_ms = 3000, max_block_chars = 2900,
                                    file = { permalink = "https://x/files/F1", name = "output.txt" } })
    for _, b in ipairs(view.blocks) do
      if b.text then assert.is_true(#b.text.text <= 2900, #b.text.text) end
    end
    local texts = {}
    for _, b in ipairs(view.blocks) do
      texts[#texts + 1] = b.text and b.text.text or (b.elements and b.elements[1].text) or ""
    end
    texts = table.concat(texts, "\n")
    assert.truthy(texts:find("the whole output is in https://x/files/F1", 1, true))
    assert.truthy(texts:find("<https://x/files/F1|output.txt>", 1, true))
    assert.is_false(blocks.needs_file(card("done", "short"), 2900))
  end)
end)

describe("slack Block Kit, a card of another kind", function()
  it("shows the dispatcher's text in a code block, with Stop until it is final", function()
    local view = blocks.render({ kind = "run" }, { thread = "T/C/1.0",
      message = { text = "[t] agent:coding\n… thinking <x>", final = false } })
    assert.equals("```[t] agent:coding\n… thinking &lt;x&gt;```", view.blocks[1].text.text)
    assert.equals("actions", view.blocks[2].type)
    view = blocks.render({ kind = "run" }, { thread = "T/C/1.0", message = { text = "done", final = true } })
    assert.equals(1, #view.blocks)
    assert.is_false(blocks.needs_file({ kind = "run" }, 2900))
  end)
end)

describe("slack policy: who may ask", function()
  it("allows the token's workspace by default and narrows by channel and user", function()
    local allow = { workspaces = { "token" }, channels = {}, users = {} }
    assert.is_true(app.allowed(allow, BOT, "T0ACME", "C1", "U1"))
    assert.is_false(app.allowed(allow, BOT, "T0OTHER", "C1", "U1"))
    allow.users = { "U2" }
    assert.is_false(app.allowed(allow, BOT, "T0ACME", "C1", "U1"))
    assert.is_true(app.allowed(allow, BOT, "T0ACME", "C1", "U2"))
    allow.channels = { "C9" }
    assert.is_false(app.allowed(allow, BOT, "T0ACME", "C1", "U2"))
    allow = { workspaces = { "T0OTHER" }, channels = {}, users = {} }
    assert.is_true(app.allowed(allow, BOT, "T0OTHER", "C1", "U1"))
    assert.is_false(app.allowed(allow, BOT, "T0ACME", "C1", "U1"))
  end)
end)

describe("slack Web API client", function()
  it("waits out a 429 by its Retry-After, gates the channel, and reports errors as values", async(function()
    local calls = {}
    local srv = assert(core.http.serve{ host = "127.0.0.1", port = 0, handler = function(req, res)
      calls[#calls + 1] = { path = req.path, at = core.now_ms(), auth = req.headers.authorization,
                            ctype = req.headers["content-type"], body = req.body }
      if req.path == "/api/chat.update" and #calls == 1 then
        return res:send(429, { ["retry-after"] = "1" }, "")
      end
      if req.path == "/api/bad" then return res:send(200, {}, '{"ok":false,"error":"channel_not_found"}') end
      res:send(200, { ["content-type"] = "application/json" }, '{"ok":true,"ts":"1.0"}')
    end })
    local api = webapi.new{ url = ("http://127.0.0.1:%d/api/"):format(srv.port), token = "xoxb-t", deadline_ms = 5000 }
    local got = assert(api:call("chat.update", { channel = "C1", ts = "1.0" }, { channel = "C1" }))
    assert.equals("1.0", got.ts)
    assert.equals(2, #calls)
    assert.is_true(calls[2].at - calls[1].at >= 900)
    assert.equals("Bearer xoxb-t", calls[1].auth)
    assert.equals("application/json; charset=utf-8", calls[1].ctype)
    local none, err = api:call("bad", {}, {})
    assert.is_nil(none)
    assert.equals("slack", err.kind)
    assert.equals("channel_not_found", err.error)
    assert.is_nil(err.message:find("xoxb-t", 1, true))
    assert(api:call("files.getUploadURLExternal", { filename = "a b.txt", length = 3 }, { form = true }))
    assert.equals("filename=a%20b.txt&length=3", calls[#calls].body)
    srv:close()
  end))
end)

describe("slack front flush", function()
  -- flush(signal) in a task of its own, given `bound_ms` to return: → returned?, its value
  local function flush_within(f, signal, bound_ms)
    local done, value = core.signal(), nil
    core.go(function() value = f:flush(signal); done:abort("flushed") end)
    core.sleep(bound_ms, done)
    return done.aborted, value
  end

  it("waits for the cards still sending, and gives up when its signal aborts, before or during the wait", async(function()
    local f = front_mod.new{ api = {}, policy = function() return {} end }
    local release = core.signal()
    f:spawn(function() core.sleep(60000, release) end) -- a card update Slack has not answered
    -- the second TERM came during the drain: the signal is aborted before the flush starts
    local kill_now = core.signal()
    kill_now:abort("second SIGTERM")
    local returned, value = flush_within(f, kill_now, 5000)
    assert.is_true(returned, "a flush given an aborted signal never returned")
    assert.is_false(value)
    -- aborted while the flush waits
    local later = core.signal()
    core.go(function() core.sleep(50); later:abort("second SIGTERM") end)
    returned, value = flush_within(f, later, 5000)
    assert.is_true(returned, "a flush whose signal aborted while it waited never returned")
    assert.is_false(value)
    -- the card's update ends: the flush returns true
    core.go(function() core.sleep(50); release:abort("answered") end)
    returned, value = flush_within(f, core.signal(), 5000)
    assert.is_true(returned, "a flush never returned after the last card was sent")
    assert.is_true(value)
  end))
end)

-- Black-box: the bot's token goes to Slack's file hosts only (issue 35; docs/slack.md
-- "Context"). The real `switchboard slack` against the Slack stand-in
-- (tests/support/slack_standin.py, whose Web API base is the configured SLACK_API_URL) and the
-- Messages API stand-in; a listener on another loopback address (127.0.0.2) records every
-- request it gets. An app_mention whose files name that listener — a text file, an image, the
-- same port as Slack's, userinfo in front — must bring it no request at all, and the card says
-- "not fetched: not a Slack file URL". A Slack file that redirects there is not followed; one
-- that redirects within Slack is followed without the token.
local core = require("switchboard.core")
local async = require("support.async")
local tmp = require("support.tmp")
local P = require("support.policies")
local SL = require("support.slack")
local model = require("support.model")

local PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="

local function say(text) return { content = { { type = "text", text = text } } } end

-- A listener on 127.0.0.2 (port: the wanted one if free there, else the kernel's) that keeps
-- every request's method, path and headers, and answers like a file server would.
local function listener(port)
  local seen = {}
  local function handler(req, res)
    seen[#seen + 1] = { method = req.method, path = req.path, headers = req.headers }
    res:send(200, { ["content-type"] = "text/plain" }, "stolen\n")
  end
  local srv = port and core.http.serve{ host = "127.0.0.2", port = port, handler = handler }
  srv = srv or assert(core.http.serve{ host = "127.0.0.2", port = 0, handler = handler })
  return srv, seen
end

local function final_card(st, ts)
  return SL.wait(function()
    for _, c in ipairs(st:cards(ts)) do if SL.is_final(c) then return c end end
  end, "the final card in thread " .. ts, 120000)
end

local function file(name, mimetype, url)
  return { id = "F0" .. name:upper():gsub("%W", ""), name = name, title = name, mimetype = mimetype, size = 70,
           url_private = url, url_private_download = url .. "?download=1" }
end

describe("slack: an ask's files", function()
  local st, m, bot, srv, seen
  before_each(async(function()
    m = model.start()
    st = SL.standin()
    srv, seen = listener(st.port)
  end))
  after_each(async(function()
    SL.kill_bot(bot)
    bot = nil
    srv:close()
    st:close()
    m.stop()
    tmp.remove_all()
    P.cleanup()
  end))

  local function start_bot()
    bot = SL.bot(st, { state_dir = tmp.dir("slackfiles") .. "/st",
                       env = { ANTHROPIC_BASE_URL = m.url, ANTHROPIC_API_KEY = m.key } })
  end

  -- No request reached the listener, and none anywhere carried the bot token but Slack's.
  local function assert_nothing_reached()
    for _, r in ipairs(seen) do
      for k, v in pairs(r.headers) do
        assert.is_nil(v:find(SL.BOT_TOKEN, 1, true), "the bot token reached 127.0.0.2 in " .. k)
      end
    end
    assert.equal(0, #seen, "requests reached 127.0.0.2: " .. #seen)
  end

  it("fetches nothing from an address that is not Slack's: no credential leaves, the card says why", async(function()
    m:script{ say("I read what I could.") }
    start_bot()
    local base = ("http://127.0.0.2:%d/files-pri/T0ACME-F1"):format(srv.port)
    local _, real = st:control("file", { name = "real.log", mimetype = "text/plain",
      content_b64 = core.crypto.base64_encode("a real Slack file\n") })
    local ev = SL.mention{ ts = "1700000900.000100", text = "agent:general what is in these?" }
    ev.event.files = {
      file("notes.txt", "text/plain", base .. "/notes.txt"),
      file("shot.png", "image/png", base .. "/shot.png"),
      -- userinfo: the stand-in's own address in front of the @, the listener after it
      file("trick.txt", "text/plain", ("http://127.0.0.1:%d@127.0.0.2:%d/files-pri/x/trick.txt"):format(st.port, srv.port)),
      real,
    }
    ev.event.files[2].url_private_download = nil -- the image by url_private alone
    st:envelope("events_api", ev)
    local card = SL.card_text(final_card(st, "1700000900.000100"))
    assert_nothing_reached()
    for _, name in ipairs({ "notes.txt", "shot.png", "trick.txt" }) do
      assert.truthy(card:find(name .. " not fetched: not a Slack file URL", 1, true), card)
    end
    assert.truthy(card:find("read real.log", 1, true), card)
    -- the Slack file was fetched, with the token; the model got it and none of the others
    local downloads = st:state().downloads
    assert.equal(1, #downloads)
    assert.equal("bot", downloads[1].token)
    local req = m:requests()[1]
    local all = require("cjson").encode(req.body)
    assert.truthy(all:find("a real Slack file", 1, true))
    assert.is_nil(all:find("stolen", 1, true))
    bot:signal("TERM")
    assert.equal(0, bot:wait().exit)
  end))

  it("follows a Slack file's redirect only within Slack, and without the token", async(function()
    m:script{ say("Nothing to read.") }
    start_bot()
    local _, away = st:control("file", { name = "away.txt", mimetype = "text/plain", content_b64 = "eAo=",
      redirect = ("http://127.0.0.2:%d/files-pri/T0ACME-F1/away.txt"):format(srv.port) })
    local _, target = st:control("file", { name = "target.png", mimetype = "image/png", content_b64 = PNG })
    local _, inside = st:control("file", { name = "inside.png", mimetype = "image/png", content_b64 = PNG,
      redirect = target.url_private_download })
    local ev = SL.mention{ ts = "1700000901.000100", text = "agent:general and these?" }
    ev.event.files = { away, inside }
    st:envelope("events_api", ev)
    local card = SL.card_text(final_card(st, "1700000901.000100"))
    assert.truthy(card:find("away.txt not fetched: not a Slack file URL (Slack redirected it elsewhere)", 1, true), card)
    -- followed within Slack without the token: the stand-in answers its sign-in page
    assert.truthy(card:find("inside.png was not read: Slack answered with its sign-in page", 1, true), card)
    assert_nothing_reached()
    local tokens = {}
    for _, d in ipairs(st:state().downloads) do tokens[#tokens + 1] = d.id .. "=" .. d.token end
    assert.same({ away.id .. "=bot", inside.id .. "=bot", target.id .. "=other" }, tokens)
    bot:signal("TERM")
    assert.equal(0, bot:wait().exit)
  end))
end)

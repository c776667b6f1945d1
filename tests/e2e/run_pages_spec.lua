-- Black-box: a run page's token is its only credential (docs/record.md "Run pages"), so it is
-- never in the bot's log, even at debug level where every request gets an `http.request`
-- line; and a page cannot be framed by another site (CSP frame-ancestors 'none'). The real
-- `switchboard slack` (started with --log-level debug by tests/support/slack.lua) against the
-- Slack stand-in and the Messages API stand-in; the page is fetched over loopback HTTP from
-- the bot's own listener.
local core = require("switchboard.core")
local async = require("support.async")
local tmp = require("support.tmp")
local P = require("support.policies")
local SL = require("support.slack")
local model = require("support.model")

describe("run pages", function()
  local st, m, bot
  before_each(async(function()
    m = model.start()
    st = SL.standin()
  end))
  after_each(async(function()
    SL.kill_bot(bot)
    bot = nil
    st:close()
    m.stop()
    tmp.remove_all()
    P.cleanup()
  end))

  it("keep the token out of the debug log and refuse to be framed", async(function()
    m:script{ { content = { { type = "text", text = "Here is the answer." } } } }
    bot = SL.bot(st, { state_dir = tmp.dir("pages") .. "/st", args = { "--health-listen", "127.0.0.1:0" },
                       env = { ANTHROPIC_BASE_URL = m.url, ANTHROPIC_API_KEY = m.key } })
    st:envelope("events_api", SL.mention{ ts = "1700000950.000100", text = "agent:general a question" })
    local card = SL.wait(function()
      for _, c in ipairs(st:cards("1700000950.000100")) do
        if SL.is_final(c) then return SL.card_text(c) end
      end
    end, "the final card", 120000)
    local url = card:match("%[View run%] (http://[^%s>|]+)")
    assert.is_not_nil(url, card)
    local token = url:match("/runs/(%x+)$")
    assert.equal(32, #token, url)
    url = url:gsub("^http://[^/]+", "http://127.0.0.1:" .. bot.health_port)

    local status, headers, body = core.http.request{ method = "GET", url = url, deadline_ms = 10000 }
    assert.equal(200, status, body)
    assert.truthy(body:find("a question", 1, true))
    local csp = headers["content-security-policy"]
    assert.truthy(csp:find("frame-ancestors 'none'", 1, true), csp)
    assert.truthy(csp:find("default-src 'none'", 1, true), csp)
    assert.equal("DENY", headers["x-frame-options"])
    -- a wrong token and a HEAD: logged as well, neither with its token
    local wrong = token:sub(1, 31) .. (token:sub(32) == "0" and "1" or "0")
    assert.equal(404, (core.http.request{ method = "GET", deadline_ms = 10000,
      url = url:gsub(token, wrong) }))
    assert.equal(200, (core.http.request{ method = "HEAD", url = url, deadline_ms = 10000 }))

    bot:signal("TERM")
    assert.equal(0, bot:wait().exit)
    local log = bot.err .. bot.out
    assert.is_nil(log:find(token, 1, true), "the page's token is in the bot's log")
    assert.is_nil(log:find(wrong, 1, true), "a guessed token is in the bot's log")
    local _, page_lines = log:gsub("http%.request[^\n]*path=/runs/<hidden>", "")
    assert.equal(3, page_lines, log:sub(-4000))
  end))
end)

-- `switchboard slack`'s environment checks (commands/slack.lua read_env): which problem each
-- environment is refused with, word for word, and in which order the checks apply.
local slack = require("switchboard.commands.slack")

local BOT, APP = "xoxb-1-2-abc", "xapp-1-A-1-abc"

local function read(vars, opts)
  return slack.read_env(function(name) return vars[name] end, opts or {})
end

local function refusal(vars, opts)
  local e, err = read(vars, opts)
  assert.is_nil(e)
  assert.equal("config", err.kind)
  return err.message
end

describe("switchboard slack: read_env", function()
  it("takes a bot and an app token (Socket Mode), Slack's own API by default", function()
    local e = assert(read({ SLACK_BOT_TOKEN = BOT, SLACK_APP_TOKEN = APP }))
    assert.equal(BOT, e.bot)
    assert.equal(APP, e.app)
    assert.equal("https://slack.com/api", e.api_url)
  end)

  it("takes a bot token and a signing secret with --listen (Events API); empty means unset", function()
    local e = assert(read({ SLACK_BOT_TOKEN = BOT, SLACK_APP_TOKEN = "", SLACK_SIGNING_SECRET = "s",
                            SLACK_API_URL = "http://127.0.0.1:9/api" }, { listen = "127.0.0.1:3000" }))
    assert.is_nil(e.app)
    assert.equal("s", e.secret)
    assert.equal("http://127.0.0.1:9/api", e.api_url)
  end)

  it("names each problem, the first that applies", function()
    assert.equal("SLACK_BOT_TOKEN is not set: give the app's Bot User OAuth Token (xoxb-…, under "
      .. "OAuth & Permissions)", refusal({ SLACK_BOT_TOKEN = "", SLACK_APP_TOKEN = "bad" }))
    assert.equal("SLACK_BOT_TOKEN does not look like a bot token (it should start with xoxb-)",
      refusal({ SLACK_BOT_TOKEN = "xoxp-1", SLACK_APP_TOKEN = "bad" }))
    assert.equal("SLACK_APP_TOKEN does not look like an app-level token (it should start with xapp-; "
      .. "create one with connections:write under Basic Information)",
      refusal({ SLACK_BOT_TOKEN = BOT, SLACK_APP_TOKEN = "xoxb-2" }, { listen = "127.0.0.1:3000" }))
    assert.equal("--listen serves the Events API, which needs SLACK_SIGNING_SECRET (Basic Information → "
      .. "Signing Secret)", refusal({ SLACK_BOT_TOKEN = BOT, SLACK_API_URL = "ftp://x" }, { listen = "127.0.0.1:3000" }))
    assert.equal("no way to receive events: set SLACK_APP_TOKEN (Socket Mode) or give --listen "
      .. "HOST:PORT with SLACK_SIGNING_SECRET (Events API)",
      refusal({ SLACK_BOT_TOKEN = BOT, SLACK_SIGNING_SECRET = "s", SLACK_API_URL = "ftp://x" }))
    assert.equal("SLACK_API_URL must be an http(s) URL",
      refusal({ SLACK_BOT_TOKEN = BOT, SLACK_APP_TOKEN = APP, SLACK_API_URL = "ftp://x" }))
  end)
end)

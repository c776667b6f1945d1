-- Black-box: an agent run that takes a screenshot and changes its repository (docs/agent.md
-- "screenshot", docs/record.md "Run pages", docs/slack.md "The card"). The real
-- `switchboard slack` against the Slack stand-in, the Messages API stand-in (a scripted model
-- that writes an HTML file, screenshots it, and answers) and the git and GitHub stand-ins
-- (tests/support/craft.lua); headless Chromium renders the page in the thread's workspace.
-- The PNG reaches the model's next request as an image block, the Slack thread as an upload,
-- and the run page as an image; the card counts the changes and links the page with a View
-- run button; the page shows the diff, escaped.
local core = require("switchboard.core")
local files = require("support.files")
local model = require("support.model")
local policies = require("support.policies")
local standin = require("support.github_standin")
local SL = require("support.slack")
local craft = require("support.craft")

local use = craft.use
local PNG = "\137PNG\r\n\26\n"

describe("the screenshot tool and the run's diff", function()
  local state, gitport, m

  before_each(function()
    state = files.tmpdir()
    gitport = craft.setup(state)
  end)

  after_each(function()
    craft.teardown(state, m)
    m = nil
  end)

  it("a screenshot reaches the model, the Slack thread and the run page; the card and page show the diff", function()
    local pol = policies.dir{
      github = function(src) return src .. '\nclone_url = "http://127.0.0.1:' .. gitport .. '/{repo}.git"\n' end,
    }
    local T = "1700000600.000100"
    local html = "<html><body style='background:#fff'><h1 style='color:#c00'>Hello from the sandbox</h1>"
      .. "<script>document.title='x'</script></body></html>\n"
    local r = {}
    core.run(function()
      local w = standin.world{ policy = function() return policies.shipped() end, real_clock = true,
                               tokens_file = state .. "/tokens", repos_root = state .. "/repos" }
      policies.write(state .. "/app.pem", w.priv)
      m = model.start()
      m:script{
        { content = {
          use("write_file", { path = "site/index.html", content = html }),
          use("edit_file", { path = "README.md", old_text = "teh", new_text = "the", replace_all = true }),
        } },
        { content = { use("screenshot", { url = "site/index.html", width = 640, height = 400 }) } },
        { content = { { type = "text", text = "Done: **the page** renders. See [docs](javascript:alert(1))." } } },
      }
      local st = SL.standin()
      local bot = SL.bot(st, { state_dir = state .. "/st", policies = pol, args = { "--listen", "127.0.0.1:0" }, env = {
        ANTHROPIC_BASE_URL = m.url, ANTHROPIC_API_KEY = m.key, GITHUB_APP_ID = "12345",
        GITHUB_APP_PRIVATE_KEY = state .. "/app.pem", GITHUB_API_URL = w.gh.api_url, GH_TOKEN = false,
        SLACK_SIGNING_SECRET = SL.SIGNING_SECRET, HOME = state, PATH = state .. "/shim:" .. os.getenv("PATH") } })
      st:envelope("events_api", SL.mention{ ts = T, text = "agent:coding make a page and show it in acme/api" })
      r.card = SL.final_card(st, T, 180000)
      r.upload = SL.upload_titled(st, "Screenshot", 60000)
      r.requests = m:requests()
      -- a View run press: Slack opens the link and still sends block_actions; the bot acks it
      -- and does nothing
      local press = SL.stop_press(T)
      press.actions[1].action_id, press.actions[1].url = "switchboard_view_run", "http://x/runs/y"
      local form = "payload=" .. require("cjson").encode(press):gsub("[^%w]", function(c)
        return ("%%%02X"):format(c:byte())
      end)
      local fh = SL.sign(form)
      fh["content-type"] = "application/x-www-form-urlencoded"
      r.press = bot:post("/slack/actions", form, fh)
      local url = r.card:match("%[View run%] (http://[^%s>|]+)")
      if url then
        url = url:gsub("^http://[^/]+", "http://127.0.0.1:" .. bot.events_port)
        r.status, r.headers, r.page = core.http.request{ method = "GET", url = url, deadline_ms = 10000 }
      end
      bot:signal("TERM")
      r.log = bot:wait() and (bot.err .. bot.out)
      r.cards_after = #st:cards(T)
      st:close()
    end)
    -- the model saw the screenshot: the third request's last message carries the image block
    assert.equal(3, #r.requests)
    local last = r.requests[3].body.messages[#r.requests[3].body.messages]
    local result = last.content[1]
    assert.equal("tool_result", result.type)
    assert.is_nil(result.is_error, require("cjson").encode(result))
    assert.equal("image", result.content[1].type)
    assert.equal("image/png", result.content[1].source.media_type)
    local png = core.crypto.base64_decode(result.content[1].source.data)
    assert.equal(PNG, png:sub(1, 8))
    assert.matches("640×400 pixels", result.content[2].text, 1, true)
    -- the same PNG went up to the thread
    assert.equal(T, r.upload.thread_ts)
    assert.equal(png, core.crypto.base64_decode(r.upload.bytes_b64))
    -- the card: the changes counted, the page behind a View run button, not a bare URL
    assert.matches("+3 −2 in 2 files", r.card, 1, true)
    assert.is_nil(r.card:find("run page:", 1, true), r.card)
    assert.equal(200, r.press)
    assert.is_not_nil(r.page, r.card)
    assert.equal(200, r.status)
    assert.matches("img-src data:", r.headers["content-security-policy"], 1, true)
    -- the page: the screenshot, the diff per file, coloured and escaped; the Markdown safe
    assert.truthy(r.page:find('<img class="shot" alt="screenshot of site/index.html" src="data:image/png;base64,'
      .. core.crypto.base64_encode(png) .. '">', 1, true))
    assert.truthy(r.page:find('<span class="add">+&lt;html&gt;&lt;body', 1, true))
    assert.truthy(r.page:find('<span class="del">-Welcome to teh project.</span>', 1, true))
    assert.truthy(r.page:find('<span class="add">+Welcome to the project.</span>', 1, true))
    assert.is_nil(r.page:find("<script>", 1, true))
    assert.is_nil(r.page:find('href="javascript', 1, true))
    assert.truthy(r.page:find("<strong>the page</strong>", 1, true))
    -- who asked, by name (users.info), and the Slack thread
    assert.truthy(r.page:find("<dt>asked by</dt><dd>ana (U0ANA)</dd>", 1, true))
    assert.truthy(r.page:find('href="https://app.slack.com/client/' .. SL.TEAM .. '/C0GEN/thread/C0GEN-' .. T .. '"', 1, true))
    -- the screenshot's temporary file is not among the changes
    assert.is_nil(r.page:find(".switchboard-screenshot", 1, true))
    -- the press stopped nothing and posted nothing
    assert.is_nil(r.log:find("slack%.stop thread="), r.log)
    assert.equal(1, r.cards_after)
    print(("\nscreenshot: %s; the page: %d bytes, %d of them the image"):format(
      result.content[2].text:match("taken in %d+ ms"), #r.page, #core.crypto.base64_encode(png)))
  end)
end)

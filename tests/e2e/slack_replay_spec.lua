-- Black-box (docs/slack.md "Retries and replays"): a replayed Slack event or GitHub webhook runs
-- nothing, also after the bot restarted. The real `switchboard slack` against the Slack
-- stand-in; the seen keys are in the thread's record (record.db in the state directory), which
-- the restarted bot opens again.
local core = require("switchboard.core")
local cjson = require("cjson")
local async = require("support.async")
local tmp = require("support.tmp")
local P = require("support.policies")
local SL = require("support.slack")
local record = require("switchboard.store.record")

local WEBHOOK_SECRET = "whsec-replay-" .. core.crypto.hex(core.crypto.random_bytes(8))

local function count(text, needle)
  local n, at = 0, 1
  while true do
    local s, e = text:find(needle, at, true)
    if not s then return n end
    n, at = n + 1, e + 1
  end
end

-- Every message the bot posted in a thread (cards and plain answers).
local function posted(st, thread_ts)
  local n = 0
  for _, m in pairs(st:state().messages) do
    if m.thread_ts == thread_ts then n = n + 1 end
  end
  return n
end

local function start(st, state_dir)
  return SL.bot(st, { state_dir = state_dir, policies = P.dir{ slack = function(src) return src .. "\ndrain_ms = 2 * second\n" end },
    args = { "--listen", "127.0.0.1:0" },
    env = { SLACK_SIGNING_SECRET = SL.SIGNING_SECRET, GITHUB_WEBHOOK_SECRET = WEBHOOK_SECRET } })
end

local function stop(bot)
  bot:signal("TERM")
  assert.equals(0, bot:wait().exit, bot.err)
end

-- Waits until the bot's log says the replay was a duplicate (`dup` once more than `dups`) or
-- that it ran (`ran` once more than `runs`, or a new message in the thread): → "duplicate" | "ran".
local function outcome(bot, dup, ran, st, thread_ts)
  local dups, runs, before = count(bot.err, dup), count(bot.err, ran), posted(st, thread_ts)
  return function()
    return SL.wait(function()
      if count(bot.err, dup) > dups then return "duplicate" end
      if count(bot.err, ran) > runs or posted(st, thread_ts) > before then return "ran" end
    end, "the replay's outcome (" .. dup .. " or " .. ran .. ")")
  end
end

describe("replays across a restart", function()
  local st, bot, state_dir

  before_each(async(function()
    state_dir = tmp.dir("slack-replay")
    st = SL.standin()
  end))

  after_each(async(function()
    SL.kill_bot(bot)
    bot = nil
    st:close()
    tmp.remove_all()
    P.cleanup()
  end))

  it("a Slack event replayed after a restart (Socket Mode and the Events API) runs nothing", async(function()
    local T = "1700000501.000100"
    local event = SL.mention{ ts = T, text = "run `echo replayed-once`" }
    bot = start(st, state_dir)
    st:envelope("events_api", event)
    SL.wait(function()
      local cards = st:cards(T)
      return cards[1] and SL.is_final(cards[1])
    end, "the first delivery's final card")
    local before = posted(st, T)
    stop(bot)

    bot = start(st, state_dir)
    -- the same event again, on the new process's connection (a new envelope, the same event_id)
    local seen = outcome(bot, "slack.duplicate_event", "slack.ask ", st, T)
    st:envelope("events_api", event)
    assert.equals("duplicate", seen())
    -- and as an Events API request (a retry, or a captured request replayed within the window)
    local body = cjson.encode(event)
    local headers = SL.sign(body)
    headers["x-slack-retry-num"] = "1"
    seen = outcome(bot, "slack.duplicate_event", "slack.ask ", st, T)
    assert.equals(200, bot:post("/slack/events", body, headers))
    assert.equals("duplicate", seen())
    stop(bot)
    assert.equals(before, posted(st, T))
    assert.equals(1, #st:cards(T))
  end))

  it("a GitHub review comment replayed under a new delivery id, and after a restart, runs nothing", async(function()
    local T = "1700000502.000100"
    local pr_url = "https://github.com/acme/api/pull/7"
    -- the thread whose pull request this is, as an earlier run left it in the record
    core.fs.mkdir_p(state_dir, tonumber("700", 8))
    local rec = assert(record.open(state_dir .. "/record.db"))
    assert(rec:bind(SL.TEAM .. "/C0GEN/" .. T, { repo = "acme/api", branch = "switchboard/t", pr_number = 7, pr_url = pr_url }))
    rec:close()
    local now = os.date("!%Y-%m-%dT%H:%M:%SZ")
    local body = cjson.encode{
      action = "created", repository = { full_name = "acme/api" },
      pull_request = { number = 7, html_url = pr_url, head = { ref = "switchboard/t" } },
      comment = { id = 424242, body = "@switchboard please add a test", user = { login = "rev" },
                  author_association = "COLLABORATOR", path = "README.md", line = 1,
                  created_at = now, updated_at = now },
    }
    local function deliver(id)
      local status = core.http.request{ method = "POST", url = ("http://127.0.0.1:%d/github/webhook"):format(bot.events_port),
        body = body, deadline_ms = 10000, headers = {
          ["content-type"] = "application/json", ["x-github-event"] = "pull_request_review_comment",
          ["x-github-delivery"] = id,
          ["x-hub-signature-256"] = "sha256=" .. core.crypto.hex(core.crypto.hmac_sha256(WEBHOOK_SECRET, body)) } }
      assert.equals(202, status)
    end

    bot = start(st, state_dir)
    deliver("d-1")
    local ok, err = pcall(SL.wait, function() return posted(st, T) > 0 end, "the follow-up's first message in the thread")
    assert(ok, tostring(err) .. "\n" .. bot.err)
    assert.equals(1, count(bot.err, "github.review_comment "))
    -- a captured delivery replayed under a new X-GitHub-Delivery (the header is not signed)
    local seen = outcome(bot, "github.duplicate_comment", "github.review_comment ", st, T)
    deliver("d-2")
    assert.equals("duplicate", seen())
    stop(bot)
    local before = posted(st, T)

    bot = start(st, state_dir)
    seen = outcome(bot, "github.duplicate_comment", "github.review_comment ", st, T)
    deliver("d-1") -- the very same delivery, after the restart
    assert.equals("duplicate", seen())
    seen = outcome(bot, "github.duplicate_comment", "github.review_comment ", st, T)
    deliver("d-3")
    assert.equals("duplicate", seen())
    assert.equals(0, count(bot.err, "github.review_comment "))
    stop(bot)
    assert.equals(before, posted(st, T))
  end))
end)

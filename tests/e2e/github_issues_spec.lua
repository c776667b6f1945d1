-- Black-box (docs/github.md "Runs from issues"): a signed `issues` event starts a run on the
-- repository with the issue as the ask; its card is an issue comment created when it starts and
-- edited to the answer; its pull request says "Fixes #N". Unsigned or forged deliveries are 401,
-- a replay (the same delivery, or under a new delivery id) runs nothing. The real
-- `switchboard slack --listen` with a GitHub App against the loopback stand-ins (GitHub, git,
-- the Messages API, Slack).
local core = require("switchboard.core")
local cjson = require("cjson")
local files = require("support.files")
local model = require("support.model")
local policies = require("support.policies")
local standin = require("support.github_standin")
local SL = require("support.slack")
local craft = require("support.craft")

local WEBHOOK_SECRET = "whsec-issues-" .. core.crypto.hex(core.crypto.random_bytes(12))

describe("GitHub issues start runs", function()
  local state, gitport, m, w

  before_each(function()
    state = files.tmpdir()
    gitport = craft.setup(state)
  end)

  after_each(function()
    craft.teardown(state, m)
    m, w = nil, nil
  end)

  it("a signed issue opened: a run whose card is an issue comment edited to the answer, a PR saying Fixes #N; unsigned, forged and replayed run nothing", function()
    local pol = policies.dir{
      github = function(src) return src .. '\nclone_url = "http://127.0.0.1:' .. gitport .. '/{repo}.git"\n' end,
      agents = function(src) return src .. '\nissues.repositories = { "acme/api" }\nissues.update_every_ms = 1000\n' end,
    }
    local r = {}
    core.run(function()
      w = standin.world{ policy = function() return policies.shipped() end, real_clock = true,
                         tokens_file = state .. "/tokens", repos_root = state .. "/repos" }
      policies.write(state .. "/app.pem", w.priv)
      -- the issue, and a person's comment on it before the bot was asked
      w.gh.issues["acme/api"] = { [5] = { title = "Typos in the README" } }
      local earlier = { id = 77, body = "Both are in README.md.", user = { login = "ben", type = "User" },
                        author_association = "MEMBER", edits = {} }
      w.gh.comments = { ["acme/api"] = { [5] = { earlier } } }
      w.gh.comment_by_id[77] = earlier
      m = model.start()
      m:script(craft.edit_then_say())
      local st = SL.standin()
      local bot = SL.bot(st, { state_dir = state .. "/st", policies = pol, args = { "--listen", "127.0.0.1:0" }, env = {
        ANTHROPIC_BASE_URL = m.url, ANTHROPIC_API_KEY = m.key, GITHUB_APP_ID = "12345",
        GITHUB_APP_PRIVATE_KEY = state .. "/app.pem", GITHUB_API_URL = w.gh.api_url, GH_TOKEN = false,
        SLACK_SIGNING_SECRET = SL.SIGNING_SECRET, GITHUB_WEBHOOK_SECRET = WEBHOOK_SECRET,
        GITHUB_BOT_LOGIN = "switchboard[bot]",
        HOME = state, PATH = state .. "/shim:" .. os.getenv("PATH") } })
      local now = os.date("!%Y-%m-%dT%H:%M:%SZ")
      local body = cjson.encode{
        action = "opened", repository = { full_name = "acme/api" }, sender = { login = "ana" },
        issue = { id = 123456, number = 5, title = "Typos in the README", body = "It says teh twice.",
                  html_url = "https://github.com/acme/api/issues/5", user = { login = "ana", type = "User" },
                  author_association = "MEMBER", created_at = now, updated_at = now },
      }
      local function post(headers)
        headers["content-type"] = "application/json"
        headers["x-github-event"] = "issues"
        return core.http.request{ method = "POST", url = ("http://127.0.0.1:%d/github/webhook"):format(bot.events_port),
                                  body = body, headers = headers, deadline_ms = 10000 }
      end
      local function sig(secret) return "sha256=" .. core.crypto.hex(core.crypto.hmac_sha256(secret, body)) end
      r.unsigned = post{ ["x-github-delivery"] = "i-0" }
      r.forged = post{ ["x-github-delivery"] = "i-0", ["x-hub-signature-256"] = sig("not-the-secret") }
      r.signed = post{ ["x-github-delivery"] = "i-1", ["x-hub-signature-256"] = sig(WEBHOOK_SECRET) }
      local ok, err = pcall(SL.wait, function()
        local here = w.gh.comments["acme/api"][5]
        local card = here[2]
        return card and card.body:find("Fixed.", 1, true) and card.body:find("pull request #1", 1, true)
      end, "the run's issue comment edited to its answer", 120000)
      assert(ok, tostring(err) .. "\n" .. bot.err)
      r.requests_after_run = #m:requests()
      -- the same delivery again, then under a new delivery id (the header is not signed)
      r.replayed = post{ ["x-github-delivery"] = "i-1", ["x-hub-signature-256"] = sig(WEBHOOK_SECRET) }
      r.renamed = post{ ["x-github-delivery"] = "i-2", ["x-hub-signature-256"] = sig(WEBHOOK_SECRET) }
      SL.wait(function() return bot.err:find("github.duplicate_issue", 1, true) end, "the renamed replay noticed", 30000)
      r.reqs = m:requests()
      r.card = w.gh.comments["acme/api"][5][2]
      r.comments = #w.gh.comments["acme/api"][5]
      r.slack_messages = 0
      for _ in pairs(st:state().messages) do r.slack_messages = r.slack_messages + 1 end
      bot:signal("TERM")
      bot:wait()
      r.err = bot.err
      st:close()
      w.close()
    end)
    assert.equal(401, r.unsigned)
    assert.equal(401, r.forged)
    assert.equal(202, r.signed)
    assert.equal(202, r.replayed)
    assert.equal(202, r.renamed)
    assert.matches("github.webhook_refused", r.err, 1, true)
    -- the run: created at its start, edited as it went, its last edit the answer
    assert.equal(2, r.comments) -- the person's, and the run's one card: the replays started none
    assert.is_true(#r.card.edits >= 2, "the card comment was never edited")
    assert.matches("Fixed.", r.card.body, 1, true)
    assert.matches("started by @ana on issue #5 (opened)", r.card.body, 1, true)
    assert.not_matches("Fixed.", r.card.edits[1], 1, true)
    assert.equal("write", r.card.scope)
    assert.equal(2, r.requests_after_run)
    assert.equal(2, #r.reqs) -- the replays asked the model nothing
    -- the model got the issue: its title, body and earlier comment
    local ask = model.text_of(r.reqs[1].body.messages[#r.reqs[1].body.messages])
    assert.matches("Issue #5 in acme/api (https://github.com/acme/api/issues/5): Typos in the README", ask, 1, true)
    assert.matches("> It says teh twice.", ask, 1, true)
    assert.matches("@ben wrote:\n> Both are in README.md.", ask, 1, true)
    -- the pull request closes the issue when merged
    local pr = w.gh.pulls["acme/api"][1]
    assert.matches("\n\nFixes #5$", pr.body)
    assert.equal("Welcome to the project.\nSee the docs.\n", craft.remote(state, "show " .. pr.head .. ":README.md"))
    assert.equal(0, r.slack_messages) -- nothing went to Slack
    assert.is_nil(w.leak(r.err))
    assert.not_matches(WEBHOOK_SECRET, r.err, 1, true)
  end)

  it("a signed pull request opened: the review agent's answer is a review with a line comment; a line outside the diff is folded into the body", function()
    local pol = policies.dir{
      github = function(src) return src .. '\nclone_url = "http://127.0.0.1:' .. gitport .. '/{repo}.git"\n' end,
      agents = function(src) return src .. '\npull_request_reviews.repositories = { "acme/api" }\n' end,
    }
    local r = {}
    core.run(function()
      w = standin.world{ policy = function() return policies.shipped() end, real_clock = true,
                         tokens_file = state .. "/tokens", repos_root = state .. "/repos" }
      policies.write(state .. "/app.pem", w.priv)
      w.gh.pulls["acme/api"] = {}
      for n = 1, 2 do
        w.gh.pulls["acme/api"][n] = { number = n, head = "feature-" .. n, base = "main", title = "Feature " .. n,
          state = "open", html_url = "https://github.com/acme/api/pull/" .. n }
      end
      -- what each pull request's diff shows: README.md's first line
      w.gh.diff_lines["acme/api"] = { [1] = { ["README.md"] = { [1] = true } }, [2] = { ["README.md"] = { [1] = true } } }
      m = model.start()
      m:script{
        { content = { { type = "text", text = "Small and clear.\n\n```review-comments\nREADME.md:1: \"teh\" is a typo\n```\n" } } },
        { content = { { type = "text", text = "One nit.\n\n```review-comments\nREADME.md:40: this line is not in the diff\n```" } } },
      }
      local st = SL.standin()
      local bot = SL.bot(st, { state_dir = state .. "/st", policies = pol, args = { "--listen", "127.0.0.1:0" }, env = {
        ANTHROPIC_BASE_URL = m.url, ANTHROPIC_API_KEY = m.key, GITHUB_APP_ID = "12345",
        GITHUB_APP_PRIVATE_KEY = state .. "/app.pem", GITHUB_API_URL = w.gh.api_url, GH_TOKEN = false,
        SLACK_SIGNING_SECRET = SL.SIGNING_SECRET, GITHUB_WEBHOOK_SECRET = WEBHOOK_SECRET,
        GITHUB_BOT_LOGIN = "switchboard[bot]",
        HOME = state, PATH = state .. "/shim:" .. os.getenv("PATH") } })
      local function opened(n, secret)
        local body = cjson.encode{
          action = "opened", repository = { full_name = "acme/api" }, sender = { login = "dev" },
          pull_request = { id = 880000 + n, number = n, title = "Feature " .. n, body = "Adds feature " .. n .. ".",
                           html_url = "https://github.com/acme/api/pull/" .. n, draft = false, user = { login = "dev" },
                           head = { ref = "feature-" .. n, sha = ("%040d"):format(n) }, base = { ref = "main" } },
        }
        return core.http.request{ method = "POST", url = ("http://127.0.0.1:%d/github/webhook"):format(bot.events_port),
          body = body, deadline_ms = 10000, headers = { ["content-type"] = "application/json", ["x-github-event"] = "pull_request",
            ["x-github-delivery"] = "p-" .. n .. "-" .. tostring(secret ~= WEBHOOK_SECRET),
            ["x-hub-signature-256"] = "sha256=" .. core.crypto.hex(core.crypto.hmac_sha256(secret, body)) } }
      end
      r.forged = opened(1, "not-the-secret")
      r.signed = opened(1, WEBHOOK_SECRET)
      local ok, err = pcall(SL.wait, function() return w.gh.reviews["acme/api"] and w.gh.reviews["acme/api"][1] end,
        "the first pull request's review", 120000)
      assert(ok, tostring(err) .. "\n" .. bot.err)
      r.second = opened(2, WEBHOOK_SECRET)
      ok, err = pcall(SL.wait, function() return w.gh.reviews["acme/api"][2] end, "the second pull request's review", 120000)
      assert(ok, tostring(err) .. "\n" .. bot.err)
      SL.wait(function()
        local c = w.gh.comments and w.gh.comments["acme/api"] and w.gh.comments["acme/api"][2]
        return c and c[1] and c[1].body:find("reviewed pull request #2", 1, true)
      end, "the second card's last edit", 60000)
      r.reviews = w.gh.reviews["acme/api"]
      r.cards = { w.gh.comments["acme/api"][1][1], w.gh.comments["acme/api"][2][1] }
      r.reqs = m:requests()
      bot:signal("TERM")
      bot:wait()
      r.err = bot.err
      st:close()
      w.close()
    end)
    assert.equal(401, r.forged)
    assert.equal(202, r.signed)
    assert.equal(202, r.second)
    assert.equal(2, #r.reqs)
    local ask = model.text_of(r.reqs[1].body.messages[#r.reqs[1].body.messages])
    assert.matches("Review pull request #1 in acme/api (https://github.com/acme/api/pull/1) by @dev: Feature 1", ask, 1, true)
    assert.matches("review-comments", ask, 1, true)
    -- the first: a review with its line comment on the diff's new side
    local first = r.reviews[1][1]
    assert.equal("COMMENT", first.event)
    assert.equal("Small and clear.", first.body)
    assert.same({ { path = "README.md", line = 1, side = "RIGHT", body = '"teh" is a typo' } }, first.comments)
    assert.equal("write", first.scope)
    assert.matches("reviewed pull request #1: 1 line comment", r.cards[1].body, 1, true)
    assert.matches("agent:review", r.cards[1].body, 1, true)
    -- the second: GitHub refused the line outside the diff (422); the comment went into the body
    local second = r.reviews[2][1]
    assert.equal(1, #r.reviews[2])
    assert.same({}, second.comments)
    assert.matches("One nit.", second.body, 1, true)
    assert.matches("**README.md line 40**: this line is not in the diff", second.body, 1, true)
    assert.matches("folded into the review's body", r.cards[2].body, 1, true)
    assert.matches("github.webhook_refused", r.err, 1, true)
    assert.is_nil(w.leak(r.err))
  end)
end)

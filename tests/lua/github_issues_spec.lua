-- GitHub issue deliveries as asks (fronts/github/issues.lua): which events start a run, the
-- key a delivery runs once by, and the ask. The whole path runs black-box in
-- tests/e2e/github_issues_spec.lua.
local issues = require("switchboard.fronts.github.issues")
local review = require("switchboard.fronts.slack.review")
local P = require("support.policies")

local pol = setmetatable({ repositories = { "acme/api" } }, { __index = P.shipped().agents.issues })
local BOT = "switchboard[bot]"
local NOW = review.iso_seconds("2026-12-01T19:05:00Z")

local function opened(over)
  local p = { action = "opened", repository = { full_name = "acme/api" }, sender = { login = "ana" },
              issue = { id = 9, number = 5, title = "Crash", body = "It crashes.", html_url = "https://github.com/acme/api/issues/5",
                        user = { login = "ana" }, author_association = "MEMBER",
                        created_at = "2026-12-01T19:00:00Z", updated_at = "2026-12-01T19:00:00Z" } }
  for k, v in pairs(over or {}) do p[k] = v end
  return p
end

describe("issues.read", function()
  it("takes an issue opened by an allowed author in a listed repository", function()
    local i = assert(issues.read("issues", opened(), pol, BOT, NOW, 3600))
    assert.same({ "acme/api", 5, "opened", "ana" }, { i.repo, i.number, i.how, i.user })
    assert.equal("github:acme/api#5", issues.thread(i.repo, i.number))
    local ask = issues.ask_text(i, { { user = "ben", body = "me too" }, { user = "switchboard[bot]", body = "card", bot = true } })
    assert.matches("Issue #5 in acme/api (https://github.com/acme/api/issues/5): Crash", ask, 1, true)
    assert.matches("> It crashes.", ask, 1, true)
    assert.matches("@ben wrote:\n> me too", ask, 1, true)
    assert.not_matches("card", ask, 1, true)
  end)

  it("refuses other repositories, other authors, old deliveries and pull requests", function()
    local _, why = issues.read("issues", opened{ repository = { full_name = "acme/web" } }, pol, BOT, NOW, 3600)
    assert.matches("not in issues.repositories", why, 1, true)
    local p = opened()
    p.issue.author_association = "NONE"
    _, why = issues.read("issues", p, pol, BOT, NOW, 3600)
    assert.matches("may not start runs", why, 1, true)
    _, why = issues.read("issues", opened(), pol, BOT, NOW + 7200, 3600)
    assert.matches("a replay", why, 1, true)
    p = opened()
    p.issue.pull_request = { url = "x" }
    assert.is_nil(issues.read("issues", p, pol, BOT, NOW, 3600))
    assert.is_nil(issues.read("issues", opened{ action = "closed" }, pol, BOT, NOW, 3600))
  end)

  it("takes an assignment to the bot, and a comment that mentions it, never the bot's own", function()
    local a = opened{ action = "assigned", assignee = { login = BOT }, sender = { login = "lead" } }
    local i = assert(issues.read("issues", a, pol, BOT, NOW, 3600))
    assert.same({ "assigned", "lead" }, { i.how, i.user })
    assert.is_nil(issues.read("issues", opened{ action = "assigned", assignee = { login = "ben" } }, pol, BOT, NOW, 3600))
    local c = opened{ action = "created", comment = { id = 31, body = "@switchboard please fix", user = { login = "ben" },
                      author_association = "COLLABORATOR", created_at = "2026-12-01T19:04:00Z", updated_at = "2026-12-01T19:04:00Z" } }
    i = assert(issues.read("issue_comment", c, pol, BOT, NOW, 3600))
    assert.same({ "mention", "ben" }, { i.how, i.user })
    assert.matches("@ben asked you in a comment:\n> @switchboard please fix", issues.ask_text(i), 1, true)
    -- the issue's comments as fetched include the mention itself: it is quoted once, as the ask
    assert.not_matches("@ben wrote:", issues.ask_text(i, { { user = "ben", body = "@switchboard please fix" } }), 1, true)
    c.comment.body = "no mention"
    assert.is_nil(issues.read("issue_comment", c, pol, BOT, NOW, 3600))
    c.comment.body, c.comment.user = "@switchboard done", { login = BOT, type = "Bot" }
    local _, why = issues.read("issue_comment", c, pol, BOT, NOW, 3600)
    assert.matches("by a bot", why, 1, true)
    assert.is_nil(issues.read("issue_comment", c, pol, nil, NOW, 3600)) -- no GITHUB_BOT_LOGIN: no mention to match
  end)
end)

describe("issues.seen_key", function()
  it("names a delivery by its signed ids: one key for opened and assigned, a comment's id and updated_at", function()
    assert.equal("issue:9:opened", issues.seen_key("issues", opened()))
    assert.equal("issue:9:opened", issues.seen_key("issues", opened{ action = "assigned" }))
    local c = opened{ comment = { id = 31.0, updated_at = "2026-12-01T19:04:00Z" } }
    assert.equal("issue_comment:31:2026-12-01T19:04:00Z", issues.seen_key("issue_comment", c))
    assert.is_nil(issues.seen_key("issues", { issue = {} }))
    assert.is_nil(issues.seen_key("push", opened()))
  end)
end)

describe("pull requests opened for a review", function()
  local pulls = require("switchboard.fronts.github.pulls")
  local pr_review = require("switchboard.dispatch.pr_review")
  local rpol = setmetatable({ repositories = { "acme/api" } }, { __index = P.shipped().agents.pull_request_reviews })
  local function pr_event(over)
    local p = { action = "opened", repository = { full_name = "acme/api" },
                pull_request = { id = 42, number = 3, title = "T", body = "B", html_url = "https://github.com/acme/api/pull/3",
                                 draft = false, user = { login = "dev" }, head = { ref = "f", sha = "abc" }, base = { ref = "main" } } }
    for k, v in pairs(over or {}) do p.pull_request[k] = v end
    return p
  end

  it("reads an opened pull request of a listed repository; not a draft, not the bot's own, not elsewhere", function()
    local pr = assert(pulls.read("pull_request", pr_event(), rpol, BOT))
    assert.same({ "acme/api", 3, "f", "abc", "main" }, { pr.repo, pr.number, pr.head_ref, pr.head_sha, pr.base_ref })
    assert.equal("pull_request:42:abc:opened", pulls.seen_key("pull_request", pr_event()))
    assert.matches("a draft", select(2, pulls.read("pull_request", pr_event{ draft = true }, rpol, BOT)), 1, true)
    assert.matches("own", select(2, pulls.read("pull_request", pr_event{ user = { login = BOT } }, rpol, BOT)), 1, true)
    local closed = pr_event()
    closed.action = "closed"
    assert.is_nil(pulls.read("pull_request", closed, rpol, BOT))
    local other = pr_event()
    other.repository.full_name = "acme/web"
    assert.is_nil(pulls.read("pull_request", other, rpol, BOT))
    assert.matches("review-comments", pulls.ask_text(pr), 1, true)
  end)

  it("parses the answer's review-comments block into line comments and the body", function()
    local body, comments = pr_review.parse("Good.\n\n```review-comments\nsrc/a.lua:12: use a local\nnot a comment\nb.md:3:  typo \n```\nThanks.")
    assert.equal("Good.\n\n\nThanks.", body)
    assert.same({ { path = "src/a.lua", line = 12, body = "use a local" }, { path = "b.md", line = 3, body = "typo" } }, comments)
    body, comments = pr_review.parse("  Only prose.  ")
    assert.equal("Only prose.", body)
    assert.same({}, comments)
  end)

  it("drops a line comment whose line GitHub cannot have: 0, or past an integer (found by fuzz.github_webhook)", function()
    local _, comments = pr_review.parse("```review-comments\na.lua:0: zero\nb.lua:" .. ("5"):rep(40)
      .. ": huge\nc.lua:7: kept\n```")
    assert.same({ { path = "c.lua", line = 7, body = "kept" } }, comments)
  end)
end)

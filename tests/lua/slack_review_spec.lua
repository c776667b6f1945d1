-- GitHub's webhook deliveries as review comments (fronts/slack/review.lua): the signature,
-- which comments start a run, and the ask they make. The whole path runs black-box in
-- tests/e2e/agent_craft_spec.lua.
local core = require("switchboard.core")
local review = require("switchboard.fronts.slack.review")
local P = require("support.policies")

local pol = P.shipped().agents.review_comments

local function sign(secret, body)
  return "sha256=" .. core.crypto.hex(core.crypto.hmac_sha256(secret, body))
end

local function payload(over)
  local p = {
    action = "created", repository = { full_name = "acme/api" },
    pull_request = { number = 3, html_url = "https://github.com/acme/api/pull/3", head = { ref = "switchboard/x" } },
    comment = { body = "@switchboard use a constant", user = { login = "ana" }, author_association = "MEMBER",
                path = "a.go", line = 7, created_at = "2026-12-01T19:00:00Z", diff_hunk = "@@ -1 +1 @@" },
  }
  for k, v in pairs(over or {}) do p.comment[k] = v end
  return p
end

local NOW = review.iso_seconds("2026-12-01T19:05:00Z")

describe("review.verify", function()
  it("accepts the HMAC of the raw body with the secret, and nothing else", function()
    local body = '{"a":1}'
    assert.is_true(review.verify("s3cret", { ["x-hub-signature-256"] = sign("s3cret", body) }, body))
    assert.same({ false, "wrong signature" }, { review.verify("s3cret", { ["x-hub-signature-256"] = sign("other", body) }, body) })
    assert.same({ false, "wrong signature" }, { review.verify("s3cret", { ["x-hub-signature-256"] = sign("s3cret", body) }, body .. " ") })
    assert.same({ false, "unsigned" }, { review.verify("s3cret", {}, body) })
    assert.same({ false, "no GITHUB_WEBHOOK_SECRET" }, { review.verify(nil, { ["x-hub-signature-256"] = "sha256=" }, body) })
  end)
end)

describe("review.read", function()
  it("takes a new review comment that mentions the bot by an allowed author", function()
    local c = assert(review.read("pull_request_review_comment", payload(), pol, NOW, 3600))
    assert.equal("acme/api", c.repo)
    assert.equal(3, c.pr_number)
    assert.equal("a.go", c.path)
    assert.equal(7, c.line)
    local ask = review.ask_text(c)
    assert.matches("A review comment by @ana on pull request #3 on a.go line 7 (https://github.com/acme/api/pull/3):", ask, 1, true)
    assert.matches("> @switchboard use a constant", ask, 1, true)
    assert.matches("```diff\n@@ -1 +1 @@\n```", ask, 1, true)
  end)

  it("ignores a comment without the mention, by an author policy does not allow, too old, or not new", function()
    assert.is_nil(review.read("pull_request_review_comment", payload{ body = "looks good" }, pol, NOW, 3600))
    local _, why = review.read("pull_request_review_comment", payload{ author_association = "NONE" }, pol, NOW, 3600)
    assert.matches("may not start runs", why, 1, true)
    _, why = review.read("pull_request_review_comment", payload(), pol, NOW + 7200, 3600)
    assert.matches("a replay", why, 1, true)
    local edited = payload()
    edited.action = "edited"
    assert.is_nil(review.read("pull_request_review_comment", edited, pol, NOW, 3600))
    assert.is_nil(review.read("push", payload(), pol, NOW, 3600))
  end)

  it("reads an issue comment on a pull request, and a review", function()
    local p = { action = "created", repository = { full_name = "acme/api" },
                issue = { number = 4, pull_request = { html_url = "https://github.com/acme/api/pull/4" } },
                comment = { body = "@Switchboard rebase please", user = { login = "ben" }, author_association = "OWNER",
                            created_at = "2026-12-01T19:04:00Z" } }
    local c = assert(review.read("issue_comment", p, pol, NOW, 3600))
    assert.equal(4, c.pr_number)
    p.issue.pull_request = nil -- a plain issue
    assert.is_nil(review.read("issue_comment", p, pol, NOW, 3600))
    local r = { action = "submitted", repository = { full_name = "acme/api" },
                pull_request = { number = 5, html_url = "https://github.com/acme/api/pull/5" },
                review = { body = "@switchboard two nits", user = { login = "c" }, author_association = "COLLABORATOR",
                           submitted_at = "2026-12-01T19:01:00Z" } }
    assert.equal(5, assert(review.read("pull_request_review", r, pol, NOW, 3600)).pr_number)
  end)

  it("reads GitHub's times as UTC", function()
    assert.equal(0, review.iso_seconds("1970-01-01T00:00:00Z"))
    assert.equal(1764615600, review.iso_seconds("2025-12-01T19:00:00Z"))
    assert.equal(review.iso_seconds("2026-12-01T19:00:00Z"), review.iso_seconds("2026-12-01T20:00:00+01:00"))
    assert.is_nil(review.iso_seconds("yesterday"))
  end)
end)

describe("review.seen_key", function()
  it("names a delivery by what its signature covers: the comment's id and updated_at, the review's id", function()
    local p = payload{ id = 1001, updated_at = "2026-12-01T19:00:00Z" }
    assert.equal("review_comment:1001:2026-12-01T19:00:00Z", review.seen_key("pull_request_review_comment", p))
    p.comment.updated_at = "2026-12-01T19:02:00Z" -- the same comment edited is another key
    assert.equal("review_comment:1001:2026-12-01T19:02:00Z", review.seen_key("pull_request_review_comment", p))
    assert.equal("comment:1001:2026-12-01T19:02:00Z", review.seen_key("issue_comment", p))
    assert.equal("review:77", review.seen_key("pull_request_review", { review = { id = 77.0 } }))
    assert.is_nil(review.seen_key("pull_request_review_comment", payload())) -- no id: nothing to run once on
    assert.is_nil(review.seen_key("pull_request_review", {}))
    assert.is_nil(review.seen_key("push", p))
  end)
end)

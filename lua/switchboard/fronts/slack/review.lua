-- Review comments on the bot's pull requests, from GitHub's webhooks (docs/agent.md "Iteration
-- from review comments"): POST /github/webhook on the bot's Events API listener.
--
--   review.verify(secret, headers, raw_body) → true | false, why     (why is for the log)
--   review.read(event_name, payload, policy, now_s, max_age_s) → comment | nil, why
--     comment = {repo, pr_number, pr_url, user, association, body, path?, line?, diff_hunk?,
--                kind = "review_comment" | "review" | "comment"}
--   review.ask_text(comment) → the follow-up's ask
--   review.seen_key(event_name, payload) → "review_comment:<id>:<updated_at>" | nil
--
-- A delivery must carry X-Hub-Signature-256 = "sha256=" + hex(HMAC-SHA256(the App's webhook
-- secret, the raw body)), compared in constant time. A follow-up runs once per seen_key — read
-- from the signed body (the comment's id and updated_at, the review's id), never from
-- X-GitHub-Delivery, which the signature does not cover (a captured request replayed under a
-- new delivery id is the same comment) — and the caller keeps the keys in the thread's record
-- for max_age_s, across restarts; a comment older than max_age_s is refused, so a delivery
-- replayed after its key expired still runs nothing.
local core = require("switchboard.core")

local M = {}

function M.verify(secret, headers, body)
  if not secret or secret == "" then return false, "no GITHUB_WEBHOOK_SECRET" end
  local sig = headers["x-hub-signature-256"]
  if type(sig) ~= "string" then return false, "unsigned" end
  local want = "sha256=" .. core.crypto.hex(core.crypto.hmac_sha256(secret, body or ""))
  if not core.crypto.ct_equal(want, sig) then return false, "wrong signature" end
  return true
end

local function mentions(body, who)
  for _, name in ipairs(who) do
    local at = body:lower():find(name:lower(), 1, true)
    if at then return true end
  end
  return false
end

local function allowed(association, list)
  for _, a in ipairs(list) do if a == association then return true end end
  return false
end

-- "2026-12-01T19:40:00Z" → seconds since the epoch (UTC), or nil.
function M.iso_seconds(s)
  if type(s) ~= "string" then return nil end
  local y, mo, d, h, mi, sec = s:match("^(%d%d%d%d)%-(%d%d)%-(%d%d)T(%d%d):(%d%d):(%d%d)")
  if not y then return nil end
  y, mo, d = tonumber(y), tonumber(mo), tonumber(d)
  -- days from the civil date (Howard Hinnant's algorithm): no os.time, which is local time
  y = mo <= 2 and y - 1 or y
  local era = (y >= 0 and y or y - 399) // 400
  local yoe = y - era * 400
  local doy = (153 * (mo + (mo > 2 and -3 or 9)) + 2) // 5 + d - 1
  local doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
  local days = era * 146097 + doe - 719468
  local zone = s:match("([+-]%d%d):?(%d%d)$")
  local off = 0
  if zone then
    local sign, zh, zm = s:match("([+-])(%d%d):?(%d%d)$")
    off = (tonumber(zh) * 3600 + tonumber(zm) * 60) * (sign == "-" and -1 or 1)
  end
  return days * 86400 + tonumber(h) * 3600 + tonumber(mi) * 60 + tonumber(sec) - off
end

-- t[k] when t is a table (a signed body of an unexpected shape reads as absent, never raises:
-- tests/fuzz/fuzz_github_webhook.c).
local function field(t, k) return type(t) == "table" and t[k] or nil end

-- The comment of a delivery that should start a follow-up, or nil and why not.
function M.read(event, p, pol, now_s, max_age_s)
  if type(p) ~= "table" then return nil, "not a JSON object" end
  local repo = type(p.repository) == "table" and p.repository.full_name
  local c
  if event == "pull_request_review_comment" and p.action == "created" and type(p.comment) == "table"
      and type(p.pull_request) == "table" then
    c = { kind = "review_comment", body = p.comment.body, at = p.comment.created_at, user = field(p.comment.user, "login"),
          association = p.comment.author_association, path = p.comment.path,
          line = p.comment.line or p.comment.original_line, diff_hunk = p.comment.diff_hunk,
          pr_number = p.pull_request.number, pr_url = p.pull_request.html_url,
          head = field(p.pull_request.head, "ref") }
  elseif event == "pull_request_review" and p.action == "submitted" and type(p.review) == "table"
      and type(p.pull_request) == "table" then
    c = { kind = "review", body = p.review.body, at = p.review.submitted_at, user = field(p.review.user, "login"),
          association = p.review.author_association, pr_number = p.pull_request.number,
          pr_url = p.pull_request.html_url, head = field(p.pull_request.head, "ref") }
  elseif event == "issue_comment" and p.action == "created" and type(p.issue) == "table"
      and type(p.issue.pull_request) == "table" and type(p.comment) == "table" then
    c = { kind = "comment", body = p.comment.body, at = p.comment.created_at, user = field(p.comment.user, "login"),
          association = p.comment.author_association, pr_number = p.issue.number,
          pr_url = p.issue.pull_request.html_url or p.issue.html_url }
  else
    return nil, "not a new comment on a pull request (" .. tostring(event) .. " " .. tostring(p.action) .. ")"
  end
  c.repo = repo
  -- JSON numbers may decode as floats: #1, line 2 — not #1.0
  c.pr_number = math.tointeger(c.pr_number) or c.pr_number
  c.line = c.line ~= nil and (math.tointeger(c.line) or c.line) or nil
  if c.line == core.json.null then c.line = nil end
  if type(c.body) ~= "string" or c.body == "" then return nil, "an empty comment" end
  if type(c.pr_url) ~= "string" or type(repo) ~= "string" then return nil, "no pull request or repository" end
  if not mentions(c.body, pol.mention) then return nil, "the comment does not mention the bot" end
  local at = M.iso_seconds(c.at)
  if not at then return nil, "the comment has no time" end
  if now_s and max_age_s and now_s - at > max_age_s then
    return nil, ("the comment is %d s old, older than the %d s a delivery id is remembered: a replay"):format(now_s - at, max_age_s)
  end
  if not allowed(c.association, pol.allow_associations) then
    return nil, ("%s (%s) may not start runs (review_comments.allow_associations)"):format(
      tostring(c.user), tostring(c.association))
  end
  return c
end

-- The id of a delivery's object (a comment, review or issue) as a string, or nil when it has none
-- (a number or a string; fronts/github/issues.lua's seen_key reads ids alike).
function M.id_of(v)
  local n = type(v) == "table" and (math.tointeger(v.id) or (type(v.id) == "string" and v.id))
  return n and tostring(n) or nil
end
local id_of = M.id_of

-- What the signature covers that names the comment: its kind, id and (for a comment) the time
-- it was last edited. nil when the body names no id (such a delivery starts nothing: read()
-- refuses what it cannot place either).
function M.seen_key(event, p)
  if type(p) ~= "table" then return nil end
  if event == "pull_request_review" then
    local id = id_of(p.review)
    return id and ("review:" .. id) or nil
  end
  local kind = event == "pull_request_review_comment" and "review_comment"
    or event == "issue_comment" and "comment" or nil
  local id = kind and id_of(p.comment)
  if not id then return nil end
  local at = p.comment.updated_at
  return ("%s:%s:%s"):format(kind, id, type(at) == "string" and at or "")
end

function M.ask_text(c)
  local where = c.path and ((" on %s%s"):format(c.path, c.line and (" line " .. tostring(c.line)) or "")) or ""
  local parts = { ("A review comment by @%s on pull request #%s%s (%s):"):format(tostring(c.user),
    tostring(c.pr_number), where, c.pr_url), "", (c.body:gsub("\r\n", "\n"):gsub("\n", "\n> "):gsub("^", "> ")) }
  if type(c.diff_hunk) == "string" and c.diff_hunk ~= "" then
    parts[#parts + 1] = ""
    parts[#parts + 1] = "The diff hunk it is on:"
    parts[#parts + 1] = "```diff\n" .. c.diff_hunk .. "\n```"
  end
  parts[#parts + 1] = ""
  parts[#parts + 1] = "Change the code on this pull request's branch as the comment asks, then say briefly what you changed."
  return table.concat(parts, "\n")
end

return M

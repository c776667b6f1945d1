-- Pull requests opened as asks for a review (docs/github.md "Reviews when a pull request
-- opens"): a `pull_request` event whose action is in policy's `actions` (opened,
-- ready_for_review) in one of its `repositories`, not a draft, not the bot's own, starts the
-- review agent in the pull request's thread "github:OWNER/REPO#N"; its answer becomes a review
-- (dispatch/pr_review.lua).
--
--   pulls.read(event, payload, pol, bot_login) → pr | nil, why
--     pr = {repo, number, title, body, url, head_ref, head_sha, base_ref, user}
--   pulls.seen_key(event, payload) → "pull_request:<id>:<head sha>:opened" | nil
--   pulls.ask_text(pr) → the review's ask
local pr_review = require("switchboard.dispatch.pr_review")

local M = {}

local function listed(list, v)
  for _, x in ipairs(list) do if x == v then return true end end
  return false
end

function M.read(event, p, pol, bot_login)
  if event ~= "pull_request" or type(p) ~= "table" or type(p.pull_request) ~= "table" then
    return nil, "not a pull request event"
  end
  if not listed(pol.actions, p.action) then
    return nil, ("pull request %s is not in pull_request_reviews.actions"):format(tostring(p.action))
  end
  local repo = type(p.repository) == "table" and p.repository.full_name
  if type(repo) ~= "string" or not listed(pol.repositories, repo) then
    return nil, tostring(repo) .. " is not in pull_request_reviews.repositories (policies/agents.lua)"
  end
  local pr = p.pull_request
  if pr.draft == true then return nil, "a draft: reviewed when it is marked ready" end
  local user = type(pr.user) == "table" and pr.user.login or nil
  if bot_login and user == bot_login then return nil, "the bot's own pull request" end
  local head, base = type(pr.head) == "table" and pr.head or {}, type(pr.base) == "table" and pr.base or {}
  local number = math.tointeger(pr.number) or pr.number
  if type(number) ~= "number" then return nil, "the pull request has no number" end
  return { repo = repo, number = number, title = tostring(pr.title or ""),
           body = type(pr.body) == "string" and pr.body or "", url = tostring(pr.html_url or ""),
           head_ref = tostring(head.ref or ""), head_sha = tostring(head.sha or ""), base_ref = tostring(base.ref or ""),
           user = user }
end

function M.seen_key(event, p)
  if event ~= "pull_request" or type(p) ~= "table" or type(p.pull_request) ~= "table" then return nil end
  local pr = p.pull_request
  local id = math.tointeger(pr.id) or (type(pr.id) == "string" and pr.id)
  local sha = type(pr.head) == "table" and type(pr.head.sha) == "string" and pr.head.sha
  if not id or not sha then return nil end
  -- opened and ready_for_review of one head share the key: that head is reviewed once
  return ("pull_request:%s:%s:opened"):format(tostring(id), sha)
end

function M.ask_text(pr)
  local parts = {
    ("Review pull request #%d in %s (%s) by @%s: %s"):format(pr.number, pr.repo, pr.url, tostring(pr.user), pr.title),
  }
  if pr.body ~= "" then parts[#parts + 1] = "\n> " .. pr.body:gsub("\r\n", "\n"):gsub("\n", "\n> ") end
  parts[#parts + 1] = ("\nIts branch `%s` (head %s) merges into `%s`: fetch it (`git fetch origin %s`) and read "
    .. "`git diff origin/%s...FETCH_HEAD`. Say what is wrong or risky and what is good; change nothing.")
    :format(pr.head_ref, pr.head_sha, pr.base_ref, pr.head_ref, pr.base_ref)
  parts[#parts + 1] = "\n" .. pr_review.FORMAT
  return table.concat(parts, "\n")
end

return M

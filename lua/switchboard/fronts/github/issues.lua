-- GitHub issues as asks (docs/github.md "Runs from issues"): an `issues` event (opened, or
-- assigned to the App's bot user) or an `issue_comment` that mentions the bot on a plain issue
-- (a pull request's comments are fronts/slack/review.lua's) starts a run on the repository with
-- the issue as the ask. Verified like the review route (review.verify, on the same listener).
--
--   issues.read(event, payload, pol, bot_login, now_s, max_age_s) → issue | nil, why
--     issue = {repo, number, title, body, url, user, association, how = "opened" | "assigned" |
--              "mention", comment?}
--   issues.seen_key(event, payload) → "issue:<id>:opened" | "issue_comment:<id>:<updated_at>" | nil
--   issues.thread(repo, number) → "github:OWNER/REPO#N"   the run's thread (its workspace, its
--                                                          record; follow-ups on the issue join it)
--   issues.ask_text(issue, comments) → the run's ask
--
-- pol is policies/agents.lua `issues`: repositories (which repositories' issues may start runs),
-- start_on (opened, assigned, mention), allow_associations (who may start one, as
-- review_comments). A delivery runs once per seen_key (read from the signed body, kept in the
-- record), and one older than max_age_s is refused, as a review comment is.
local review = require("switchboard.fronts.slack.review")

local M = {}

local function listed(list, v)
  for _, x in ipairs(list) do if x == v then return true end end
  return false
end

local function login_of(u) return type(u) == "table" and type(u.login) == "string" and u.login or nil end

-- "@name" for the App's bot user "name[bot]".
function M.mention_of(bot_login)
  if type(bot_login) ~= "string" or bot_login == "" then return nil end
  return "@" .. bot_login:gsub("%[bot%]$", "")
end

-- Which event starts a run, and the time that makes an old delivery a replay.
local function trigger(event, p, bot_login)
  local issue = p.issue
  if type(issue) ~= "table" then return nil, "no issue" end
  if type(issue.pull_request) == "table" then return nil, "a pull request, not an issue" end
  if event == "issues" and p.action == "opened" then
    return "opened", issue.created_at, login_of(issue.user), issue.author_association
  end
  if event == "issues" and p.action == "assigned" then
    if not bot_login or login_of(p.assignee) ~= bot_login then return nil, "assigned to someone else" end
    -- who assigned it is the sender; the association GitHub gives is the issue author's
    return "assigned", issue.updated_at, login_of(p.sender), issue.author_association
  end
  if event == "issue_comment" and p.action == "created" and type(p.comment) == "table" then
    local c = p.comment
    if login_of(c.user) == bot_login or (type(c.user) == "table" and c.user.type == "Bot") then
      return nil, "a comment by a bot (the bot's own card among them)"
    end
    local mention = M.mention_of(bot_login)
    if not mention or type(c.body) ~= "string" or not c.body:lower():find(mention:lower(), 1, true) then
      return nil, "the comment does not mention the bot"
    end
    return "mention", c.created_at, login_of(c.user), c.author_association
  end
  return nil, ("not an opened or assigned issue or a new comment (%s %s)"):format(tostring(event), tostring(p.action))
end

function M.read(event, p, pol, bot_login, now_s, max_age_s)
  if type(p) ~= "table" then return nil, "not a JSON object" end
  local how, at, user, association = trigger(event, p, bot_login)
  if not how then return nil, at end
  local repo = type(p.repository) == "table" and p.repository.full_name
  if type(repo) ~= "string" then return nil, "no repository" end
  if not listed(pol.repositories, repo) then
    return nil, repo .. " is not in issues.repositories (policies/agents.lua)"
  end
  if not listed(pol.start_on, how) then return nil, how .. " is not in issues.start_on" end
  local t = review.iso_seconds(at)
  if not t then return nil, "the delivery has no time" end
  if now_s and max_age_s and now_s - t > max_age_s then
    return nil, ("the %s is %d s old, older than the %d s a key is remembered: a replay"):format(how, now_s - t, max_age_s)
  end
  -- an assignment is the assigner's act; an assignee the App may not know lists no association
  if how ~= "assigned" and not listed(pol.allow_associations, association) then
    return nil, ("%s (%s) may not start runs (issues.allow_associations)"):format(tostring(user), tostring(association))
  end
  local i = p.issue
  local number = math.tointeger(i.number) or i.number
  if type(number) ~= "number" then return nil, "the issue has no number" end
  return { repo = repo, number = number, title = tostring(i.title or ""),
           body = type(i.body) == "string" and i.body or "", url = tostring(i.html_url or ""),
           user = user, association = association, how = how,
           comment = how == "mention" and p.comment.body or nil }
end

function M.seen_key(event, p)
  if type(p) ~= "table" then return nil end
  local id_of = review.id_of
  if event == "issues" then
    -- opened and assigned share the key: an issue opened already assigned to the bot (both
    -- events) starts one run
    local id = id_of(p.issue)
    return id and ("issue:" .. id .. ":opened") or nil
  end
  if event == "issue_comment" then
    local id = id_of(p.comment)
    if not id then return nil end
    local at = p.comment.updated_at
    return ("issue_comment:%s:%s"):format(id, type(at) == "string" and at or "")
  end
  return nil
end

function M.thread(repo, number)
  return ("github:%s#%d"):format(repo, number)
end

local function quote(s)
  return (s:gsub("\r\n", "\n"):gsub("\n", "\n> "):gsub("^", "> "))
end

function M.ask_text(i, comments)
  local parts = { ("Issue #%d in %s (%s): %s"):format(i.number, i.repo, i.url, i.title) }
  if i.body ~= "" then parts[#parts + 1] = "\n" .. quote(i.body) end
  local said = {}
  for _, c in ipairs(comments or {}) do
    -- the mentioning comment is quoted once, below, as the ask
    if not c.bot and not (i.comment and c.body == i.comment) then said[#said + 1] = ("@%s wrote:\n%s"):format(c.user, quote(c.body)) end
  end
  if #said > 0 then
    parts[#parts + 1] = "\nThe issue's comments, oldest first:\n\n" .. table.concat(said, "\n\n")
  end
  if i.how == "mention" then
    parts[#parts + 1] = ("\n@%s asked you in a comment:\n%s"):format(tostring(i.user), quote(i.comment))
  end
  parts[#parts + 1] = "\nDo what the issue asks in the repository, then say briefly what you changed."
  return table.concat(parts, "\n")
end

return M

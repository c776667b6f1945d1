-- Issue comments and pull-request reviews through GitHub's REST API, with an installation
-- token (docs/github.md "Runs from issues", "Reviews when a pull request opens").
--
--   POST  /repos/{o}/{r}/issues/{n}/comments      {body}   a comment (201) → {id, url}
--   PATCH /repos/{o}/{r}/issues/comments/{id}     {body}   its edit (200)
--   GET   /repos/{o}/{r}/issues/{n}/comments?per_page=N    the issue's comments, oldest first
--   POST  /repos/{o}/{r}/pulls/{n}/reviews  {event = "COMMENT", body, comments = [{path, line,
--         side = "RIGHT", body}]}                          a review with line comments (200)
--
--   o = {api_url, token, repo, number?, timeout_ms, request?, user_agent?}
--   issues.create_comment(o, body) → {id, url} | nil, err
--   issues.edit_comment(o, id, body) → true | nil, err
--   issues.comments(o, max) → {{user, body, bot}, …} | nil, err
--   issues.review(o, body, comments) → {id, folded} | nil, err  a 422 (a line outside the diff)
--       is answered by sending the review again with every line comment folded into its body
-- err: core.error "github" saying what GitHub answered and what to do (pulls.explain).
local core = require("switchboard.core")
local pulls = require("switchboard.github.pulls")

local M = {}

local function fail(status, doc, what, o)
  if status == nil then return nil, core.error("github", doc) end
  return nil, core.error("github", pulls.explain(status, doc, what, o.repo), { status = status })
end

function M.create_comment(o, body)
  local status, doc, err = pulls.call(o, "POST", ("/repos/%s/issues/%d/comments"):format(o.repo, o.number), { body = body })
  if status ~= 201 or type(doc) ~= "table" then
    return fail(status, status and doc or err, "comment on issue #" .. tostring(o.number), o)
  end
  return { id = math.tointeger(doc.id) or doc.id, url = doc.html_url }
end

function M.edit_comment(o, id, body)
  local status, doc, err = pulls.call(o, "PATCH", ("/repos/%s/issues/comments/%s"):format(o.repo, tostring(id)), { body = body })
  if status ~= 200 then return fail(status, status and doc or err, "edit comment " .. tostring(id), o) end
  return true
end

function M.comments(o, max)
  local status, doc, err = pulls.call(o, "GET", ("/repos/%s/issues/%d/comments?per_page=%d"):format(o.repo, o.number,
    math.min(100, math.max(1, max))))
  if status ~= 200 or type(doc) ~= "table" then
    return fail(status, status and doc or err, "read the comments of issue #" .. tostring(o.number), o)
  end
  local out = {}
  for _, c in ipairs(doc) do
    if type(c) == "table" and type(c.body) == "string" then
      local user = type(c.user) == "table" and c.user or {}
      out[#out + 1] = { user = tostring(user.login), body = c.body, bot = user.type == "Bot" }
    end
  end
  return out
end

local function folded_body(body, comments)
  local parts = { body }
  for _, c in ipairs(comments) do
    parts[#parts + 1] = ("**%s line %s**: %s"):format(c.path, tostring(c.line), c.body)
  end
  return table.concat(parts, "\n\n")
end

function M.review(o, body, comments)
  local path = ("/repos/%s/pulls/%d/reviews"):format(o.repo, o.number)
  local lines = {}
  for i, c in ipairs(comments or {}) do
    lines[i] = { path = c.path, line = c.line, side = "RIGHT", body = c.body }
  end
  local doc = { event = "COMMENT", body = body }
  if #lines > 0 then doc.comments = lines end
  local status, got, err = pulls.call(o, "POST", path, doc)
  local folded = false
  if status == 422 and #lines > 0 then
    -- GitHub refuses the whole review when one line is not in the diff: every comment goes in
    -- the body instead, so nothing the agent said is lost
    folded = true
    status, got, err = pulls.call(o, "POST", path, { event = "COMMENT", body = folded_body(body, lines) })
  end
  if status ~= 200 or type(got) ~= "table" then
    return fail(status, status and got or err, "review pull request #" .. tostring(o.number), o)
  end
  return { id = math.tointeger(got.id) or got.id, folded = folded }
end

return M

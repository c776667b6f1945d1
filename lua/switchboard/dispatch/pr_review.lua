-- A pull request's review by an agent (policies/agents.lua `pull_request_reviews`, docs/github.md
-- "Reviews when a pull request opens"): the run's answer becomes a GitHub review — its text the
-- review's body, and the line comments it lists in a fenced `review-comments` block (one
-- `path:line: comment` a line; FORMAT is what the ask tells the agent) line comments on the
-- diff's new side. A comment on a line the diff does not show makes GitHub refuse the whole
-- review (422): it is sent again with every line comment folded into its body
-- (github/issues.lua). The bot posts it with its own token of `post_scope`, never the agent's.
--
--   pr_review.FORMAT                       the ask's instructions for line comments
--   pr_review.parse(answer) → body, {{path, line, body}, …}
--   pr_review.post(o, state, answer, problem)   after the run (dispatch/github_reply.lua):
--     o = {ask, thread (its name), credentials, note(text): a line on the run's card}
local core = require("switchboard.core")
local issues_api = require("switchboard.github.issues")

local M = {}

M.FORMAT = "End your answer with your line comments, if any, in a fenced block whose info string is "
  .. "`review-comments`, one per line as `path:line: comment` — path relative to the repository's root, "
  .. "line the line's number in the pull request's new version. The rest of your answer is the review's summary."

function M.parse(answer)
  answer = answer or ""
  local before, block, after = answer:match("^(.-)```review%-comments[^\n]*\n(.-)```(.*)$")
  if not before then return (answer:match("^%s*(.-)%s*$")), {} end
  local comments = {}
  for line in block:gmatch("[^\n]+") do
    local path, n, text = line:match("^%s*([^:%s][^:]*):(%d+):%s*(.-)%s*$")
    -- a line number GitHub can have: from 1, and an integer (digits past 2^63 read as a float)
    local number = n and math.tointeger(tonumber(n))
    if path and text ~= "" and number and number >= 1 then
      comments[#comments + 1] = { path = path, line = number, body = text }
    end
  end
  local body = (before .. after):match("^%s*(.-)%s*$")
  return body, comments
end

function M.post(o, state, answer, problem)
  local ask = o.ask
  local pr, snap = ask.pr_review, ask.snap
  local body, comments = M.parse(answer)
  if state ~= "done" or body == "" and #comments == 0 then
    o.note(("no review posted on pull request #%d: the run ended %s%s"):format(pr.number, state,
      problem and (" — " .. tostring(problem):match("^[^\n]*")) or ""))
    return
  end
  local creds = o.credentials
  local envs, err = creds and creds:resolve_envs(snap.agents.pull_request_reviews.post_scope, { repo = pr.repo })
  local got
  if envs and envs.GH_TOKEN then
    got, err = issues_api.review({ api_url = creds:api_url(), token = envs.GH_TOKEN, repo = pr.repo, number = pr.number,
      timeout_ms = snap.github.request_timeout_ms }, body ~= "" and body or "(no summary)", comments)
  end
  if got then
    o.note(("reviewed pull request #%d: %d line comment%s%s"):format(pr.number, #comments,
      #comments == 1 and "" or "s", got.folded and " (folded into the review's body: a line is outside the diff)" or ""))
  else
    o.note(("the review of pull request #%d failed: %s"):format(pr.number,
      tostring(err or "no GitHub token"):match("^[^\n]*")))
  end
  core.log(got and "info" or "warn", "agent.pr_review", { thread = o.thread, repo = pr.repo, pr = pr.number,
    comments = #comments, folded = got and got.folded or nil, ok = got ~= nil })
end

return M

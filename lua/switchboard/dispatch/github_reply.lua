-- The GitHub reply of a run GitHub started, as a subscriber of the run's events
-- (dispatch/run_events.lua): at the run's end, a run a review comment started answers on the
-- pull request (what it pushed, or why nothing, and its summary: policies/agents.lua
-- review_comments.reply), and a pull request's review agent posts its answer as a review
-- (dispatch/pr_review.lua). The front put what started it in the ask (ask.review,
-- ask.pr_review); other runs subscribe nothing.
--
--   local fn = github_reply.follow{ask, thread, credentials, note}   → nil for another run
--   note(text): a line on the run's card (the stream's note event)
local core = require("switchboard.core")
local pulls = require("switchboard.github.pulls")
local template = require("switchboard.policy.template")
local pr_review = require("switchboard.dispatch.pr_review")

local M = {}

-- A run a review comment started answers on the pull request: what it pushed (or why
-- nothing), and its summary.
function M.reply_on_review(o, published, publish_problem, e)
  local ask = o.ask
  local c, snap = ask.review, ask.snap
  local what
  if published then
    what = ("I pushed the changes to `%s` (pull request updated)."):format(published.branch)
  elseif publish_problem then
    what = "I could not push the changes: " .. publish_problem
  else
    what = ("I changed nothing (the run ended: %s%s)."):format(e.state, e.problem and (" — " .. e.problem) or "")
  end
  local body = template.fill(snap.agents.review_comments.reply, {
    user = tostring(c.user), what = what,
    summary = (e.answer and e.answer ~= "") and e.answer or "(no summary)",
  })
  local creds = o.credentials
  local envs, err = creds and creds:resolve_envs(ask.agent_def.token_scope, { repo = c.repo })
  local ok
  if envs and envs.GH_TOKEN then
    ok, err = pulls.comment{ api_url = creds:api_url(), token = envs.GH_TOKEN, repo = c.repo,
      number = math.tointeger(c.pr_number) or c.pr_number, body = body, timeout_ms = snap.github.request_timeout_ms }
  end
  if ok then
    o.note(("replied on pull request #%s"):format(tostring(c.pr_number)))
  else
    o.note(("the reply on pull request #%s failed: %s"):format(tostring(c.pr_number),
      tostring(err or "no GitHub token"):match("^[^\n]*")))
  end
  core.log(ok and "info" or "warn", "agent.review_reply", { thread = o.thread, pr = c.pr_url, ok = ok == true })
end

function M.follow(o)
  if not (o.ask.review or o.ask.pr_review) then return nil end
  local published, publish_problem
  return function(e)
    if e.type == "publish" then
      if e.state == "published" then published = e.pull_request end
      if e.state == "failed" then publish_problem = e.problem end
    elseif e.type == "run_end" then
      if o.ask.review then M.reply_on_review(o, published, publish_problem, e) end
      if o.ask.pr_review then pr_review.post(o, e.state, e.answer, e.problem) end
    end
  end
end

return M

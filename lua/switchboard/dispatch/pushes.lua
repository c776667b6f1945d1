-- Pushes to repositories' default branches, as the bot hears of them (GitHub's push webhook,
-- fronts/slack/app.lua): a repository's prepared base older than its last push is stale
-- (docs/sandboxd.md "Repository bases"). The agent's clone sends the time with its request
-- (agent/repo.lua base_since); sandboxd prepares the base again. Kept in the dispatcher, in
-- memory: after a restart the refresh schedule (bases_refresh_ms) covers what was missed.
--
--   pushes.read(event, payload) → "owner/name", at_s | nil   (a push to the default branch)
--   pushes.note(d, repo, at_s)    pushes.since(d, repo) → at_s | nil
local M = {}

function M.read(event, p, now_s)
  if event ~= "push" or type(p) ~= "table" or type(p.repository) ~= "table" then return nil end
  local repo, default = p.repository.full_name, p.repository.default_branch
  if type(repo) ~= "string" or type(default) ~= "string" then return nil end
  if p.ref ~= "refs/heads/" .. default then return nil end
  return repo, now_s
end

function M.note(d, repo, at_s)
  d.pushes = d.pushes or {}
  d.pushes[repo] = at_s
end

function M.since(d, repo)
  return d.pushes and d.pushes[repo] or nil
end

return M

-- What a person reads when an ask cannot be run as written: the ask grammar and the agents
-- of the policy snapshot the ask captured (names, descriptions, whether they work on a
-- repository). Every "no" the dispatcher gives ends with this, so the answer lists what is
-- possible.
local policy = require("switchboard.policy")

local M = {}

M.GRAMMAR = {
  { "run `COMMAND`", "run COMMAND with the default agent" },
  { "agent:NAME run `COMMAND`", "run it as agent NAME" },
  { "agent:NAME run `COMMAND` in OWNER/REPO", "… on a repository (agents that work on one)" },
  { "[agent:NAME] ANYTHING ELSE", "an agent run: the model works with the agent's tools until done" },
  { "model:NAME effort:low|medium|high …", "this thread's model (one its agent allows) and thinking effort, kept until changed" },
  { "stop", "stop this thread's running command or run (and drop its queued asks)" },
  { "repo onboard OWNER/REPO", "onboard a repository on the resident once (clone, install, kept warm)" },
  { "help", "this text" },
}

local function column(rows)
  local width = 0
  for _, r in ipairs(rows) do width = math.max(width, utf8.len(r[1]) or #r[1]) end
  local out = {}
  for _, r in ipairs(rows) do
    local pad = width - (utf8.len(r[1]) or #r[1])
    out[#out + 1] = "  " .. r[1] .. string.rep(" ", pad) .. "  " .. r[2]
  end
  return out
end

local function works_in_repository(a) return (a.resources and a.resources.repository) and true or false end

-- Agents that declare a repository (the ones `in OWNER/REPO` makes sense for).
function M.repository_agents(snap)
  local out = {}
  for _, name in ipairs(policy.agent_names(snap)) do
    if works_in_repository(policy.agent(snap, name)) then out[#out + 1] = name end
  end
  return out
end

function M.agent_lines(snap)
  local rows = {}
  for _, name in ipairs(policy.agent_names(snap)) do
    local a = policy.agent(snap, name)
    local tags = {}
    if name == snap.agents.default_agent then tags[#tags + 1] = "default" end
    tags[#tags + 1] = works_in_repository(a) and "works in a repository" or "no repository"
    rows[#rows + 1] = { name, a.description .. " (" .. table.concat(tags, ", ") .. ")" }
  end
  return column(rows)
end

-- The whole help text. lead: the line that says what went wrong (nil for plain `help`).
-- extra: more grammar rows a front adds (the console's /thread).
function M.text(snap, lead, extra)
  local lines = {}
  if lead then lines[#lines + 1] = lead end
  lines[#lines + 1] = "Ask like this:"
  local rows = {}
  for _, r in ipairs(M.GRAMMAR) do rows[#rows + 1] = r end
  for _, r in ipairs(extra or {}) do rows[#rows + 1] = r end
  for _, l in ipairs(column(rows)) do lines[#lines + 1] = l end
  lines[#lines + 1] = "Agents:"
  for _, l in ipairs(M.agent_lines(snap)) do lines[#lines + 1] = l end
  return table.concat(lines, "\n")
end

return M

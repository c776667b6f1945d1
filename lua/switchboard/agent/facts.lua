-- The facts an agent would otherwise spend its first turns on — the date, the sandbox's OS and
-- toolchains, the repository, its default branch, the branch the run publishes to, `git
-- status` — gathered by one command through the thread's executor at the run's start (so they
-- are the sandbox's, not the bot host's) and put in the system prompt from policy's template
-- (policies/agents.lua environment). The same command makes the scratch directory.
--
--   facts.scratch_dir(snap, repo) → ".git/switchboard-scratch" (inside .git/: never committed)
--   facts.gather(executor, snap, {repo, branch, signal, remaining_ms, now_s?}) → facts
--     facts = {date, os, toolchains, repository, default_branch, publish_branch, publishes,
--              git_status, scratch}; a fact that could not be had says so in words
--   facts.text(snap, facts) → the system prompt's section
local template = require("switchboard.policy.template")

local M = {}

local function quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- Scratch files live inside .git/ when the run has a repository: git never stages what is
-- there, so notes and throwaway scripts cannot end up in the pull request.
function M.scratch_dir(snap, repo)
  local dir = snap.agents.environment.scratch_dir
  if repo then return ".git/" .. dir end
  return dir
end

function M.script(snap, scratch)
  local env = snap.agents.environment
  local lines = {
    'echo "@@os $( (. /etc/os-release 2>/dev/null && printf %s "$PRETTY_NAME") || uname -s) ($(uname -m))"',
  }
  for _, cmd in ipairs(env.toolchains) do
    local name = cmd:match("^(%S+)")
    lines[#lines + 1] = ("if command -v %s >/dev/null 2>&1; then echo \"@@tool $(%s 2>&1 | head -n 1)\"; fi")
      :format(quote(name), cmd)
  end
  lines[#lines + 1] = "mkdir -p -- " .. quote(scratch) .. " 2>/dev/null"
  lines[#lines + 1] = "if [ -d .git ]; then"
  lines[#lines + 1] = "  echo \"@@base $(git symbolic-ref --short refs/remotes/origin/HEAD 2>/dev/null | sed 's|^origin/||')\""
  lines[#lines + 1] = "  echo @@status"
  lines[#lines + 1] = ("  git status --short --branch 2>&1 | head -n %d"):format(env.max_status_lines + 1)
  lines[#lines + 1] = "fi"
  return table.concat(lines, "\n")
end

local function parse(out, max_status)
  local f = { toolchains = {} }
  local status, in_status = {}, false
  for line in out:gmatch("[^\n]*") do
    if in_status then
      if line ~= "" then status[#status + 1] = line end
    elseif line:match("^@@os ") then
      f.os = line:sub(6)
    elseif line:match("^@@tool ") then
      f.toolchains[#f.toolchains + 1] = line:sub(8)
    elseif line:match("^@@base ") then
      f.default_branch = line:sub(8)
    elseif line == "@@status" then
      in_status = true
    end
  end
  if in_status then
    if #status > max_status then
      local n = #status - 1
      status = { table.unpack(status, 1, max_status) }
      status[#status + 1] = ("[more than %d lines: run git status for all]"):format(n)
    end
    f.git_status = table.concat(status, "\n")
  end
  return f
end

function M.gather(ex, snap, o)
  local env = snap.agents.environment
  local scratch = M.scratch_dir(snap, o.repo)
  local f = {}
  local result = ex:exec(M.script(snap, scratch), {
    timeout_ms = env.timeout_ms, signal = o.signal, remaining_ms = o.remaining_ms, snap = snap,
  })
  if result and result.exit_code == 0 then f = parse(result.stdout or "", env.max_status_lines) end
  local unknown = "unknown (the sandbox did not say)"
  return {
    date = os.date("!%A %d %B %Y (UTC)", (o.now_s or os.time)()),
    os = f.os or unknown,
    toolchains = f.toolchains and #f.toolchains > 0 and table.concat(f.toolchains, "; ") or "none of the listed toolchains found",
    repository = o.repo or "none (the workspace starts empty)",
    default_branch = o.repo and (f.default_branch ~= "" and f.default_branch or nil) or "none",
    publish_branch = o.branch or "none", publishes = o.branch ~= nil,
    git_status = f.git_status or (o.repo and unknown or "(not a git repository)"),
    scratch = scratch,
  }
end

function M.text(snap, facts)
  local env = snap.agents.environment
  local vars = {}
  for k, v in pairs(facts) do vars[k] = tostring(v) end
  vars.publishing = facts.publishes and template.fill(env.publishes, { publish_branch = vars.publish_branch })
    or env.publishes_nothing
  vars.default_branch = vars.default_branch or "unknown"
  if vars.git_status == "" then vars.git_status = "(clean)" end
  return template.fill(snap.agents.environment.prompt, vars)
end

M.VARS = { "date", "os", "toolchains", "repository", "default_branch", "publish_branch", "publishing",
           "git_status", "scratch" }

return M

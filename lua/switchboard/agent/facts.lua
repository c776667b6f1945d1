-- The facts an agent would otherwise spend its first turns on, gathered by one command through
-- the thread's executor at the run's start (so they are the sandbox's, not the bot host's),
-- in two parts (policies/agents.lua environment):
--
--   the workspace's   the sandbox's OS and toolchains, the repository and its default branch,
--                     the scratch directory: the same for every run in the workspace, so they
--                     go in the system prompt (`prompt`), which then stays byte-identical
--                     across a thread's runs and the prompt cache holds (issue 36). The OS,
--                     toolchains and default branch are computed once per workspace: the command keeps them in a
--                     file in the scratch directory (named by a hash of the toolchain list, so
--                     a policy change recomputes them) and later runs read that file — a warm
--                     thread never runs `rustc --version` again. A new workspace has no file.
--   the run's         the date, the branch the run publishes to, `git status`: they go at the
--                     start of the run's new user turn (`turn`).
--
-- The same command makes the scratch directory.
--
--   facts.scratch_dir(snap, repo) → ".git/switchboard-scratch" (inside .git/: never committed)
--   facts.gather(executor, snap, {repo, branch, signal, remaining_ms, now_s?, known?}) → facts
--     facts = {date, os, toolchains, repository, default_branch, publish_branch, publishes,
--              git_status, scratch, cached, known}; a fact that could not be had says so in
--              words; cached: the OS and toolchains came from the workspace's file; known: their
--              lines as the file has them — given back as o.known for a new workspace of the
--              same image (backend and agent), it is written there instead of asking the
--              toolchains again (the caller keeps it: dispatch/agent_run.lua)
--   facts.text(snap, facts) → the system prompt's section
--   facts.turn(snap, facts, workspace?) → the text that opens the run's user turn
local core = require("switchboard.core")
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

-- The workspace's facts file: its name carries a hash of what computes them.
function M.facts_file(snap, scratch)
  local list = table.concat(snap.agents.environment.toolchains, "\n")
  return ("%s/.workspace-facts-%s"):format(scratch, core.crypto.hex(core.crypto.sha256(list)):sub(1, 12))
end

-- The commands that compute the OS and toolchain lines, all at once (each toolchain in the
-- background into a file of its own, printed in the list's order): a toolchain whose command
-- fails (rustup's proxy without a default toolchain: "error: rustup could not choose a
-- version") is left out rather than shown as its error. known: the OS and toolchain lines
-- another workspace of the same backend and agent gave (the same image): written as they are.
local function workspace_script(snap, file, known)
  local lines = { ("d=%s.d; rm -rf \"$d\"; mkdir -p \"$d\""):format(quote(file)) }
  if known then
    lines[#lines + 1] = ("printf '%%s\\n' %s > \"$d/0\""):format(quote(known))
  else
    lines[#lines + 1] = 'echo "@@os $( (. /etc/os-release 2>/dev/null && printf %s "$PRETTY_NAME") || uname -s) ($(uname -m))" > "$d/0"'
  end
  for i, cmd in ipairs(known and {} or snap.agents.environment.toolchains) do
    local name = cmd:match("^(%S+)")
    lines[#lines + 1] = ("if command -v %s >/dev/null 2>&1; then ( o=$(%s 2>&1 </dev/null) && echo \"@@tool $(printf '%%s\\n' \"$o\" | head -n 1)\" > \"$d/%d\" ) & fi")
      :format(quote(name), cmd, i)
  end
  -- the repository's default branch: the same for the workspace's life
  lines[#lines + 1] = "if [ -d .git ]; then echo \"@@base $(git symbolic-ref --short refs/remotes/origin/HEAD 2>/dev/null | sed 's|^origin/||')\" > \"$d/base\"; fi"
  lines[#lines + 1] = "wait"
  local parts = { '"$d/0"', '"$d/base"' }
  for i = 1, #snap.agents.environment.toolchains do parts[#parts + 1] = ('"$d/%d"'):format(i) end
  -- a toolchain that is not installed has no file: cat's complaint about it is not a failure
  lines[#lines + 1] = ("cat %s 2>/dev/null > %s.tmp; mv -f %s.tmp %s; rm -rf \"$d\"")
    :format(table.concat(parts, " "), quote(file), quote(file), quote(file))
  return table.concat(lines, "\n")
end

function M.script(snap, scratch, known)
  local env = snap.agents.environment
  local file = M.facts_file(snap, scratch)
  local lines = {
    "mkdir -p -- " .. quote(scratch) .. " 2>/dev/null",
    ("if [ -s %s ]; then echo @@cached; else"):format(quote(file)),
    workspace_script(snap, file, known),
    "fi",
    ("cat %s 2>/dev/null"):format(quote(file)),
    "if [ -d .git ]; then",
    "  echo @@status",
    ("  git status --short --branch 2>&1 | head -n %d"):format(env.max_status_lines + 1),
    "fi",
  }
  return table.concat(lines, "\n")
end

local function parse(out, max_status)
  local f = { toolchains = {} }
  local status, in_status = {}, false
  for line in out:gmatch("[^\n]*") do
    if in_status then
      if line ~= "" then status[#status + 1] = line end
    elseif line == "@@cached" then
      f.cached = true
    elseif line:match("^@@os ") then
      f.os = line:sub(6)
      f.known = { line }
    elseif line:match("^@@tool ") then
      f.toolchains[#f.toolchains + 1] = line:sub(8)
      if f.known then f.known[#f.known + 1] = line end
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
  local result = ex:exec(M.script(snap, scratch, o.known), {
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
    scratch = scratch, cached = f.cached == true,
    known = f.known and table.concat(f.known, "\n") or nil,
  }
end

local function vars_of(snap, facts)
  local env = snap.agents.environment
  local vars = {}
  for k, v in pairs(facts) do vars[k] = tostring(v) end
  vars.publishing = facts.publishes and env.publishes or env.publishes_nothing
  vars.default_branch = vars.default_branch or "unknown"
  if not facts.publishes then vars.publish_branch = "none (this run publishes nothing)" end
  if vars.git_status == "" then vars.git_status = "(clean)" end
  return vars
end

function M.text(snap, facts)
  return template.fill(snap.agents.environment.prompt, vars_of(snap, facts))
end

function M.turn(snap, facts, workspace)
  local vars = vars_of(snap, facts)
  vars.workspace = workspace or "the current directory of each command"
  return template.fill(snap.agents.environment.turn, vars)
end

M.VARS = { "os", "toolchains", "repository", "default_branch", "publishing", "scratch" }
M.TURN_VARS = { "date", "workspace", "publish_branch", "git_status" }

return M

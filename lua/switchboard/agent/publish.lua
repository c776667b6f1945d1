-- The end of a run of an agent that may open pull requests (pull_requests = true in
-- policies/agents.lua): when its repository has changes (files changed, or commits the agent
-- made), commit what is uncommitted on the thread's branch, push it, and open the pull request
-- — or update the one already open for the branch, so a follow-up in the same thread lands in
-- the same pull request.
--
-- The git part is one command through the thread's executor, like the clone (agent/repo.lua):
-- git gets GH_TOKEN (the agent's token, put in the command's environment per command) through
-- a credential helper given with `git -c`, so the token is in no argv, URL or .git/config.
-- The REST part (github/pulls.lua) runs here, with the same agent's token resolved from the
-- identity.
--
--   publish.branch(snap, thread_name, thread_key) → "switchboard/main-1a2b3c4d"
--   publish.run(o) → {state = "none"} | {state = "published", branch, pr = {number, url, action}}
--                  | nil, err (core.error; kind "git" | "push_refused" | "protected" | "conflict" |
--                              "not_found" | "github" | "infra" | "aborted" | "credential"; an
--                              executor's or GitHub's error underneath is its cause)
--     o: executor, snap, repo, thread, thread_key, link, ask, agent, answer, turns, creds,
--        signal, remaining_ms, request?, draft? (why the run stopped before it was done: the
--        pull request is opened as a draft and its description says so)
--   The description lists the files this run changed ({files}: `git diff --name-status`
--   against what the remote had) under the model's own summary ({summary}: its final answer).
local core = require("switchboard.core")
local template = require("switchboard.policy.template")
local errors = require("switchboard.exec.errors")
local pulls = require("switchboard.github.pulls")
local repo_mod = require("switchboard.agent.repo")

local M = {}

-- The most files the description lists one by one.
M.MAX_FILES = 100

local function quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

local function slug(s)
  s = tostring(s):lower():gsub("[^a-z0-9]+", "-"):gsub("^-+", ""):gsub("-+$", "")
  if s == "" then s = "thread" end
  return s:sub(1, 40):gsub("-+$", "")
end

-- The thread's branch: stable for the thread, so every run of it pushes to the same one.
function M.branch(snap, thread_name, thread_key)
  local short = core.crypto.hex(core.crypto.sha256(tostring(thread_key or thread_name))):sub(1, 8)
  return template.fill(snap.agents.pull_request.branch, { thread = slug(thread_name), short_id = short })
end

-- The command: stage and commit what is uncommitted on the branch, and push it when the
-- branch differs from what the remote has. Its stdout's last lines say what happened:
--   @@base NAME       the remote's default branch
--   @@none            nothing to push
--   @@pushed SHA      pushed
-- A failed push exits 20 with git's own words on stdout.
function M.script(branch, name, email, message)
  return table.concat({
    repo_mod.SCRIPT_HEAD,
    "base=$(git symbolic-ref --short refs/remotes/origin/HEAD 2>/dev/null | sed 's|^origin/||')",
    '[ -n "$base" ] || base=$(git remote show origin 2>/dev/null | sed -n "s/.*HEAD branch: //p")',
    'echo "@@base $base"',
    "git add -A",
    "if ! git diff --cached --quiet; then",
    "  git checkout -q -B " .. quote(branch),
    "  git -c user.name=" .. quote(name) .. " -c user.email=" .. quote(email)
      .. " commit -q -F - <<'SWITCHBOARD_MESSAGE'",
    message,
    "SWITCHBOARD_MESSAGE",
    "elif [ \"$(git rev-parse --abbrev-ref HEAD)\" != " .. quote(branch) .. " ]; then",
    "  git checkout -q -B " .. quote(branch),
    "fi",
    "remote=$(git rev-parse -q --verify refs/remotes/origin/" .. quote(branch) .. " || "
      .. 'git rev-parse -q --verify "refs/remotes/origin/$base" || true)',
    'if [ "$(git rev-parse HEAD)" = "$remote" ]; then echo "@@none"; exit 0; fi',
    -- what this run changes on top of what the remote has: the description's file list
    'if [ -n "$remote" ]; then git diff --name-status -M "$remote" HEAD | head -n ' .. (M.MAX_FILES + 1)
      .. ' | sed "s/^/@@file /"; fi',
    'if ! out=$(git "$@" push --porcelain origin ' .. quote("HEAD:refs/heads/" .. branch) .. " 2>&1); then",
    '  printf "%s\\n" "$out"; exit 20',
    "fi",
    "git update-ref " .. quote("refs/remotes/origin/" .. branch) .. " HEAD",
    'echo "@@pushed $(git rev-parse HEAD)"',
  }, "\n")
end

-- git's words, lower case, without the names in them: the remote's address (its port), the
-- repository and the branch are the caller's, and a 403 or "denied" inside one is no status
-- (a 401 from a loopback remote whose port has 403 in it read as a 403).
local function words_only(text, repo, branch)
  local t = text:lower():gsub("%a[%w+.-]*://[^%s'\"]*", "<url>")
  for _, name in ipairs({ repo, branch }) do
    if name ~= "" then t = t:gsub(name:lower():gsub("%p", "%%%0"), "<name>") end
  end
  return t
end

-- The script's output on a refused push without its own marker lines (@@base, the @@file list
-- of what the run changes): git's words alone — a changed file named …denied… or …403… is no
-- status either, and the card shows what git said, not the file list.
function M.git_words(out)
  return ((out .. "\n"):gsub("@@%a+[^\n]*\n", "")):match("^%s*(.-)%s*$")
end

-- What a refused push means, from git's words, and what to do about it: a core.error whose
-- kind names the refusal.
function M.push_problem(repo, branch, text)
  local t = words_only(text, repo, branch)
  if t:find("gh006") or t:find("protected branch") then
    return core.error("protected", ("GitHub refused the push to %s in %s: the branch is protected (GH006). Change "
      .. "pull_request.branch in policies/agents.lua to a name the branch protection rules do not "
      .. "cover, or relax the rule for switchboard's App:\n%s"):format(branch, repo, text))
  end
  if t:find("non%-fast%-forward") or t:find("fetch first") or t:find("%[rejected%]") then
    return core.error("conflict", ("The push to %s in %s was rejected: the branch on GitHub has commits this workspace "
      .. "lacks (someone pushed to it). Ask the agent to pull and merge origin/%s, or delete the "
      .. "branch on GitHub to start it again:\n%s"):format(branch, repo, branch, text))
  end
  if t:find("403") or t:find("permission to") or t:find("denied") or t:find("write access") then
    return core.error("push_refused", ("GitHub refused the push to %s (403): the token this agent got cannot write to the "
      .. "repository. A readonly (read-scoped) token never can; give the agent token_scope = "
      .. "\"write\" in policies/agents.lua and the App \"Contents: Read and write\":\n%s"):format(repo, text))
  end
  if t:find("not found") or t:find("404") then
    return core.error("not_found", ("GitHub answered 404 for %s: the App is not installed on it or does not cover it "
      .. "(App page → Install App → Configure → add the repository):\n%s"):format(repo, text))
  end
  if t:find("401") or t:find("authentication failed") or t:find("could not read username") then
    return core.error("credential", ("GitHub did not accept the token for the push to %s (401): an installation token "
      .. "expires after an hour and can be revoked; ask again in this thread to push with a new "
      .. "one. If it happens again, check the GitHub App's setup (docs/github.md) or GH_TOKEN:\n%s")
      :format(repo, text))
  end
  return core.error("git", ("git could not push %s to %s:\n%s"):format(branch, repo, text))
end

local STATUS = { A = "added", M = "modified", D = "deleted", R = "renamed", C = "copied", T = "type changed" }

-- The "@@file STATUS\tPATH[\tNEW]" lines as a Markdown list.
function M.files_list(out)
  local rows = {}
  for line in out:gmatch("@@file ([^\n]*)") do
    local st, a, b = line:match("^(%a)%d*\t([^\t]+)\t?(.*)$")
    if st then
      if #rows >= M.MAX_FILES then rows[#rows + 1] = ("- … and more (over %d files)"):format(M.MAX_FILES); break end
      local what = STATUS[st] or st
      if b ~= "" then rows[#rows + 1] = ("- `%s` → `%s` (%s)"):format(a, b, what)
      else rows[#rows + 1] = ("- `%s` (%s)"):format(a, what) end
    end
  end
  if #rows == 0 then return "(no file changes: commits only)" end
  return table.concat(rows, "\n")
end

local function texts(o, branch)
  local pol = o.snap.agents.pull_request
  local link = o.link
  if type(link) == "function" then
    local ok, url = pcall(link)
    link = ok and type(url) == "string" and url ~= "" and url or nil
  end
  local ask = (o.ask or ""):gsub("%s+", " "):match("^%s*(.-)%s*$")
  local vars = {
    ask = ask, agent = o.agent, repository = o.repo, thread = tostring(o.thread),
    thread_link = link or ("thread " .. tostring(o.thread)),
    summary = (o.answer and o.answer ~= "") and o.answer or "(the agent gave no summary)",
    turns = tostring(o.turns or 0), branch = branch, files = o.files or "",
    status = o.draft and template.fill(pol.draft_note, { why = o.draft }) or "",
  }
  local title = template.fill(pol.title, vars):gsub("%s+", " ")
  if utf8.len(title) and utf8.len(title) > pol.max_title_chars then
    title = title:sub(1, utf8.offset(title, pol.max_title_chars - 1) - 1) .. "…"
  end
  vars.title = title
  return title, template.fill(pol.body, vars), template.fill(pol.commit_message, vars)
end

function M.run(o)
  local pol = o.snap.agents.pull_request
  local branch = M.branch(o.snap, o.thread, o.thread_key)
  local title, _, message = texts(o, branch)
  local result, err = o.executor:exec(M.script(branch, pol.author_name, pol.author_email, message),
    { signal = o.signal, remaining_ms = o.remaining_ms, snap = o.snap })
  if result == nil then
    local kind = errors.is_infra(err) and "infra" or "git"
    return nil, core.error(kind, ("the changes could not be committed and pushed: %s"):format(tostring(err)), { cause = err })
  end
  if result.aborted then return nil, core.error("aborted", "stopped while pushing") end
  local out = result.stdout or ""
  if result.exit_code == 20 then
    return nil, M.push_problem(o.repo, branch, M.git_words(out))
  end
  if result.exit_code ~= 0 then
    return nil, core.error("git", ("git could not commit the changes on %s (exit %s):\n%s"):format(branch,
      tostring(result.exit_code), (result.text or ""):gsub("^exit %-?%d+: ?", "")))
  end
  local base = out:match("@@base ([^\n]*)")
  if out:find("@@none") then return { state = "none", branch = branch } end
  local sha = out:match("@@pushed (%x+)")
  if not sha then return nil, core.error("git", "git gave no answer about the push:\n" .. out) end
  if base == nil or base == "" then
    return nil, core.error("github", ("pushed %s to %s, but the remote's default branch is unknown, so no pull request "
      .. "was opened; open it on GitHub"):format(branch, o.repo))
  end
  o.files = M.files_list(out)
  local body
  title, body = texts(o, branch)
  -- a run an issue started closes it when its pull request is merged (GitHub's closing keyword)
  if o.fixes then body = body .. ("\n\nFixes #%d"):format(o.fixes) end
  local envs, cerr = o.creds and o.creds:resolve_envs(o.scope, { repo = o.repo })
  if not (envs and envs.GH_TOKEN) then
    return nil, core.error("credential", ("pushed %s to %s, but no token could be had for the pull request: %s"):format(
      branch, o.repo, tostring(cerr or "no GitHub credential (docs/github.md)")), { cause = cerr })
  end
  local pr, perr = pulls.open_or_update{
    api_url = o.creds:api_url(), token = envs.GH_TOKEN, repo = o.repo, branch = branch, base = base,
    title = title, body = body, timeout_ms = o.snap.github.request_timeout_ms, request = o.request,
    user_agent = o.user_agent, draft = o.draft ~= nil,
  }
  if not pr then
    return nil, core.error("github", ("pushed %s to %s (commit %s), but the pull request failed: %s"):format(
      branch, o.repo, sha:sub(1, 12), tostring(perr)), { cause = perr })
  end
  return { state = "published", branch = branch, sha = sha, pr = pr, base = base }
end

return M

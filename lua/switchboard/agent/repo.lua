-- The repository an ask names, made ready in the thread's workspace before the run's first
-- turn: cloned the first time, fetched by a follow-up (the workspace already has .git). It
-- runs as one command through the thread's executor, like any tool call, so it works the same
-- on every backend and obeys the run's clock and hard stop.
--
-- The credential: git gets GH_TOKEN from the command's environment (the executor puts the
-- agent's token there per command) through a credential helper given with `git -c` — which
-- is never written to .git/config — so the token is in no argv, no URL and no file.
--
--   repo.prepare(executor, snap, "acme/api", {signal, remaining_ms, branch?}) → "cloned" | "fetched"
--                                                  (then the thread's branch when a fresh clone
--                                                  checked out the thread's branch)
--                                                                    | nil, err
--     err: core.error, kind "infra" | "capacity" | "tool" | "git" | "stopped" | "not_visible"
--     (the GitHub App is not installed on the repository: the message says where to add it);
--     the executor's error, when there is one, is its cause. An executor that raises is a bug:
--     the raise reaches the run's one catch (dispatch/dispatcher.lua).
local core = require("switchboard.core")
local template = require("switchboard.policy.template")
local errors = require("switchboard.exec.errors")

local M = {}

local function quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

local HELPER = [[!f() { test "$1" = get || exit 0; echo username=x-access-token; echo "password=$GH_TOKEN"; }; f]]
M.HELPER = HELPER

-- The command that clones url into the current directory, or fetches when it is a checkout;
-- a fresh clone checks out the thread's branch when the remote has it.
function M.script(url, branch)
  return table.concat({
    "set -e",
    "export GIT_TERMINAL_PROMPT=0",
    'if [ -n "${GH_TOKEN:-}" ]; then set -- -c credential.helper= -c ' .. quote("credential.helper=" .. HELPER) .. "; fi",
    "if [ -d .git ]; then",
    '  git "$@" fetch --quiet origin',
    "  echo fetched",
    "else",
    '  git "$@" clone --quiet ' .. quote(url) .. " .",
    "  echo cloned",
    -- a workspace rebuilt after a sleep or recycle continues the thread's branch, so the
    -- follow-up's push is a fast-forward of what the thread already pushed
    branch and ("  if git rev-parse -q --verify " .. quote("refs/remotes/origin/" .. branch)
      .. " >/dev/null; then git checkout -q -B " .. quote(branch) .. " "
      .. quote("origin/" .. branch) .. "; echo on-branch; fi") or "  :",
    "fi",
  }, "\n")
end

function M.url(snap, repo)
  return template.fill(snap.github.clone_url, { repo = repo })
end

function M.prepare(ex, snap, repo, ctx)
  local url = M.url(snap, repo)
  local result, err = ex:exec(M.script(url, ctx.branch), { signal = ctx.signal, remaining_ms = ctx.remaining_ms, snap = snap })
  if result == nil then
    local kind = errors.is_infra(err) and "infra" or errors.is_capacity(err) and "capacity" or "tool"
    -- GitHub said the App cannot see the repository (404 for its installation): not the
    -- sandbox's failure, and the message says where to install the App
    local cause = type(err) == "table" and err.cause
    if (type(cause) == "table" and cause.status == 404) or (type(err) == "table" and err.code == "http 404")
        or tostring(err):find("credentials don't have access to", 1, true) then
      kind = "not_visible"
    end
    return nil, core.error(kind, ("%s could not be cloned from %s: %s"):format(repo, url, tostring(err)), { cause = err })
  end
  if result.aborted then return nil, core.error("stopped", "stopped while cloning " .. repo) end
  if result.exit_code ~= 0 then
    local text = (result.text or ""):gsub("^exit %-?%d+: ?", "")
    return nil, core.error("git", ("git could not clone %s from %s (exit %s):\n%s\nCheck that the repository exists "
      .. "and that switchboard's GitHub credential can read it (docs/github.md)."):format(
      repo, url, tostring(result.exit_code), text))
  end
  local out = result.stdout or ""
  if out:match("fetched") then return "fetched" end
  return "cloned", out:match("on%-branch") and ctx.branch or nil
end

return M

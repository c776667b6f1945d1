-- The repository an ask names, made ready in the thread's workspace before the run's first
-- turn: cloned the first time, fetched by a follow-up (the workspace already has .git). It
-- runs as one command through the thread's executor, like any tool call, so it works the same
-- on every backend and obeys the run's clock and hard stop.
--
-- The credential: git gets GH_TOKEN from the command's environment (the executor puts the
-- agent's token there per command) through a credential helper given with `git -c` — which
-- is never written to .git/config — so the token is in no argv, no URL and no file.
--
--   repo.prepare(executor, snap, "acme/api", {signal, remaining_ms, branch?, defer_fetch?})
--     → "cloned" | "fetched" | "present" (then the thread's branch when a fresh clone — or a
--       copy of the repository's prepared base, "fetched" — checked out the thread's branch;
--       then, after a clone, the repository's setup: "ok" | "failed-<exit>" | nil, none). defer_fetch: a workspace that already has the repository is
--       not fetched ("present"): the caller fetches it with repo.fetch beside the model's first
--       request, so a warm thread's request waits for no network but the model's (issue 36)
--   repo.fetch(executor, snap, "acme/api", {signal, remaining_ms}) → "fetched" | nil, err
--                                                                    | nil, err
--     err: core.error, kind "infra" | "capacity" | "tool" | "git" | "aborted" | "not_visible"
--     (the GitHub App is not installed on the repository: the message says where to add it);
--     the executor's error, when there is one, is its cause. An executor that raises is a bug:
--     the raise reaches the run's one catch (dispatch/dispatcher.lua).
local core = require("switchboard.core")
local template = require("switchboard.policy.template")
local errors = require("switchboard.exec.errors")

local M = {}

local function quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

local HELPER = [[!f() { test "$1" = get || exit 0; echo username=x-access-token; echo "password=$GH_TOKEN"; }; f]]

-- The first lines of every git script run in the workspace: stop at the first failure, never
-- prompt, and (when the command has a token) take it from GH_TOKEN through HELPER, passed to
-- each git as "$@" (`git "$@" fetch`), not written into the repository's config.
M.SCRIPT_HEAD = table.concat({
  "set -e",
  "export GIT_TERMINAL_PROMPT=0",
  'if [ -n "${GH_TOKEN:-}" ]; then set -- -c credential.helper= -c ' .. quote("credential.helper=" .. HELPER) .. "; fi",
}, "\n")

-- The command that clones url into the current directory, or fetches when it is a checkout;
-- a fresh clone checks out the thread's branch when the remote has it.
-- A workspace copied from its repository's prepared base (sandboxd/bases.lua: the marker is in
-- it) is fetched and put on the thread's branch, or on the default branch's newest commit. A
-- fresh clone runs the repository's .switchboard/setup.sh (docs/agent.md "A repository's
-- setup"; without the token, within setup_s) and, when sandboxd asked (SWITCHBOARD_BASE), leaves
-- the marker from which the workspace becomes the base.
local function checkout_branch(branch)
  return "if git rev-parse -q --verify " .. quote("refs/remotes/origin/" .. branch)
    .. " >/dev/null; then git checkout -q -B " .. quote(branch) .. " "
    .. quote("origin/" .. branch) .. "; echo on-branch; onb=1; fi"
end

function M.script(url, branch, defer_fetch, setup_s)
  setup_s = math.max(1, math.floor(setup_s or 600))
  return table.concat({
    M.SCRIPT_HEAD,
    "if [ -f .git/switchboard-base ]; then",
    "  rm -f .git/switchboard-base",
    '  git "$@" fetch --quiet origin',
    "  echo fetched from-base",
    -- the base's commit may be behind the default branch: a new thread starts from its newest
    "  git reset -q --keep refs/remotes/origin/HEAD",
    branch and ("  " .. checkout_branch(branch)) or "  :",
    "elif [ -d .git ]; then",
    defer_fetch and "  echo present" or '  git "$@" fetch --quiet origin',
    defer_fetch and "  exit 0" or "  echo fetched",
    "else",
    '  git "$@" clone --quiet ' .. quote(url) .. " .",
    "  echo cloned",
    "  setup=none",
    "  if [ -f .switchboard/setup.sh ]; then",
    "    if env -u GH_TOKEN timeout -k 5 " .. setup_s .. " bash .switchboard/setup.sh > .git/switchboard-setup.log 2>&1 < /dev/null;"
      .. " then setup=ok; else setup=failed-$?; fi",
    '    echo "setup $setup"',
    "  fi",
    -- a workspace rebuilt after a sleep or recycle continues the thread's branch, so the
    -- follow-up's push is a fast-forward of what the thread already pushed
    branch and ("  " .. checkout_branch(branch)) or "  :",
    -- only the default branch, set up without failure, becomes the repository's base
    '  if [ -n "${SWITCHBOARD_BASE:-}" ] && [ -z "${onb:-}" ] && [ "${setup#failed}" = "$setup" ]; then',
    '    echo "$(git rev-parse HEAD) $(git symbolic-ref -q --short HEAD || echo HEAD)" > .git/switchboard-base',
    "  fi",
    "fi",
  }, "\n")
end

function M.url(snap, repo)
  return template.fill(snap.github.clone_url, { repo = repo })
end

function M.prepare(ex, snap, repo, ctx)
  local url = M.url(snap, repo)
  local setup_s = snap.isolation and snap.isolation.setup_timeout_ms and snap.isolation.setup_timeout_ms / 1000
  -- a setup that may take setup_timeout_ms gets the clone's time beside it (clamped by the
  -- run's remaining time and bash.max_ms, as every command's)
  local result, err = ex:exec(M.script(url, ctx.branch, ctx.defer_fetch, setup_s),
    { signal = ctx.signal, remaining_ms = ctx.remaining_ms, snap = snap, base = repo,
      timeout_ms = setup_s and (setup_s * 1000 + 5 * 60000) or nil,
      base_since = ctx.base_since })
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
  if result.aborted then return nil, core.error("aborted", "stopped while cloning " .. repo) end
  if result.exit_code ~= 0 then
    local text = (result.text or ""):gsub("^exit %-?%d+: ?", "")
    return nil, core.error("git", ("git could not clone %s from %s (exit %s):\n%s\nCheck that the repository exists "
      .. "and that switchboard's GitHub credential can read it (docs/github.md)."):format(
      repo, url, tostring(result.exit_code), text))
  end
  local out = result.stdout or ""
  local on_branch = out:match("on%-branch") and ctx.branch or nil
  if out:match("present") then return "present" end
  if out:match("fetched") then return "fetched", on_branch end
  local setup = out:match("setup (%S+)")
  return "cloned", on_branch, setup
end

-- The fetch of a workspace that has the repository (after prepare said "present").
function M.fetch(ex, snap, repo, ctx)
  local script = table.concat({
    M.SCRIPT_HEAD, 'git "$@" fetch --quiet origin', "echo fetched",
  }, "\n")
  local result, err = ex:exec(script, { signal = ctx.signal, remaining_ms = ctx.remaining_ms, snap = snap })
  if result == nil then return nil, core.error("infra", tostring(err), { cause = err }) end
  if result.aborted then return nil, core.error("aborted", "stopped while fetching " .. repo) end
  if result.exit_code ~= 0 then
    return nil, core.error("git", ("git could not fetch %s (exit %s): %s"):format(repo, tostring(result.exit_code),
      ((result.text or ""):gsub("^exit %-?%d+: ?", ""))))
  end
  return "fetched"
end

return M

-- Executor selection (docs/contract.md#provisioning): make_executor(opts, ctx) sees the resolved agent and the
-- inferred repository and returns {executor, note?, backend}. An agent that declares no
-- repository gets the null executor: nothing is provisioned, no credential is resolved. Only
-- repository agents get the backend policies/execution.lua chooses; a backend chosen but not
-- configured is refused with policy's text, never silently replaced by this host.
--
-- opts: policy (function → snapshot), workspace_root, getenv, credentials (optional object
--       with :resolve_envs(scope) → NAME = value | nil, err), backends (optional overrides:
--       name → constructor(config) for tests and later backends), force_backend (a
--       backend name that overrides policy: the CLI's --backend), e2b_state_dir (where the
--       e2b backend remembers each thread's sandbox id across processes)
-- ctx:  thread_key, agent (name), repo?, ref?, snap? (the snapshot the ask captured; without
--       it opts.policy() is read once here)
local policy = require("switchboard.policy")
local template = require("switchboard.policy.template")
local errors = require("switchboard.exec.errors")
local null_executor = require("switchboard.exec.null")

local M = {}

-- The credential is resolved when a command starts, never here: building an executor mints
-- nothing. The repository lets a GitHub App find the installation that covers it.
local function resolver(opts, agent, ctx)
  local creds, scope = opts.credentials, agent.token_scope
  if creds == nil or scope == nil then
    return function() return {} end
  end
  local rctx = { repo = ctx.repo }
  return function() return creds:resolve_envs(scope, rctx) end
end

local function missing(snap, agent_name, backend, setting)
  return nil, errors.tool(template.fill(snap.execution.missing, {
    agent = agent_name, backend = backend, setting = setting,
  }))
end

local BUILDERS = {}

function BUILDERS.local_(opts, ctx, snap, agent)
  local root = opts.workspace_root
  if not root then return missing(snap, ctx.agent, "local", "a workspace root") end
  return require("switchboard.exec.local").new{
    root = root, thread_key = ctx.thread_key, policy = opts.policy,
    resolve_envs = resolver(opts, agent, ctx), getenv = opts.getenv,
  }
end

function BUILDERS.sandbox(opts, ctx, snap, agent)
  local getenv = opts.getenv or os.getenv
  local cfg = snap.execution.sandbox
  local url = opts.sandbox_url or getenv(cfg.url_env)
  if not url or url == "" then return missing(snap, ctx.agent, "sandbox", cfg.url_env) end
  local token = getenv(cfg.token_env)
  if not token or token == "" then return missing(snap, ctx.agent, "sandbox", cfg.token_env) end
  return require("switchboard.exec.sandbox").new{
    url = require("switchboard.exec.rendezvous").pick(url, ctx.thread_key),
    token = token, thread_key = ctx.thread_key, policy = opts.policy,
    build = require("switchboard.core").build.commit,
    resolve_envs = resolver(opts, agent, ctx),
  }
end


-- E2B: the API key from the variable policy names; hosts from E2B's own variables (docs/e2b.md).
function BUILDERS.e2b(opts, ctx, snap, agent)
  local getenv = opts.getenv or os.getenv
  local cfg = snap.execution.e2b
  local key = getenv(cfg.api_key_env)
  if not key or key == "" then return missing(snap, ctx.agent, "e2b", cfg.api_key_env) end
  return require("switchboard.exec.e2b").new{
    api_key = key, key_env = cfg.api_key_env, thread_key = ctx.thread_key, agent = ctx.agent,
    policy = opts.policy, resolve_envs = resolver(opts, agent, ctx), getenv = getenv,
    template = cfg.template, workdir = cfg.workdir, state_dir = opts.e2b_state_dir,
  }
end

-- A resident needs onboarding this build cannot do: fall back per thread, loudly
-- (docs/contract.md#provisioning).
function BUILDERS.resident(opts, ctx, snap, agent)
  local ex, err = BUILDERS.sandbox(opts, ctx, snap, agent)
  if not ex then return nil, err end
  return ex, "sandbox", "resident unavailable (not provided by this build) — using fresh sandbox"
end

function M.make_executor(opts, ctx)
  local snap = ctx.snap or opts.policy()
  local agent = policy.agent(snap, ctx.agent)
  if agent == nil then
    return nil, errors.tool(("unknown agent %q; known agents: %s"):format(
      tostring(ctx.agent), table.concat(policy.agent_names(snap), ", ")))
  end
  if not (agent.resources and agent.resources.repository) then
    return { executor = null_executor.new{ agent = ctx.agent, policy = opts.policy }, backend = "local" }
  end
  local backend = opts.force_backend or policy.decide(snap, "execution.choose_backend", nil,
    { agent = ctx.agent, repo = ctx.repo })
  local build = (opts.backends and opts.backends[backend])
    or BUILDERS[backend == "local" and "local_" or backend]
  local executor, chosen, note = build(opts, ctx, snap, agent)
  if not executor then return nil, chosen end
  return { executor = executor, backend = type(chosen) == "string" and chosen or backend,
           note = note }
end

return M

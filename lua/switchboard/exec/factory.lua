-- Executor selection (docs/contract.md#provisioning): make_executor(opts, ctx) sees the resolved agent and the
-- inferred repository and returns {executor, note?, backend}. An agent that declares no
-- repository gets the null executor: nothing is provisioned, no credential is resolved. Only
-- repository agents get the backend policies/execution.lua chooses; a backend chosen but not
-- configured is refused with policy's text, never silently replaced by this host.
--
-- opts: policy (function → snapshot), workspace_root, getenv, credentials (optional object
--       with :resolve_envs(scope) → NAME = value | nil, err), backends (optional overrides:
--       name → fn(opts, ctx, snap, agent), for specs; a real backend is registered in
--       exec/backends.lua, whose declarations build the rest), force_backend (a
--       backend name that overrides policy: the CLI's --backend), resident_url (overrides
--       the resident's URL), resident_request (the probe's transport; specs count probes),
--       e2b_state_dir (where the e2b backend remembers each thread's sandbox id across processes),
--       kube_sa_dir (the service account's directory; /var/run/secrets/kubernetes.io/serviceaccount),
--       walls_host (optional fn(snap, root) → host | nil, why: builds the local executor's
--       walls when policies/isolation.lua local_walls is true for the front; shell/instance.lua
--       host by default), front (the front's name: a registered front or "exec"; nil is
--       local_walls.default — walled in the shipped policy), refuse_unwalled (true: never
--       build an unwalled local executor — a front serving others without its flag),
--       secrets (optional: store/secrets.lua's source, :envs(repo, snap) → NAME = value)
-- ctx:  thread_key, agent (name), repo?, ref?, snap? (the snapshot the ask captured; without
--       it opts.policy() is read once here)
local policy = require("switchboard.policy")
local schema = require("switchboard.policy.schema")
local template = require("switchboard.policy.template")
local errors = require("switchboard.exec.errors")
local null_executor = require("switchboard.exec.null")
local backends = require("switchboard.exec.backends")

local M = {}

-- The credential is resolved when a command starts, never here: building an executor mints
-- nothing. The repository lets a GitHub App find the installation that covers it.
local function credentials(opts, agent, ctx)
  local creds, scope = opts.credentials, agent.token_scope
  if creds == nil or scope == nil then
    return function() return {} end
  end
  local rctx = { repo = ctx.repo }
  return function() return creds:resolve_envs(scope, rctx) end
end

-- The thread's repository's own secrets (opts.secrets: store/secrets.lua's source, looked up
-- per command with the ask's snapshot) join the credentials; only that repository's, and
-- none for a thread on no repository (docs/secrets.md).
local function resolver(opts, agent, ctx)
  local creds = credentials(opts, agent, ctx)
  local source, repo = opts.secrets, ctx.repo
  if source == nil or repo == nil then return creds end
  local snap = ctx.snap
  return function()
    local envs, err = source:envs(repo, snap or opts.policy())
    if not envs then return nil, err end
    local own, cerr = creds()
    if not own then return nil, cerr end
    for name, value in pairs(own) do envs[name] = value end
    return envs
  end
end

local function missing(snap, agent_name, backend, setting)
  return nil, errors.tool(template.fill(snap.execution.missing, {
    agent = agent_name, backend = backend, setting = setting,
  }))
end

-- The network an agent's instances get: its own (policies/agents.lua network), else
-- policies/isolation.lua network (docs/isolation.md).
function M.network_of(snap, agent)
  return agent.network or (snap.isolation and snap.isolation.network) or "host"
end

-- Whether the local executor walls this front's threads (policies/isolation.lua local_walls).
function M.walled_locally(snap, front)
  return schema.local_walls_for(snap.isolation, front)
end

-- The facts choose_backend is given about this process: which backends are configured
-- (their variables set, or forced by a flag), each backend's own answer. Policy still decides.
function M.configured(snap, opts)
  local getenv = opts.getenv or os.getenv
  local out = {}
  for _, name in ipairs(backends.names()) do
    out[name] = backends.get(name).configured(snap, getenv, opts) == true
  end
  return out
end

-- The backend policy chooses for an agent here (ctx: agent, repo?), forced by opts.force_backend.
function M.backend_for(opts, snap, ctx)
  return opts.force_backend or policy.decide(snap, "execution.choose_backend", nil,
    { agent = ctx.agent, repo = ctx.repo, front = opts.front, configured = M.configured(snap, opts) })
end

-- An agent that asks for network "none" on a backend that cannot take it away: refused, with
-- why (`but`) and what to do (`instead`).
local function no_offline(ctx, but, instead)
  return nil, errors.tool(("agent %s asks for network \"none\", but %s; %s"):format(tostring(ctx.agent), but, instead))
end

-- What a backend's build is handed besides the options and the ask (exec/backends.lua).
local function build_named(name, opts, ctx, snap, agent)
  local decl = backends.get(name)
  local kit = {
    network = M.network_of(snap, agent),
    resolve_envs = resolver(opts, agent, ctx),
    walled = M.walled_locally(snap, opts.front),
    missing = function(setting) return missing(snap, ctx.agent, name, setting) end,
    no_offline = function(but, instead) return no_offline(ctx, but, instead) end,
    fallback = function(other) return build_named(other, opts, ctx, snap, agent) end,
  }
  return decl.build(opts, ctx, snap, agent, kit)
end

function M.forget_probes() require("switchboard.exec.resident").forget_probes() end

-- The repository agents whose commands would run on this host for opts.front: the backend
-- policy chooses for them (with no repository named) runs here (its on_this_host: the local
-- executor, or the resident falling back to it). A list of {agent, backend, setting}.
local function agents_on_this_host(opts, snap)
  local out = {}
  for _, name in ipairs(policy.agent_names(snap)) do
    local agent = policy.agent(snap, name)
    if agent.resources and agent.resources.repository then
      local backend = M.backend_for(opts, snap, { agent = name })
      local decl = backends.get(backend)
      if decl and decl.on_this_host and decl.on_this_host(snap) then
        out[#out + 1] = { agent = name, backend = backend,
          setting = "policies/isolation.lua local_walls." .. tostring(opts.front or "default") }
      end
    end
  end
  return out
end

-- The repository agents whose commands this front would run unwalled on this host (empty when
-- every command is walled or remote). `switchboard slack` refuses to start on a non-empty one;
-- `switchboard doctor` reports it as a FAIL.
function M.unwalled_agents(opts, snap)
  if M.walled_locally(snap, opts.front) then return {} end
  return agents_on_this_host(opts, snap)
end

-- The same agents when the front walls the local executor: their commands run behind walls
-- built on this host (`switchboard slack` refuses to start where it cannot build them).
function M.walled_local_agents(opts, snap)
  if not M.walled_locally(snap, opts.front) then return {} end
  return agents_on_this_host(opts, snap)
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
  local backend = M.backend_for(opts, snap, ctx)
  local override = opts.backends and opts.backends[backend]
  local executor, chosen, note
  if override then
    executor, chosen, note = override(opts, ctx, snap, agent)
  else
    executor, chosen, note = build_named(backend, opts, ctx, snap, agent)
  end
  if not executor then return nil, chosen end
  return { executor = executor, backend = type(chosen) == "string" and chosen or backend,
           note = note }
end

return M

-- Executor selection (docs/contract.md#provisioning): make_executor(opts, ctx) sees the resolved agent and the
-- inferred repository and returns {executor, note?, backend}. An agent that declares no
-- repository gets the null executor: nothing is provisioned, no credential is resolved. Only
-- repository agents get the backend policies/execution.lua chooses; a backend chosen but not
-- configured is refused with policy's text, never silently replaced by this host.
--
-- opts: policy (function → snapshot), workspace_root, getenv, credentials (optional object
--       with :resolve_envs(scope) → NAME = value | nil, err), backends (optional overrides:
--       name → constructor(config) for tests and later backends), force_backend (a
--       backend name that overrides policy: the CLI's --backend), resident_url (overrides
--       the resident's URL), resident_request (the probe's transport; specs count probes),
--       e2b_state_dir (where the e2b backend remembers each thread's sandbox id across processes),
--       kube_sa_dir (the service account's directory; /var/run/secrets/kubernetes.io/serviceaccount),
--       walls_host (optional fn(snap, root) → host | nil, why: builds the local executor's
--       walls when policies/isolation.lua local_walls is true for the front; shell/instance.lua
--       host by default), front (the front's name: "console", "exec", "slack"; nil is
--       local_walls.default — walled in the shipped policy), refuse_unwalled (true: never
--       build an unwalled local executor — a front serving others without its flag)
-- ctx:  thread_key, agent (name), repo?, ref?, snap? (the snapshot the ask captured; without
--       it opts.policy() is read once here)
local policy = require("switchboard.policy")
local schema = require("switchboard.policy.schema")
local template = require("switchboard.policy.template")
local errors = require("switchboard.exec.errors")
local null_executor = require("switchboard.exec.null")
local core = require("switchboard.core")

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

-- The network an agent's instances get: its own (policies/agents.lua network), else
-- policies/isolation.lua network (docs/isolation.md).
function M.network_of(snap, agent)
  return agent.network or (snap.isolation and snap.isolation.network) or "host"
end

local BUILDERS = {}

-- The local executor's walls (policies/isolation.lua local_walls = true): one host per
-- workspace root for this process, built (and proven with a real instance) on first use.
-- A host that cannot wall is never replaced by running unwalled: provisioning fails, saying why.
local local_hosts = {} -- workspace root → shell/instance.lua host
-- workspace root → core.signal() while one task builds its host. Building one yields (the
-- proof runs a real instance), and threads provisioned at once (three messages in a row) must
-- not each build another: hosts of one process share its cgroup directory and slot numbers, so
-- a second host's instance i0 reaps the first's (SIGKILL to its holder).
local building = {}
-- a wake-up bound only (the loop waits again); the proof's own bounds are timeouts.walls'
local BUILD_WAIT_MS = 120000

local function build_local_walls(opts, snap, root)
  local ok, err = core.fs.mkdir_p(root, tonumber("700", 8))
  if not ok then return nil, core.error("workspace", "cannot create " .. root .. ": " .. tostring(err and err.message), { cause = err }) end
  local host, why
  if opts.walls_host then
    host, why = opts.walls_host(snap, root)
  else
    host, why = require("switchboard.shell.instance").host{
      snap = snap, policy = opts.policy, scratch = root, log = core.log,
      owner = { kind = "local executor", root = root } }
  end
  if not host then return nil, why end
  return host
end

local function local_walls(opts, snap, root)
  while building[root] and not local_hosts[root] do core.sleep(BUILD_WAIT_MS, building[root]) end
  if local_hosts[root] then return local_hosts[root] end
  local done = core.signal()
  building[root] = done
  local host, why = build_local_walls(opts, snap, root)
  building[root] = nil
  done:abort("built")
  if host then local_hosts[root] = host end
  return host, why
end

-- Whether the local executor walls this front's threads (policies/isolation.lua local_walls).
function M.walled_locally(snap, front)
  return schema.local_walls_for(snap.isolation, front)
end

-- The facts choose_backend is given about this process: which backends are configured
-- (their variables set, or forced by a flag). Policy still decides.
function M.configured(snap, opts)
  local getenv = opts.getenv or os.getenv
  local function set(name) local v = name and getenv(name) return v ~= nil and v ~= "" end
  local e = snap.execution
  return {
    ["local"] = true,
    sandbox = (opts.sandbox_url ~= nil or set(e.sandbox.url_env)) and set(e.sandbox.token_env),
    resident = require("switchboard.exec.resident_client").configured(snap, getenv, opts.resident_url) ~= nil,
    e2b = set(e.e2b.api_key_env),
    kubernetes = set(e.kubernetes.token_env) and (set("KUBERNETES_SERVICE_HOST") or set(e.kubernetes.kubeconfig_env)),
  }
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

function BUILDERS.local_(opts, ctx, snap, agent)
  local root = opts.workspace_root
  if not root then return missing(snap, ctx.agent, "local", "a workspace root") end
  local network, walls = M.network_of(snap, agent), nil
  if M.walled_locally(snap, opts.front) then
    local why
    walls, why = local_walls(opts, snap, root)
    if not walls then
      return nil, errors.tool("policies/isolation.lua asks for walls around local threads "
        .. "(local_walls = true), but they cannot be built here: " .. tostring(why)
        .. ". Run where the kernel gives user namespaces, cgroups and bubblewrap, as root "
        .. "(docs/isolation.md), or point this front at a sandboxd (SANDBOX_URL, SANDBOX_TOKEN)")
    end
  elseif opts.refuse_unwalled then
    -- a front that serves other people, started without --allow-unwalled-commands: a reload
    -- that turned its walls off does not run anyone's command next to the bot's secrets
    return nil, errors.tool(("the local executor would run agent %s's commands unwalled, next to "
      .. "this bot's secrets (policies/isolation.lua local_walls.%s is false); set it to true, point "
      .. "the bot at a sandboxd (SANDBOX_URL, SANDBOX_TOKEN), or restart it with "
      .. "--allow-unwalled-commands"):format(tostring(ctx.agent), tostring(opts.front or "default")))
  elseif network == "none" then
    return no_offline(ctx, "the local executor runs unwalled (policies/isolation.lua local_walls = false) "
      .. "and cannot take its commands off the network", "set local_walls = true, or use the sandbox backend")
  end
  return require("switchboard.exec.local").new{
    root = root, thread_key = ctx.thread_key, policy = opts.policy,
    resolve_envs = resolver(opts, agent, ctx), getenv = opts.getenv,
    walls = walls, network = network,
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
    network = M.network_of(snap, agent),
  }
end


-- E2B: the API key from the variable policy names; hosts from E2B's own variables (docs/e2b.md).
function BUILDERS.e2b(opts, ctx, snap, agent)
  if M.network_of(snap, agent) == "none" then
    return no_offline(ctx, "an e2b sandbox keeps its network", "use the sandbox backend for it (policies/execution.lua)")
  end
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

-- Kubernetes with agent-sandbox (docs/deploy.md): the API server from the pod's service
-- account or a kubeconfig; sandboxd's bearer from the variable policy names.
function BUILDERS.kubernetes(opts, ctx, snap, agent)
  if M.network_of(snap, agent) == "none" then
    return no_offline(ctx, "a kubernetes pod's network is its NetworkPolicy's",
      "use the sandbox backend for it (policies/execution.lua)")
  end
  local getenv = opts.getenv or os.getenv
  local cfg = snap.execution.kubernetes
  local token = getenv(cfg.token_env)
  if not token or token == "" then return missing(snap, ctx.agent, "kubernetes", cfg.token_env) end
  local kapi = require("switchboard.exec.kubernetes_api")
  local conn, why = kapi.config{ getenv = getenv, kubeconfig_env = cfg.kubeconfig_env, sa_dir = opts.kube_sa_dir }
  if not conn then
    return missing(snap, ctx.agent, "kubernetes", "a Kubernetes API server (" .. why.message .. ")")
  end
  local api = kapi.new(conn, { timeouts = function() return opts.policy().timeouts.kubernetes end })
  return require("switchboard.exec.kubernetes").new{
    api = api, namespace = cfg.namespace or conn.namespace, warm_pool = cfg.warm_pool, port = cfg.port,
    token = token, thread_key = ctx.thread_key, agent = ctx.agent, policy = opts.policy,
    resolve_envs = resolver(opts, agent, ctx), network = M.network_of(snap, agent),
    build = core.build.commit,
    workspace = cfg.workspace_size and { size = cfg.workspace_size, storage_class = cfg.storage_class } or nil,
  }
end

-- The resident (docs/resident.md): chosen only for a repository agent whose repository is warm
-- there. The factory probes /status with timeouts.resident.probe_timeout_ms; a transport
-- failure is remembered for timeouts.resident.negative_cache_ms (no probe, straight to the
-- fallback); anything but warm falls back to the per-thread backend (execution.resident.fallback,
-- sandbox) with a note on the card that says why (docs/contract.md#provisioning).
local unreachable_until = {} -- resident URL → now_ms until which it is not probed again

function M.forget_probes() unreachable_until = {} end

local function resident_note(status, doc, repo)
  if status == 404 then
    return ("resident: %s is not onboarded — onboard it once with `repo onboard %s` (or "
      .. "`switchboard resident onboard %s`)"):format(repo, repo, repo)
  end
  if status == 200 then
    return ("resident %s%s"):format(tostring(doc.state), doc.reason and (" (" .. tostring(doc.reason) .. ")") or "")
  end
  return ("resident answered /status with HTTP %d"):format(status)
end

function BUILDERS.resident(opts, ctx, snap, agent)
  local cfg = snap.execution.resident
  local resident = require("switchboard.exec.resident")
  local url, token = resident.configured(snap, opts.getenv or os.getenv, opts.resident_url)
  if not url then return missing(snap, ctx.agent, "resident", token) end
  local why
  if M.network_of(snap, agent) == "none" then
    -- the resident's worktrees get their walls at /attach, with its own policy's network
    why = "resident does not give network \"none\", which agent " .. tostring(ctx.agent) .. " declares"
  elseif not ctx.repo then
    why = "resident needs the thread's repository (none was resolved)"
  elseif (unreachable_until[url] or 0) > core.now_ms() then
    why = "resident unreachable (a probe failed in the last " .. snap.timeouts.resident.negative_cache_ms // 1000 .. " s)"
  else
    local status, doc = resident.probe{ url = url, token = token, repo = ctx.repo,
      timeout_ms = snap.timeouts.resident.probe_timeout_ms, request = opts.resident_request }
    if status == 200 and doc.state == "warm" then
      return resident.new{ url = url, token = token, thread_key = ctx.thread_key, repo = ctx.repo, ref = ctx.ref,
        policy = opts.policy, resolve_envs = resolver(opts, agent, ctx) }
    elseif status == nil then
      unreachable_until[url] = core.now_ms() + snap.timeouts.resident.negative_cache_ms
      why = "resident unreachable (" .. tostring(doc and doc.message or "transport failure"):match("^[^\n]*") .. ")"
    else
      why = resident_note(status, doc, ctx.repo)
    end
  end
  local fallback = cfg.fallback or "sandbox"
  local ex, err = BUILDERS[fallback == "local" and "local_" or fallback](opts, ctx, snap, agent)
  if not ex then
    -- why the resident was not used comes first: alone, the fallback's "SANDBOX_URL is not
    -- set" read as if the resident had never been asked
    if errors.is_error(err) and err.kind == "tool" then
      return nil, errors.tool(("%s, so this falls back to a fresh %s: %s"):format(why,
        fallback == "local" and "local workspace" or "sandbox", err.message))
    end
    return nil, err
  end
  return ex, fallback, ("%s — using fresh %s"):format(why, fallback == "local" and "local workspace" or "sandbox")
end

-- The repository agents whose commands this front would run unwalled on this host: the
-- backend policy chooses (with no repository named) is the local executor, or the resident
-- falling back to it, and policies/isolation.lua local_walls is false for opts.front. A list
-- of {agent, backend, setting} (empty when every command is walled or remote). `switchboard
-- slack` refuses to start on a non-empty one; `switchboard doctor` reports it as a FAIL.
function M.unwalled_agents(opts, snap)
  local out = {}
  if M.walled_locally(snap, opts.front) then return out end
  for _, name in ipairs(policy.agent_names(snap)) do
    local agent = policy.agent(snap, name)
    if agent.resources and agent.resources.repository then
      local backend = M.backend_for(opts, snap, { agent = name })
      if backend == "local" or (backend == "resident" and snap.execution.resident.fallback == "local") then
        out[#out + 1] = { agent = name, backend = backend,
          setting = "policies/isolation.lua local_walls." .. tostring(opts.front or "default") }
      end
    end
  end
  return out
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
  local build = (opts.backends and opts.backends[backend])
    or BUILDERS[backend == "local" and "local_" or backend]
  local executor, chosen, note = build(opts, ctx, snap, agent)
  if not executor then return nil, chosen end
  return { executor = executor, backend = type(chosen) == "string" and chosen or backend,
           note = note }
end

return M

-- `switchboard sandboxd`: the per-thread sandbox server (docs/sandboxd.md).
local core = require("switchboard.core")
local prologue = require("switchboard.launch.prologue")
local server = require("switchboard.sandboxd.server")
local runner = require("switchboard.sandboxd.runner")
local disk_budget = require("switchboard.sandboxd.disk_budget")
local keep = require("switchboard.sandboxd.keep")
local metrics = require("switchboard.metrics")
local walls_mod = require("switchboard.launch.walls")
local policy = require("switchboard.policy")
local schema = require("switchboard.policy.schema")

local M = {
  name = "sandboxd",
  summary = "serve per-thread sandboxes to the sandbox executor over HTTP",
}

M.EXIT = {
  usage = prologue.EXIT.usage,   -- bad arguments
  listen = 71,    -- the address cannot be listened on (EX_OSERR)
  config = prologue.EXIT.config, -- no token, the policies do not load, the root is unusable
}

M.help = [[
Usage: switchboard sandboxd --listen HOST:PORT --root DIR [--max-instances N] [--no-walls]
       switchboard sandboxd --pod --listen HOST:PORT --root DIR
       switchboard sandboxd --root DIR --list-workspaces | --remove-workspace NAME

Runs each conversation thread's commands in a workspace of its own under DIR, for the
`sandbox` executor (`switchboard exec --backend sandbox`, or a bot whose policy chooses it).
Every route needs `authorization: Bearer $SANDBOX_TOKEN`; the server refuses to start without
the variable. A thread's instance sleeps after timeouts sandbox.sleep_after of idle (5 min):
its processes are killed and its workspace is kept (on shutdown too); the thread's next request
remounts it in a fresh instance. Slept workspaces live under policies/isolation.lua
slept_max_bytes and slept_max_age_ms (oldest first).

Options:
  --listen HOST:PORT   where to listen, e.g. 127.0.0.1:8080 or [::1]:8080 (port 0: any free port;
                       the log line sandboxd.listening names it)
  --root DIR           where the workspaces live (created when missing; use a directory of its
                       own: the workspaces an earlier run kept are checked at start and kept)
  --list-workspaces    print the slept workspaces under --root (name, bytes on the host's disk,
                       when each slept) and exit; nothing is served
  --remove-workspace NAME
                       remove one slept workspace (a name --list-workspaces prints; refused while
                       its instance is awake); its thread's next request is told and re-clones
  --max-instances N    awake instances at once (default: timeouts sandbox.max_instances, 25); one
                       more thread gets the fleet-busy answer and nothing runs
  --metrics-listen HOST:PORT
                       also serve GET /metrics there without the bearer (Prometheus text format;
                       on --listen it needs the bearer like every route)
  --no-walls           DEVELOPMENT ONLY: run commands without the walls (namespaces, cgroups,
                       a uid of their own; docs/isolation.md) when this kernel cannot give
                       them. Without the flag sandboxd refuses to start there, saying why.
  --pod                pod mode, for a pod that is itself the wall (a Kubernetes agent-sandbox
                       pod under gVisor or Kata, one per thread: docs/deploy.md): one thread
                       only, commands without sandboxd's own walls, no idle sleep (releasing the
                       pod is the thread's sleep). /healthz answers "mode": "pod". Not with
                       --no-walls or --max-instances.

Signals:
  HUP        reload the policies (requests in flight keep the ones they started with)
  TERM, INT  stop accepting, let requests in flight finish (timeouts server.drain_ms), then kill
             what is left, put every instance to sleep and exit 0; a second signal skips the wait

Exit status: 0 after a signal; 2 bad arguments; 71 cannot listen; 78 no SANDBOX_TOKEN, the
policies do not load, the root is unusable, or the walls cannot be built.

Examples:
  SANDBOX_TOKEN=$(openssl rand -hex 32) switchboard sandboxd --listen 127.0.0.1:8080 --root /var/lib/sandboxd
  switchboard --policies ./my-policies sandboxd --listen 0.0.0.0:8080 --root /srv/sb --max-instances 50
  curl -H "authorization: Bearer $SANDBOX_TOKEN" http://127.0.0.1:8080/healthz
]]

local SPEC = { listen = "string", root = "string", ["max-instances"] = "number", ["no-walls"] = "flag",
  ["metrics-listen"] = "string", pod = "flag", ["list-workspaces"] = "flag", ["remove-workspace"] = "string" }

-- "HOST:PORT" or "[V6]:PORT" → host, port | nil, err (kind usage)
function M.parse_listen(text)
  local host, port = text:match("^%[([^%]]+)%]:(%d+)$")
  if not host then host, port = text:match("^([^:%[%]]+):(%d+)$") end
  port = tonumber(port)
  if not host or not port or port > 65535 then
    return nil, core.error("usage", ("--listen needs HOST:PORT (like 127.0.0.1:8080 or [::1]:8080), got %q"):format(text))
  end
  return host, math.tointeger(port)
end

local function usage_problem(p)
  local opts = p.opts
  if #p.words > 0 then return ("unexpected %q (see --help)"):format(p.words[1]) end
  if opts.list_workspaces or opts.remove_workspace then -- the operator's: no server
    if not opts.root or opts.root == "" then return "--root DIR is required (see --help)" end
    return nil
  end
  if not opts.listen then return "--listen HOST:PORT is required (see --help)" end
  if not opts.root or opts.root == "" then return "--root DIR is required (see --help)" end
  local host, why = M.parse_listen(opts.listen)
  if not host then return why.message end
  if opts.pod and opts.no_walls then
    return "--pod and --no-walls do not go together: in pod mode the pod is the wall (see --help)"
  end
  if opts.pod and opts.max_instances then
    return "--pod serves one thread: --max-instances does not apply (see --help)"
  end
  if opts.metrics_listen and not M.parse_listen(opts.metrics_listen) then
    return (select(2, M.parse_listen(opts.metrics_listen)).message:gsub("^%-%-listen", "--metrics-listen"))
  end
  local max = opts.max_instances
  if max ~= nil and (math.type(max) ~= "integer" and max ~= math.floor(max) or max < 1) then
    return "--max-instances needs a whole number of at least 1"
  end
end

function M.serve_metrics(host, port)
  return metrics.serve(host, port)
end

-- The operator's view of the slept workspaces (docs/sandboxd.md "Slept workspaces").
function M.workspaces(p, opts, snap)
  local root = core.fs.realpath(opts.root)
  if not root then return p:fail(M.EXIT.config, "--root: no such directory: " .. opts.root) end
  local deadline = snap.timeouts.file_op.budget_ms
  if opts.remove_workspace then
    local name = opts.remove_workspace
    if not keep.is_workspace(name) or name:find("/", 1, true) or not core.fs.exists(root .. "/" .. name) then
      return p:fail(M.EXIT.usage, ("no workspace %q under --root (see --list-workspaces)"):format(name))
    end
    if keep.in_use(root .. "/" .. name, deadline) then
      return p:fail(M.EXIT.config, ("workspace %s is awake (its instance has it mounted): it can be removed once it sleeps"):format(name))
    end
    keep.evict(root, name, "workspace expired (removed by an operator: switchboard sandboxd --remove-workspace)", deadline)
    io.stdout:write(("removed %s\n"):format(name))
    return 0
  end
  local now = os.time()
  for _, w in ipairs(keep.list(root, nil, deadline)) do
    io.stdout:write(("%s\t%d bytes\tslept %s ago%s\n"):format(w.name, w.bytes,
      keep.age_text(math.max(0, now - w.slept_s) * 1000), keep.in_use(w.dir, deadline) and "\t(awake)" or ""))
  end
  return 0
end

function M.run(argv, ctx)
  local p, status = prologue.start(M, argv, ctx, { spec = SPEC, usage = usage_problem, policies = true })
  if not p then return status end
  local opts, snap = p.opts, p.snap
  if opts.list_workspaces or opts.remove_workspace then return M.workspaces(p, opts, snap) end
  local host, port = M.parse_listen(opts.listen)
  local max = opts.max_instances and math.tointeger(opts.max_instances)
  local function fail(code, message) return p:fail(code, message) end

  local token_env = snap.execution.sandbox.token_env
  -- Read once and removed from the environment; the process is not dumpable (docs/isolation.md).
  local token = ctx.getenv and ctx.getenv(token_env) or core.secrets.take_env(token_env)
  core.secrets.not_dumpable()
  if token == nil or token == "" then
    return fail(M.EXIT.config, ("%s is not set: every route needs `authorization: Bearer <token>`, "
      .. "so sandboxd does not start without one. Set it to a long random secret (for example "
      .. "`export %s=$(openssl rand -hex 32)`) and give the bot the same value."):format(token_env, token_env))
  end
  core.log_redact(token)

  local ok, err = walls_mod.make_root(opts.root)
  if not ok then return fail(M.EXIT.config, "--root: " .. tostring(err.message)) end
  local root = core.fs.realpath(opts.root) or opts.root
  -- the workspaces an earlier run kept (slept threads) are kept, each checked (sandboxd/keep.lua)
  local kept = runner.recover(root, core.log)
  if kept.kept + kept.repaired + kept.discarded > 0 then core.log("info", "sandboxd.workspaces_kept", kept) end

  if not opts.pod and not opts.no_walls then -- the fleet's workspace images against the disk
    disk_budget.check{ root = root, max_instances = max or snap.timeouts.sandbox.max_instances,
      spares = snap.isolation.spare_instances, isolation = snap.isolation, slept = kept.kept + kept.repaired,
      deadline_ms = snap.timeouts.walls.helper_ms, log = core.log }
  end
  local walls, status = nil, nil
  if opts.pod then
    -- the pod is the wall (gVisor or Kata, one thread): no bubblewrap, no cgroups of our own
    core.log("info", "sandboxd.pod_mode", { note = "one thread per pod; the pod is the wall" })
  else
    walls, status = walls_mod.build(p, opts, snap, root, "sandboxd", "sandbox instances", M.EXIT.config)
    if walls == false then return status end
  end
  -- the policy's max_instances was checked when it loaded; an override is checked here
  local files = walls and max and schema.fleet_files_problem(snap.isolation, max)
  if files then
    if walls then walls:close() end
    return fail(M.EXIT.config, ("--max-instances %d: %s (policies/isolation.lua)"):format(max, files))
  end

  local srv, serr = server.start{ host = host, port = port, root = root, token = token,
    max_instances = max, walls = walls, pod = opts.pod }
  if not srv then
    if walls then walls:close() end -- its bridge and nftables table too (shell/bridge.lua)
    return fail(M.EXIT.listen, ("cannot listen on %s: %s"):format(opts.listen, tostring(serr and serr.message or serr)))
  end
  local mport
  if opts.metrics_listen then
    local mhost, mp = M.parse_listen(opts.metrics_listen)
    local msrv, merr = M.serve_metrics(mhost, mp)
    if not msrv then
      srv:shutdown("metrics")
      if walls then walls:close() end
      return fail(M.EXIT.listen, ("cannot listen on %s: %s"):format(opts.metrics_listen, tostring(merr and merr.message or merr)))
    end
    mport = msrv.port
  end
  -- its info lines (one per request) written together (policies/timeouts.lua sandbox.log_batch_ms)
  core.log_batch(snap.timeouts.sandbox.log_batch_ms)
  -- a reload that changes the workspaces' size leaves the old size's template unused
  p.on_reloaded = function(new)
    core.log_batch(new.timeouts.sandbox.log_batch_ms)
    runner.sweep_templates(root, new, core.log)
    if srv.lane then srv.lane:reprogram() end -- the exec lane: armed again under the new snapshot
  end
  return p:serve(srv, walls, "sandboxd.listening", {
    host = host, port = srv.port, root = root,
    max_instances = opts.pod and 1 or max or snap.timeouts.sandbox.max_instances, version = snap.version,
    mode = opts.pod and "pod" or (walls and "walls" or "unwalled"),
    metrics_port = mport,
  })
end

return M

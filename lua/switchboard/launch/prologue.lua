-- The prologue every subcommand shares, so that each says the same things the same way:
-- parse its options (--help answered, a usage error named), load the policies or stop with
-- the configuration status, check --backend, reload the policies on SIGHUP, and say the
-- credential notice once.
--
--   local p, status = prologue.start(M, argv, ctx, {spec = SPEC, policies = true, backend = true})
--   if not p then return status end          -- --help answered, or a usage/config failure said
--   p.opts, p.words, p.rest                  -- args.parse's results
--   p.snap                                   -- the policies as loaded (policies = true)
--   p:fail(status, message)                  -- "switchboard NAME: message" on stderr → status
--   p:say(line)                              -- a line on stdout
--   p:reload_on_hup(report)                  -- report(new_snap | nil, errors, changes, old_version)
--                                               after each HUP (changes: policy/flat.lua's)
--                                               the service manager hears RELOADING=1, READY=1
--   p:stack_options(sink)                    -- exec/stack.lua's options from the command line
--   p:serve(srv, walls, event, fields)       -- a listening server's signals, READY, its drain
--   p:ready(status), p:stopping()            -- READY=1 / STOPPING=1 to the service manager
--                                               ($NOTIFY_SOCKET; launch/notify.lua)
--   p:notice(agent_def, say)                 -- the no-credential line, once, through say(line)
--   p:trace_sink()                           -- --trace FILE's span sink (nil without --trace), or
--                                               nil, status after saying why it cannot be opened
--
-- M is the command module (name, help). ctx is the CLI's: policies_dir, credentials; specs may
-- add out / err (line writers) to catch what the command says.
local core = require("switchboard.core")
local args = require("switchboard.args")
local policy = require("switchboard.policy")
local identity = require("switchboard.github.identity")
local tracing = require("switchboard.exec.tracing")
local metrics = require("switchboard.metrics")
local notify = require("switchboard.launch.notify")
local state = require("switchboard.state")

local M = {}

-- Statuses every command means the same by (sysexits.h where one fits).
M.EXIT = {
  usage = 2,   -- bad arguments
  config = 78, -- the policies do not load, a backend is not configured (EX_CONFIG)
}

M.BACKENDS = { ["local"] = true, sandbox = true, resident = true, e2b = true, kubernetes = true }

local P = {}
P.__index = P

-- Line writers: ctx.out / ctx.err when the caller gives them (specs), else stdout / stderr.
local function writer(stream)
  return function(line) stream:write(line, "\n") end
end

local function err_of(ctx) return ctx and ctx.err or writer(io.stderr) end
local function out_of(ctx) return ctx and ctx.out or writer(io.stdout) end

-- With --log-format json (ctx.log_json) a fatal start-up error is a log document too.
function M.fail(name, status, message, ctx)
  if ctx and ctx.log_json and not ctx.err then
    core.log("error", name .. ".fatal", { message = tostring(message), status = status })
    return status
  end
  err_of(ctx)("switchboard " .. name .. ": " .. tostring(message))
  return status
end

-- A note for the person at the terminal ("note: …" on stderr), or a warn document in JSON.
function M.note(ctx, line)
  if ctx and ctx.log_json and not ctx.err then
    core.log("warn", "note", { message = line })
  else
    (ctx and ctx.err or writer(io.stderr))("note: " .. line)
  end
end

function P:note(line) return M.note(self.ctx, line) end

function P:fail(status, message)
  return M.fail(self.name, status, message, self.ctx)
end

function P:say(line) self.out(line) end

-- The policy set the command starts with, or nil, status after saying why.
function M.load_policies(name, ctx)
  local snap, errs = policy.load_initial(ctx.policies_dir)
  if snap then return snap end
  return nil, M.fail(name, M.EXIT.config, "the policies do not load:\n  " .. table.concat(errs, "\n  "), ctx)
end

function M.check_backend(name, backend, ctx)
  if backend == nil or M.BACKENDS[backend] then return true end
  return nil, M.fail(name, M.EXIT.usage, ("--backend must be local, sandbox, resident, e2b or kubernetes, got %q"):format(backend), ctx)
end

-- --backend sandbox needs a sandboxd to talk to: every command says so the same way, at
-- start, with the configuration status. Returns true or nil, the words.
function M.sandbox_problem(snap, url, getenv)
  local cfg = snap.execution.sandbox
  url = url or getenv(cfg.url_env)
  if url == nil or url == "" then
    return ("--backend sandbox needs --sandbox-url URL (or $%s): the address of a running "
      .. "`switchboard sandboxd`"):format(cfg.url_env)
  end
  local token = getenv(cfg.token_env)
  if token == nil or token == "" then
    return ("--backend sandbox needs $%s, the bearer token the sandboxd was started with")
      :format(cfg.token_env)
  end
end

-- what: {spec, backend (boolean: validate opts.backend), usage (optional fn(p) → the usage
-- problem's text or nil: the command's own argument checks, run before anything loads),
-- policies (boolean: load them)}
function M.start(cmd, argv, ctx, what)
  what = what or {}
  ctx = ctx or {}
  local opts, words, rest = args.parse(argv or {}, what.spec or {})
  if not opts then return nil, M.fail(cmd.name, M.EXIT.usage, words, ctx) end
  if opts.help then
    out_of(ctx)((cmd.help:gsub("\n$", "")))
    return nil, 0
  end
  local self = setmetatable({
    name = cmd.name, ctx = ctx, opts = opts, words = words, rest = rest, out = out_of(ctx),
  }, P)
  if what.backend then
    local ok, status = M.check_backend(cmd.name, opts.backend, ctx)
    if not ok then return nil, status end
  end
  local problem = what.usage and what.usage(self)
  if problem then return nil, self:fail(M.EXIT.usage, problem) end
  if what.policies then
    local snap, status = M.load_policies(cmd.name, self.ctx)
    if not snap then return nil, status end
    self.snap = snap
    if what.backend and opts.backend == "sandbox" then
      local why = M.sandbox_problem(snap, opts.sandbox_url, ctx.getenv or os.getenv)
      if why then return nil, self:fail(M.EXIT.config, why) end
    end
  end
  return self
end

-- SIGHUP reloads the policies (the whole set validated on the side; on failure nothing
-- changes). report(new_snap, nil) or report(nil, errors) says how it went; by default a log line.
function P:reload_on_hup(report)
  local name = self.name
  report = report or function(new, errs, changes, old_version)
    core.log(new and "info" or "warn", name .. ".reload", {
      ok = new ~= nil, errors = errs and #errs or 0, version = policy.current().version,
      old_version = old_version, changed = changes and #changes or 0,
    })
  end
  core.on_signal("HUP", function()
    notify.reloading()
    local old_version = policy.current().version
    local new, errs, changes = policy.reload()
    metrics.inc("switchboard_policy_reloads_total", { result = new and "ok" or "failed" })
    report(new, errs, changes or {}, old_version)
    notify.ready(("policies %s%s"):format(policy.current().version,
      new and "" or " (the reload failed; the previous policies answer)"))
  end)
end

-- A long-running command tells its service manager it serves (after listening, connecting,
-- or starting to read) and that it stops (when a stop signal arrives, before draining).
function P:ready(status) return notify.ready(status) end

-- The executor stack's options, the same for every command that runs work (exec, console):
-- the policies, the workspaces and the E2B sandbox ids under the state directory, the
-- credentials, --backend, --sandbox-url and --workspace-root, and the trace sink.
function P:stack_options(sink, front)
  local opts = self.opts
  return {
    front = front, -- whose commands these are (policies/isolation.lua local_walls)
    policy = policy.current,
    workspace_root = opts.workspace_root or state.workspaces(),
    sandbox_url = opts.sandbox_url,
    credentials = self.ctx.credentials,
    force_backend = opts.backend,
    e2b_state_dir = state.dir(),
    sink = sink,
  }
end

-- A server's life once it listens (sandboxd, the resident): SIGHUP reloads the policies; TERM
-- and INT say STOPPING and drain it; the listening line (event, fields plus the walls), then
-- READY; returns 0 once the drain is over and the walls are down.
function P:serve(srv, walls, event, fields)
  self:reload_on_hup() -- logs <name>.reload ok=… errors=… version=…; RELOADING=1/READY=1
  for _, sig in ipairs({ "TERM", "INT" }) do
    core.on_signal(sig, function() self:stopping(); srv:shutdown(sig) end)
  end
  fields.walls = walls and ("cgroup v" .. walls.layout.version) or "none"
  fields.uids = walls and walls:uid_range() or nil
  core.log("info", event, fields)
  self:ready(("listening on %s:%d, policies %s"):format(fields.host, srv.port, self.snap.version))
  srv:wait()
  if walls then walls:close() end
  return 0
end

function P:stopping() return notify.stopping() end

-- The sink for `--trace FILE` (`-` for stderr): nil when the option is absent.
function P:trace_sink()
  local path = self.opts.trace
  if path == nil then return nil end
  local sink, err = tracing.sink_for(path)
  if not sink then return nil, self:fail(M.EXIT.usage, "--trace: " .. tostring(err)) end
  return sink
end

-- The no-credential notice for an agent that should carry a GitHub token: said once per
-- process (the credential remembers it said it). say(line) is called at most once.
function P:notice(agent_def, say)
  local line = identity.notice_for(self.ctx.credentials, agent_def)
  if line then say(line) end
  return line
end

return M

-- The prologue every subcommand shares, so that each says the same things the same way:
-- parse its options (--help answered, a usage error named), load the policies or stop with
-- the configuration status, check --backend, reload the policies on SIGHUP, and say the
-- credential notice once.
--
--   local p, status = prologue.start(M, argv, ctx, {spec = SPEC, policies = true, backend = true})
--   (a command that runs work on a backend: prologue.start_with_backend(M, argv, ctx, SPEC, usage))
--   if not p then return status end          -- --help answered, or a usage/config failure said
--   p.opts, p.words, p.rest                  -- args.parse's results
--   p.snap                                   -- the policies as loaded (policies = true)
--   p:fail(status, message)                  -- "switchboard NAME: message" on stderr → status
--   p:say(line)                              -- a line on stdout
--   p:reload_on_hup(report)                  -- report(new_snap | nil, errors, changes, old_version)
--                                               after each HUP (changes: policy/flat.lua's)
--                                               the service manager hears RELOADING=1, READY=1
--   p.on_reloaded = fn(new_snap)             -- also run after each reload that took effect
--   p:stack_options(sink)                    -- exec/stack.lua's options from the command line
--   p:serve(srv, walls, event, fields)       -- a listening server's signals, READY, its drain
--   p:on_stop(drain, again)                  -- TERM/INT: STOPPING, drain(sig, kill_now); a second
--                                               signal: kill_now aborted, again(sig)
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

-- --backend's words come from the backends' registry (exec/backends.lua): loading it here,
-- before any policy, also gives policy/schema.lua each backend's settings.
local backends = require("switchboard.exec.backends")

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
  if backend == nil or backends.get(backend) then return true end
  return nil, M.fail(name, M.EXIT.usage, ("--backend must be %s, got %q"):format(backends.names_text(), backend), ctx)
end

-- A forced backend that cannot work here (--backend sandbox with no sandboxd to talk to):
-- every command says so the same way, at start, with the configuration status. The words, or
-- nil (the backend's own start_problem).
function M.backend_problem(snap, backend, opts, getenv)
  local decl = backend and backends.get(backend)
  if not (decl and decl.start_problem) then return nil end
  return decl.start_problem(snap, opts, getenv)
end

-- A command's help with its `{backends}` line filled in: one line per registered backend.
function M.help_text(cmd)
  local help = cmd.help:gsub("\n$", "")
  return (help:gsub("( *){backends}", function(indent) return backends.help_lines(indent) end))
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
    out_of(ctx)(M.help_text(cmd))
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
    if what.backend then
      local why = M.backend_problem(snap, opts.backend, opts, ctx.getenv or os.getenv)
      if why then return nil, self:fail(M.EXIT.config, why) end
    end
  end
  return self
end

-- The start of every command that runs work on a backend (exec, console, slack): its options
-- (spec), --backend checked, its own usage checks, the policies loaded.
function M.start_with_backend(cmd, argv, ctx, spec, usage)
  return M.start(cmd, argv, ctx, { spec = spec, backend = true, usage = usage, policies = true })
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
    if new and self.on_reloaded then self.on_reloaded(new) end
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
  -- a second signal goes to the server too: its drain skips what is left (server/lifecycle.lua)
  self:on_stop(function(sig) srv:shutdown(sig) end, function(sig) srv:shutdown(sig) end)
  fields.walls = walls and ("cgroup v" .. walls.layout.version) or "none"
  fields.uids = walls and walls:uid_range() or nil
  core.log("info", event, fields)
  self:ready(("listening on %s:%d, policies %s"):format(fields.host, srv.port, self.snap.version))
  srv:wait()
  if walls then walls:close() end
  return 0
end

function P:stopping() return notify.stopping() end

-- The one way a long-running command stops: TERM or INT says STOPPING and calls
-- drain(signal_name, kill_now); a second one aborts kill_now (what is left of the drain is
-- skipped: waits given kill_now end at once) and calls again(signal_name). Returns kill_now.
function P:on_stop(drain, again)
  local kill_now, draining = core.signal(), false
  local function on_signal(name)
    if draining then
      kill_now:abort("second SIG" .. name)
      if again then again(name) end
      return
    end
    draining = true
    self:stopping()
    drain(name, kill_now)
  end
  core.on_signal("TERM", on_signal)
  core.on_signal("INT", on_signal)
  return kill_now
end

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

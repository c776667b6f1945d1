-- The e2b executor: a thread's commands run in an E2B sandbox (a Firecracker micro-VM) of its
-- own, created on the thread's first command and reused by its follow-ups (docs/e2b.md;
-- docs/contract.md#e2b, #hard-stop, #failure-infra, #capacity). Three rooms:
--   exec/e2b_api.lua   the control plane: the thread's sandbox made, reconnected, kept alive,
--                      deleted, its id remembered across processes
--   exec/e2b_envd.lua  the sandbox's daemon: a command's process stream behind the wrapper that
--                      gives its whole process group the deadline and the kill, its stop, /files
--   this file          the executor interface over both
--
--   * Failures: a transport failure, a 5xx, a stream cut mid-command or a broken envelope is
--     ExecInfraError (span code infra, or timeout / http <status>); a refused API key or
--     access token is infra naming the key; a sandbox that disappeared (404 on connect or the
--     process API, E2B's proxy's 502 "sandbox was not found") is infra naming it — it is
--     forgotten, and the next command starts a fresh sandbox. A full account (429 on create)
--     waits like a full fleet, then ExecCapacityError. A nonzero exit is a result.
local core = require("switchboard.core")
local tracing = require("switchboard.exec.tracing")
local budget = require("switchboard.shell.budget")
local api = require("switchboard.exec.e2b_api")
local envd = require("switchboard.exec.e2b_envd")
local errors = require("switchboard.exec.errors")
local preflight = require("switchboard.exec.preflight")
local render = require("switchboard.shell.render")

local M = {}
M.__index = M

M.DEFAULT_TEMPLATE = "base"
M.DEFAULT_WORKDIR = "/home/user"
M.WHERE = "E2B sandbox"

local function no_envs() return {} end

-- opts: api_key, key_env (the variable it came from, for messages), thread_key,
--       policy (fn → the current snapshot; read only when a call's opts carry no snap),
--       resolve_envs (fn → NAME = value, called on every command), getenv (for the
--       endpoints), template, workdir, agent, state_dir (optional: the thread's sandbox id is
--       kept there, so a later process — the next `switchboard exec --thread` — reconnects to
--       it), request / sleep / now_ms (core's by default; specs may drive them)
function M.new(opts)
  assert(type(opts.api_key) == "string" and opts.api_key ~= "", "e2b executor: opts.api_key is required")
  assert(type(opts.policy) == "function", "e2b executor: opts.policy is required")
  local workdir = (opts.workdir or M.DEFAULT_WORKDIR):gsub("/+$", "")
  return setmetatable({
    backend = "e2b",
    api_key = opts.api_key,
    key_env = opts.key_env,
    thread_key = opts.thread_key or "default",
    agent = opts.agent,
    policy = opts.policy,
    resolve_envs = opts.resolve_envs or no_envs,
    ends = api.endpoints(opts.getenv),
    template = opts.template or M.DEFAULT_TEMPLATE,
    workdir = workdir ~= "" and workdir or "/",
    state_dir = opts.state_dir,
    -- each request an http.request child of the operation's span (exec/tracing.lua)
    request = tracing.http(opts.request or core.http.request, "e2b"),
    sleep = opts.sleep or core.sleep,
    now_ms = opts.now_ms or core.now_ms,
    sandbox = nil, -- {id, token, domain, expires_ms (our clock)}
  }, M)
end

local stop_reason = preflight.stop_reason

local function join_lines(a, b)
  if a and b then return a .. "\n" .. b end
  return a or b
end

function M:exec(command, opts)
  opts = opts or {}
  local call, refused = preflight.command(self, command, opts)
  if not call then return nil, refused end
  local snap, limit_ms, t = call.snap, call.budget_ms, call.snap.timeouts

  local stopped = function()
    return render.result(snap, { aborted = true, abort_reason = stop_reason(opts.signal),
      stdout = "", stderr = "", clip_line = call.clip_line })
  end
  local sb, notice = api.ensure(self, snap, limit_ms + t.call.margin_ms, limit_ms, opts.signal)
  if not sb then
    if api.is_stopped(notice) then return stopped() end
    return nil, notice
  end

  local grace_ms = t.bash.kill_grace_ms
  local t0 = self.now_ms()
  local mark = core.crypto.hex(core.crypto.random_bytes(8))
  local st, status = envd.run_process(self, snap, sb, {
    args = { "-c", envd.WRAPPER, "switchboard", ("%.3f"):format(grace_ms / 1000), ("%.3f"):format(limit_ms / 1000),
      command, mark },
    envs = call.envs,
    connect_timeout_ms = limit_ms + grace_ms + t.e2b.connect_grace_ms,
    deadline_ms = budget.send_deadline(snap, limit_ms),
    signal = opts.signal,
  })
  local elapsed = self.now_ms() - t0
  st.mark = mark
  if opts.signal and opts.signal.aborted and not st.ended then
    envd.stop_command(self, snap, sb, st, true)
    return render.result(snap, {
      aborted = true, abort_reason = stop_reason(opts.signal),
      stdout = table.concat(st.stdout), stderr = table.concat(st.stderr),
      truncated = st.truncated, duration_ms = elapsed, clip_line = join_lines(notice, call.clip_line),
    })
  end
  local verdict, err = envd.judge(self, snap, sb, st, status, limit_ms, elapsed, limit_ms)
  if not verdict then return nil, err end
  return render.result(snap, {
    exit_code = verdict.exit_code,
    stdout = table.concat(st.stdout), stderr = table.concat(st.stderr),
    truncated = st.truncated, duration_ms = elapsed,
    timed_out = verdict.timed_out, limit_ms = limit_ms, where = M.WHERE,
    clip_line = join_lines(notice, call.clip_line),
  })
end

---------------------------------------------------------------------------------------------
-- Files: paths are relative to the workdir; climbing out of it is refused here, since envd
-- would follow any path inside the VM (the VM is the wall; symlinks inside it are not checked).

local function confine(self, path)
  if type(path) ~= "string" or path == "" then return nil, "a path is required" end
  if path:find("\0", 1, true) then return nil, "a path must not contain NUL" end
  if path:sub(1, 1) == "/" then return nil, "escape" end
  local parts = {}
  for part in path:gmatch("[^/]+") do
    if part == ".." then
      if #parts == 0 then return nil, "escape" end
      parts[#parts] = nil
    elseif part ~= "." then
      parts[#parts + 1] = part
    end
  end
  if #parts == 0 then return nil, "not_a_file" end
  return (self.workdir == "/" and "" or self.workdir) .. "/" .. table.concat(parts, "/")
end

-- The failures of a path (the model's to read); any other is the executor's.
local PATH_KINDS = { not_found = true, invalid = true, too_large = true }

local function file_call(self, path, method, body, opts)
  opts = opts or {}
  local snap = opts.snap or self.policy()
  local abs, why = confine(self, path)
  if not abs then return nil, errors.path(path, why, why) end
  local file_budget = snap.timeouts.file_op.budget_ms
  local sb, err = api.ensure(self, snap, file_budget, file_budget, opts.signal)
  if sb then
    sb, err = envd.files(self, snap, sb, method, abs, body, opts.signal)
    if sb then return sb end
  end
  if api.is_stopped(err) then
    return nil, errors.tool("file operation stopped: " .. stop_reason(opts.signal))
  end
  if PATH_KINDS[err.kind] then return nil, errors.path(path, err.kind, err.message) end
  return nil, err
end

function M:read_file(path, opts)
  local bytes, err = file_call(self, path, "GET", nil, opts)
  if bytes == nil then return nil, err end
  local snap = opts and opts.snap or self.policy()
  if #bytes > snap.timeouts.sandbox.max_file_bytes then return nil, errors.path(path, "too_large") end
  return bytes
end

function M:write_file(path, bytes, opts)
  if type(bytes) ~= "string" then return nil, errors.tool("write_file needs the bytes to write") end
  local ok, err = file_call(self, path, "POST", bytes, opts)
  if ok == nil then return nil, err end
  return true
end

-- "always" (a hard stop, a read-only run): delete the sandbox — the only way to end what still
-- runs in it (a paused one would resume it). "if-clean": keep it for the thread's follow-ups;
-- when E2B's timeout passes it is paused (autoPause), and the next command resumes it.
function M:release(mode)
  if mode ~= "always" then return true end
  local id = (self.sandbox and self.sandbox.id) or api.recalled(self)
  api.forget(self)
  if not id then return true end
  api.note(self, ("workspace not kept: the thread's E2B sandbox %s was deleted to end what ran in "
    .. "it; the next ask starts a fresh one"):format(id))
  return api.delete(self, self.policy(), id)
end

-- The lines the card should show about this thread's workspace since the last call (a paused
-- sandbox E2B could not resume: its files are gone), taken once (exec/stack.lua).
function M:take_notes()
  local notes = self.notes or {}
  self.notes = nil
  return notes
end

-- The sandbox id in use (nil before the first command): for notes and tests.
function M:sandbox_id()
  return self.sandbox and self.sandbox.id or api.recalled(self)
end


---------------------------------------------------------------------------------------------
-- The backend's declaration (exec/backends.lua): an E2B sandbox per thread. The API key from
-- the variable policy names; hosts from E2B's own variables (docs/e2b.md).
local schema = require("switchboard.policy.schema")
local S = schema.S

local function key_of(snap, getenv)
  local key = getenv(snap.execution.e2b.api_key_env)
  if key == nil or key == "" then return nil end
  return key
end

local function build(opts, ctx, snap, _, kit)
  if kit.network == "none" then
    return kit.no_offline("an e2b sandbox keeps its network", "use the sandbox backend for it (policies/execution.lua)")
  end
  local getenv = opts.getenv or os.getenv
  local cfg = snap.execution.e2b
  local key = key_of(snap, getenv)
  if not key then return kit.missing(cfg.api_key_env) end
  return M.new{
    api_key = key, key_env = cfg.api_key_env, thread_key = ctx.thread_key, agent = ctx.agent,
    policy = opts.policy, resolve_envs = kit.resolve_envs, getenv = getenv,
    template = cfg.template, workdir = cfg.workdir, state_dir = opts.e2b_state_dir,
  }
end

M.backend = {
  name = "e2b",
  help = "an E2B sandbox per thread ($E2B_API_KEY; docs/e2b.md)",
  settings = S.record {
    api_key_env = schema.env_name,
    template = S.optional(S.string { one_line = true }),
    workdir = S.optional(S.string { one_line = true, pattern = "^/", what = "an absolute path" }),
  },
  configured = function(snap, getenv) return key_of(snap, getenv) ~= nil end,
  start_problem = function(snap, _, getenv)
    if key_of(snap, getenv) then return nil end
    local name = snap.execution.e2b.api_key_env
    return ("--backend e2b needs $%s, an E2B API key (https://e2b.dev/dashboard?tab=keys): %s is not set")
      :format(name, name)
  end,
  build = build,
}

return M

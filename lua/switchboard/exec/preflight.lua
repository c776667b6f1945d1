-- What every backend does before a command or a file operation leaves it (local, sandbox, e2b;
-- the resident through the sandbox executor): the command checked, the ask's snapshot taken,
-- the budget clamped once and clipped to the run, the credentials resolved for this one call.
--
--   local call, err = preflight.command(self, command, opts [, check])
--     call = {snap, budget_ms, timeout_ms, clip_line, envs}
--       budget_ms   the command's budget, clamped once (shell/budget.lua within_run): every
--                   deadline and wait of the call is made of it, never clamped again
--       timeout_ms  the caller's request, clamped (nil when it asked for none: a wire sends none)
--       envs        preflight.envs(self): the credentials, resolved last (nothing is minted for
--                   a command refused before it)
--     check(snap) → err | nil: the backend's own refusal before the credentials (sandbox: a
--                   thread key the wire cannot carry)
--     err = ExecToolError (no command) | ExecRefused (the run's budget is spent, exit 124) |
--           check's | preflight.envs's
--   local call, err = preflight.plan(self, command, opts [, check])
--     the same without the credentials: for a backend that hands the command to another
--     executor, which resolves them itself (kubernetes → the pod's sandbox executor)
--   local envs, err = preflight.envs(self)   -- self.resolve_envs(), now, for this call
--   preflight.stop_reason(signal)            -- what a hard stop's result names
--     err = ExecInfraError "credentials for this command could not be resolved: …" with the
--           resolver's span code (http <status>, timeout) when it has one, and the resolver's
--           error as its cause
local core = require("switchboard.core")
local budget = require("switchboard.shell.budget")
local errors = require("switchboard.exec.errors")

local M = {}

function M.plan(self, command, opts, check)
  if type(command) ~= "string" or command == "" then
    return nil, errors.tool("bash needs a command to run")
  end
  local snap = opts.snap or self.policy()
  local refused = check and check(snap)
  if refused then return nil, refused end
  local plan, refusal = budget.within_run(snap, opts.timeout_ms, opts.remaining_ms)
  if not plan then return nil, errors.refused(refusal, 124) end
  return { snap = snap, budget_ms = plan.budget_ms, timeout_ms = plan.timeout_ms, clip_line = plan.clip_line }
end

function M.command(self, command, opts, check)
  local call, refused = M.plan(self, command, opts, check)
  if not call then return nil, refused end
  local envs, err = M.envs(self)
  if not envs then return nil, err end
  call.envs = envs
  return call
end

function M.stop_reason(signal)
  local r = signal and signal.reason
  if type(r) == "string" and r ~= "" then return r end
  return "hard stop"
end

-- A resolver that raises is a programmer error and passes (docs: "Failures are values");
-- nil, err is a failure of the credential source, kept whole as the cause.
function M.envs(self)
  local envs, err = self.resolve_envs()
  if envs ~= nil then return envs end
  local code = core.is_error(err) and errors.valid_code(err.code) and err.code or nil
  local why = (tostring(err ~= nil and err or "no reason given"):match("^[^\n]*"))
  return nil, errors.infra("credentials for this command could not be resolved: " .. why, code,
    { cause = err })
end

return M

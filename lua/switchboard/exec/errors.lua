-- Executor failures, and the executor interface (docs/executors.md has the long form).
--
-- An executor is a table with:
--   ex.backend                         its backend's name (exec/backends.lua: "local", "sandbox", …)
--   ex:exec(command, opts)             → result | nil, err
--       result = {exit_code, stdout, stderr, duration_ms, timed_out, aborted, truncated, text}
--       A nonzero exit is a RESULT (text "exit N: …"), never an error.
--   ex:read_file(path, opts)           → bytes | nil, err
--   ex:write_file(path, bytes, opts)   → true | nil, err
--   ex:release(mode)        (optional) mode "always" | "if-clean"
--   ex:move_to(...)         (optional)
--   ex:workspace_dir()      (optional) the host directory the thread's commands run in
--   ex:take_workspace_note() (optional) what the backend said once about the thread's workspace
--                           on a wake: {state = "kept" | "expired", text} | nil (sandbox)
--   opts: timeout_ms (the clamped per-call budget), signal (hard stop), span (tracing parent),
--         remaining_ms (the run's wall clock left), snap (the policy snapshot the ask captured:
--         the executor decides with it and does not read the policy again)
--
-- err is the engine's one error type (core.error) with one of the kinds below; tostring(err) is
-- its message, which is never empty; `cause` (when set) is the failure underneath.
--   infra     the transport failed (sandbox unreachable, HTTP/worker error, in-body failure);
--             fail-fast counts it. code: timeout | http <status> | infra | infra/attach |
--             infra/runtime-replaced (the span's error code)
--   capacity  a full fleet after the bounded wait; fail-fast neither counts nor resets on it
--   tool      a tool-level failure the model should read (a file that is not there, a tool
--             wired to an agent without a workspace)
--   refused   not started at all (run budget exhausted: exit_code 124)

local core = require("switchboard.core")

local M = {}

local NAMES = {
  infra = "ExecInfraError",
  capacity = "ExecCapacityError",
  tool = "ExecToolError",
  refused = "ExecRefused",
}

local function text(message, kind)
  if type(message) ~= "string" then message = message ~= nil and tostring(message) or "" end
  message = message:gsub("^%s+", ""):gsub("%s+$", "")
  if message == "" then message = "(" .. NAMES[kind] .. " without a message)" end
  return message
end

-- Every executor failure is the engine's one error type (core.error: kind, message, optional
-- code and cause, tostring = the message); `name` keeps the class a reader knows it by.
local function new(kind, message, fields)
  local f = { name = NAMES[kind] }
  for k, v in pairs(fields or {}) do
    if f[k] == nil then f[k] = v end
  end
  return core.error(kind, text(message, kind), f)
end

-- Span codes an infra error may carry.
function M.valid_code(code)
  if type(code) ~= "string" then return false end
  return code == "timeout" or code == "infra" or code == "infra/attach"
    or code == "infra/runtime-replaced" or code:find("^http %d%d%d$") ~= nil
end

-- ExecInfraError. code defaults to "infra"; an unknown code is a programmer error.
function M.infra(message, code, fields)
  code = code or "infra"
  if not M.valid_code(code) then
    error("exec.errors.infra: unknown span code " .. tostring(code), 2)
  end
  local f = { code = code }
  for k, v in pairs(fields or {}) do f[k] = v end
  return new("infra", message, f)
end

-- ExecCapacityError. waited_ms: how long the fleet-busy wait lasted.
function M.capacity(message, waited_ms, fields)
  local f = { waited_ms = waited_ms }
  for k, v in pairs(fields or {}) do f[k] = v end
  return new("capacity", message, f)
end

function M.tool(message, fields)
  return new("tool", message, fields)
end

-- A command that was not started. exit_code defaults to 124 (run budget exhausted).
function M.refused(message, exit_code, fields)
  local f = { exit_code = exit_code or 124 }
  for k, v in pairs(fields or {}) do f[k] = v end
  return new("refused", message, f)
end

-- A path's failure (outside the workspace, missing, not a file, too large), worded for the model
-- as a tool error: the same words from every backend. Any other kind: the path and `detail`.
local PATH_TEXTS = {
  escape = "%s is outside the workspace (absolute paths, `..` that climbs out and symlinks "
    .. "that point out are refused); use a path relative to the workspace",
  not_found = "%s does not exist in the workspace",
  not_a_file = "%s is not a regular file",
  too_large = "%s is too large to read whole; read part of it with bash (head, sed -n)",
}

function M.path(path, kind, detail)
  local text = PATH_TEXTS[kind]
  if text then return M.tool(text:format(path)) end
  return M.tool(("%s: %s"):format(path, detail or kind))
end

-- An executor failure: the engine's error type with one of the four kinds above.
function M.is_error(e) return core.is_error(e) and NAMES[e.kind] ~= nil end
function M.is_infra(e) return core.is_error(e) and e.kind == "infra" end
function M.is_capacity(e) return core.is_error(e) and e.kind == "capacity" end
function M.is_tool(e) return core.is_error(e) and e.kind == "tool" end
function M.is_refused(e) return core.is_error(e) and e.kind == "refused" end

return M

-- The wire protocol between the sandbox executor and sandboxd (docs/contract.md#wire-protocol),
-- shared by both ends the way the earlier system bundled sandboxErrors.ts into its Worker:
-- route names, the request headers, the thread-key rule and the answer shapes. Pure: no
-- engine calls, nothing that waits.
--
--   POST /exec   {command, timeoutMs?, env, network?}  → 200 at once, " " every heartbeat, then one JSON
--                document {stdout, stderr, exitCode, durationMs} or the failure shape
--                {error, reason?, stdout: "", stderr: <same text>, exitCode: 127}
--   POST /read   {path, env, network?}       → 200 {content (base64), encoding: "base64", size}
--   POST /write  {path, content, encoding?, env, network?} → 200 {ok: true, size}
--   GET  /healthz                            → 200 {ok, build: {commit, builtAt}}
--   every route: authorization: Bearer <token>; /exec, /read, /write: x-thread-key
--   file-route failures: 4xx/5xx {error, reason?}; a full fleet: 503 {error, reason: "fleet-busy"}
--   network ("host" | "none"; absent = sandboxd's policies/isolation.lua network) is fixed when
--   the request creates the thread's instance; a request whose network differs from the awake
--   instance's is refused 409, reason "network-mismatch" (docs/isolation.md), and "none" on a
--   server without walls 409, reason "network-unavailable".

local M = {}

M.ROUTES = {
  ["/exec"] = "POST", ["/read"] = "POST", ["/write"] = "POST", ["/healthz"] = "GET",
}

M.THREAD_HEADER = "x-thread-key"
M.AUTH_HEADER = "authorization"
M.FAILURE_EXIT = 127 -- the dual shape's exitCode (docs/contract.md#failure-shape)

-- A thread key the wire can carry: 1..max_bytes of visible ASCII and inner spaces (a header
-- value cannot carry control bytes, and leading or trailing blanks would be stripped on the
-- way). Returns true, or false and why.
function M.check_thread_key(key, max_bytes)
  if type(key) ~= "string" or key == "" then
    return false, "the x-thread-key header is missing; send the conversation thread's key"
  end
  if #key > max_bytes then
    return false, ("x-thread-key is %d bytes; at most %d are accepted"):format(#key, max_bytes)
  end
  if key:find("[^\32-\126]") then
    return false, "x-thread-key must be visible ASCII (bytes 0x20-0x7E)"
  end
  if key:find("^ ") or key:find(" $") then
    return false, "x-thread-key must not start or end with a space"
  end
  return true
end

-- The networks an instance can have (policies/isolation.lua network, policies/agents.lua
-- agents.NAME.network).
M.NETWORKS = { host = true, none = true }
M.NETWORK_MISMATCH = "network-mismatch"
M.NETWORK_UNAVAILABLE = "network-unavailable"

-- A body's network field: nil (absent: the server's default), or the value; false and why when
-- it is neither.
function M.check_network(value)
  if value == nil then return nil end
  if type(value) == "string" and M.NETWORKS[value] then return value end
  local shown = type(value) == "string" and ("%q"):format(value:sub(1, 40)) or ("a JSON " .. (type(value) == "userdata" and "null" or type(value)))
  return false, ("network must be \"host\" or \"none\" (policies/agents.lua network), got %s")
    :format(shown)
end

-- The failure shape every /exec failure is answered with: old and new executors both render it.
-- text must already be non-empty (classify.thrown_text makes it so).
function M.exec_failure(text, reason)
  return { error = text, reason = reason, stdout = "", stderr = text, exitCode = M.FAILURE_EXIT }
end

-- The success document.
function M.exec_result(stdout, stderr, exit_code, duration_ms)
  return {
    stdout = stdout, stderr = stderr, exitCode = exit_code,
    durationMs = math.tointeger(math.floor(duration_ms + 0.5)) or 0,
  }
end

return M

-- An MCP server over stdio, run inside the thread's sandbox through its executor (docs/mcp.md
-- "stdio servers"). The executor runs a command and waits for it, so each exchange is one
-- command: a bash driver starts the server (its stdin and stdout FIFOs) with the policy's argv and env,
-- writes initialize, waits for its reply, writes notifications/initialized and the request,
-- waits for that reply, then closes the server's stdin and ends it. Every line the server
-- wrote comes back on stdout; the reply is found by its id. Stateless but correct: the walls,
-- the command deadline and the run's stop bound each exchange like a bash call.
--
--   stdio.exchange(ex, snap, server, method, params, ctx) → result | nil, err
--     server: {name, command = {argv…}, env = {K = V}}; err: the executor's error as it came
--     (infra, capacity, a refusal), or core.error("mcp_server", why) when the server failed
--     (it did not start, ended, answered an error, or not within the deadline)
local core = require("switchboard.core")
local protocol = require("switchboard.agent.mcp.protocol")

local M = {}

M.INIT_ID, M.CALL_ID = "sbmcp-init", "sbmcp-call"
M.STDERR_MARK = "--sbmcp-stderr--"
local STDERR_AT = M.STDERR_MARK:gsub("%-", "%%-") .. "\n"

local function quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t or {}) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys
end

-- The server's command line: env with the policy's variables, then its argv (env takes the
-- first word without "=" as the program: the schema refuses a program name with "=").
function M.command_line(server)
  local words = { "exec", "env" }
  for _, k in ipairs(sorted_keys(server.env)) do words[#words + 1] = quote(k .. "=" .. server.env[k]) end
  for _, a in ipairs(server.command) do words[#words + 1] = quote(a) end
  return table.concat(words, " ")
end

-- The driver: bash (the instance has the host's /usr, and the bash tool needs it anyway). The
-- server's stdin and stdout are FIFOs opened before it runs, so a server that dies at once
-- still leaves its stderr to read (a coprocess's descriptors vanish with it); SIGPIPE is
-- ignored so that writing to a server that is gone fails instead of killing the driver.
function M.script(server, request_json)
  return table.concat({
    "trap '' PIPE",
    "__sb_d=$(mktemp -d) && mkfifo \"$__sb_d/in\" \"$__sb_d/out\" || exit 70",
    "( " .. M.command_line(server) .. " <\"$__sb_d/in\" >\"$__sb_d/out\" 2>\"$__sb_d/err\" ) &",
    "__sb_pid=$!",
    "exec {__sb_in}>\"$__sb_d/in\" {__sb_out}<\"$__sb_d/out\"",
    "__sb_wait() { local line; while IFS= read -r line <&$__sb_out; do printf '%s\\n' \"$line\"; "
      .. "case $line in *\"$1\"*) return 0;; esac; done; return 1; }",
    "__sb_rc=3",
    "printf '%s\\n' " .. quote(protocol.initialize(M.INIT_ID)) .. " >&$__sb_in 2>/dev/null",
    "if __sb_wait " .. quote('"' .. M.INIT_ID .. '"') .. "; then",
    "  printf '%s\\n' " .. quote(protocol.initialized()) .. " " .. quote(request_json) .. " >&$__sb_in 2>/dev/null",
    "  __sb_wait " .. quote('"' .. M.CALL_ID .. '"') .. " && __sb_rc=0",
    "fi",
    "exec {__sb_in}>&-",
    "kill \"$__sb_pid\" 2>/dev/null; wait \"$__sb_pid\" 2>/dev/null",
    "if [ $__sb_rc -ne 0 ]; then printf '%s\\n' " .. quote(M.STDERR_MARK) .. "; tail -c 1500 \"$__sb_d/err\"; fi",
    "rm -rf \"$__sb_d\"",
    "exit $__sb_rc",
  }, "\n")
end

local function why_failed(stdout)
  local err = stdout:match(STDERR_AT .. "(.*)$") or ""
  err = err:gsub("%s+$", ""):gsub("\n", " | ")
  if #err > 400 then err = "…" .. err:sub(-400) end
  return err ~= "" and ("its stderr: " .. err) or "it wrote nothing on stderr"
end

function M.exchange(ex, snap, server, method, params, ctx)
  local script = M.script(server, protocol.request(M.CALL_ID, method, params))
  local result, err = ex:exec(script, {
    timeout_ms = snap.timeouts.bash.default_ms, signal = ctx.signal, remaining_ms = ctx.remaining_ms, snap = snap,
  })
  if not result then return nil, err end
  local stdout = result.stdout or result.text or ""
  local messages = protocol.decode_lines((stdout:gsub(STDERR_AT .. ".*$", "")))
  if result.exit_code ~= 0 then
    if result.exit_code == 124 or result.timed_out then
      local why = ("no answer within the command deadline (%d ms)"):format(snap.timeouts.bash.default_ms)
      return nil, core.error("mcp_server", why)
    end
    local code, why = tostring(result.exit_code), why_failed(stdout)
    local text = ("it did not start or did not answer initialize (exit %s); %s"):format(code, why)
    if protocol.answer(messages, M.INIT_ID) then
      text = ("it ended without answering %s (exit %s); %s"):format(method, code, why)
    end
    return nil, core.error("mcp_server", text)
  end
  return protocol.answer(messages, M.CALL_ID)
end

return M

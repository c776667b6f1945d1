-- The shape of an agent's mcp_servers (policies/agents.lua; docs/mcp.md), in Claude Code's
-- mcpServers form: NAME → { command = { argv… }, env = { K = V } } (stdio, run inside the
-- thread's sandbox) or NAME → { url = "https://…", headers = { Name = "value or ${ENV}" } }
-- (streamable HTTP, called from the bot). Exactly one of command and url.
--
--   mcp_shape.servers(S) → a schema spec (S: policy/schema.lua's spec builders)
local M = {}

M.SERVER_NAME = "^[a-zA-Z0-9][a-zA-Z0-9_-]*$"

function M.servers(S)
  local argv = S.list(S.string { one_line = true, max_len = 4096 }, { min = 1, max = 100 })
  local env = S.map("^[A-Za-z_][A-Za-z0-9_]*$", "an environment variable name",
    S.string { one_line = true, max_len = 8192, empty_ok = true })
  local url = S.string { one_line = true, max_len = 2048, pattern = "^https?://[^%s/?#]+", what = "an http:// or https:// URL" }
  local headers = S.map("^[A-Za-z0-9-]+$", "an HTTP header name (letters, digits, -)",
    S.string { one_line = true, max_len = 8192 })
  local stdio = S.record { command = argv, env = S.optional(env) }
  local http = S.record { url = url, headers = S.optional(headers) }
  local function server(v, path, report)
    if type(v) ~= "table" then return report(path, "must be a table { command = {…} } or { url = \"…\" }") end
    if (v.command ~= nil) == (v.url ~= nil) then
      return report(path, "must have exactly one of command (a stdio server) and url (a streamable-HTTP server)")
    end
    if v.command ~= nil then return stdio(v, path, report) end
    return http(v, path, report)
  end
  return S.map(M.SERVER_NAME, "letters, digits, _ and - (the name in mcp__NAME__TOOL)", server)
end

return M

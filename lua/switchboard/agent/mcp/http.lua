-- An MCP server over streamable HTTP, called from the bot (docs/mcp.md "HTTP servers"): each
-- JSON-RPC message is a POST to the server's URL with Accept: application/json,
-- text/event-stream; the reply is a JSON body or an SSE stream whose events carry it. The
-- Mcp-Session-Id the server gives on initialize is sent on every later request of the run.
-- Header values may name the bot's environment variables as ${NAME}: resolved at each request,
-- never logged, never shown (an error names the header and the variable, not the value).
--
--   local s = http.session(server, opts)   server: {name, url, headers}; opts: request, getenv
--   s:exchange(snap, method, params, ctx) → result | nil, core.error("mcp_server", why)
local core = require("switchboard.core")
local protocol = require("switchboard.agent.mcp.protocol")

local M = {}

local S = {}
S.__index = S

-- The header values with ${NAME} replaced from the environment, or nil and what is missing.
local function fail(why) return core.error("mcp_server", why) end

function M.headers(server, getenv)
  local out = {
    ["Accept"] = "application/json, text/event-stream",
    ["Content-Type"] = "application/json",
  }
  for name, value in pairs(server.headers or {}) do
    local missing
    local v = value:gsub("%${([%w_]+)}", function(var)
      local got = getenv(var)
      if got == nil or got == "" then missing = missing or var; return "" end
      return got
    end)
    if missing then
      return nil, fail(("header %s names ${%s}, which is not set in the bot's environment"):format(name, missing))
    end
    if core.log_redact and v ~= value then core.log_redact(v) end
    out[name] = v
  end
  return out
end

-- The JSON-RPC messages of a body: one JSON value (or a batch), or SSE events' data.
function M.messages(content_type, body)
  body = body or ""
  if (content_type or ""):find("text/event-stream", 1, true) then
    local out, data = {}, {}
    for line in (body:gsub("\r\n", "\n") .. "\n\n"):gmatch("([^\n]*)\n") do
      if line == "" then
        if #data > 0 then
          for _, m in ipairs(protocol.decode_lines(table.concat(data, " "))) do out[#out + 1] = m end
        end
        data = {}
      elseif line:sub(1, 5) == "data:" then
        data[#data + 1] = line:sub(6):gsub("^ ", "")
      end
    end
    return out
  end
  local msgs = protocol.decode_lines((body:gsub("\n", " ")))
  if #msgs == 1 and msgs[1][1] ~= nil then return msgs[1] end -- a batch
  return msgs
end

function M.session(server, opts)
  opts = opts or {}
  return setmetatable({ server = server, request = opts.request or core.http.request,
                        getenv = opts.getenv or os.getenv }, S)
end

function S:post(json, deadline_ms, signal, max_body)
  local headers, herr = M.headers(self.server, self.getenv)
  if not headers then return nil, herr end
  if self.session_id then headers["Mcp-Session-Id"] = self.session_id end
  if self.version then headers["MCP-Protocol-Version"] = self.version end
  local status, rh, body = self.request{ method = "POST", url = self.server.url, headers = headers, body = json,
                                          deadline_ms = deadline_ms, signal = signal, max_body = max_body }
  if type(status) ~= "number" then return nil, fail("no answer: " .. tostring(rh or status)) end
  if status == 202 then return {}, nil, rh end
  if status < 200 or status > 299 then return nil, fail(("HTTP %d"):format(status)), nil, status end
  return M.messages(rh and rh["content-type"], body), nil, rh
end

function S:open(deadline_ms, signal, max_body)
  local msgs, err, rh = self:post(protocol.initialize("sbmcp-init"), deadline_ms, signal, max_body)
  if not msgs then return nil, fail("initialize: " .. tostring(err)) end
  local result, aerr = protocol.answer(msgs, "sbmcp-init")
  if not result then return nil, fail("initialize: " .. tostring(aerr)) end
  self.session_id = rh and rh["mcp-session-id"]
  self.version = type(result.protocolVersion) == "string" and result.protocolVersion or nil
  local _, nerr = self:post(protocol.initialized(), deadline_ms, signal, max_body)
  if nerr then return nil, fail("notifications/initialized: " .. tostring(nerr)) end
  self.opened = true
  return true
end

function S:exchange(snap, method, params, ctx)
  local deadline = math.min(snap.timeouts.bash.default_ms, math.max(1, ctx.remaining_ms or math.huge))
  if not self.opened then
    local ok, err = self:open(deadline, ctx.signal, snap.agents.mcp.max_reply_bytes)
    if not ok then return nil, err end
  end
  local msgs, err, _, status = self:post(protocol.request("sbmcp-call", method, params), deadline, ctx.signal,
    snap.agents.mcp.max_reply_bytes)
  if not msgs and status == 404 and self.session_id then
    -- the server ended the session (it expired, the server restarted): a new one, once
    self.opened, self.session_id, self.version = false, nil, nil
    local ok, oerr = self:open(deadline, ctx.signal, snap.agents.mcp.max_reply_bytes)
    if not ok then return nil, oerr end
    msgs, err = self:post(protocol.request("sbmcp-call", method, params), deadline, ctx.signal,
      snap.agents.mcp.max_reply_bytes)
  end
  if not msgs then return nil, err end
  return protocol.answer(msgs, "sbmcp-call")
end

return M

-- The model provider the client speaks by default: Anthropic's Messages API (POST
-- {base}/v1/messages, x-api-key, anthropic-version, server-sent events as they are). Every
-- provider module has this shape (agent/client.lua calls it; docs/agent.md "Model providers"):
--
--   p.keys                                  the credentials this provider sends (scrubbed
--                                           from every message the client builds)
--   p:encode(body) → bytes [, route]        the Messages API body (stream set) in its wire form,
--                                           and what addresses it (Bedrock, Vertex: the model)
--   p:request(bytes, route) → url, headers | nil, err   may yield (a token fetched); err a core.error
--                                           of kind "retry" (try again) or "fatal"
--   p:decoder(asm, max_event_bytes) → fn(bytes | nil) → nil | core.error("bad_event", …)
--                                           the answer's bytes into agent/stream.lua's events;
--                                           nil at the end of the body
--   p:api_error(body) → kind, message       an error answer's type and text
--   p.fix                                   status → the fatal message (%s kind, %s message)
local core = require("switchboard.core")
local json = core.json

local M = {}
local P = {}
P.__index = P

M.FIX = {
  [400] = "the request was refused as invalid (400 %s: %s) — check model and max_tokens of this agent in policies/agents.lua",
  [401] = "Anthropic rejected the API key (401 %s: %s) — set ANTHROPIC_API_KEY to a valid key (console.anthropic.com → API keys) and restart switchboard",
  [403] = "the API key may not use this model (403 %s: %s) — give the key's workspace access to it, or choose another model in policies/agents.lua",
  [404] = "the model or the endpoint does not exist (404 %s: %s) — check the agent's model in policies/agents.lua and ANTHROPIC_BASE_URL",
}

-- opts: api_key, base_url, version (the anthropic-version header)
function M.new(opts)
  return setmetatable({ key = opts.api_key, keys = { opts.api_key }, url = opts.base_url:gsub("/+$", "") .. "/v1/messages",
    version = opts.version, fix = M.FIX }, P)
end

function P:encode(body)
  body.stream = true
  return json.encode(body)
end

function P:request()
  return self.url, {
    ["x-api-key"] = self.key,
    ["anthropic-version"] = self.version,
    ["content-type"] = "application/json",
    accept = "text/event-stream",
  }
end

-- Server-sent events straight into the stream assembler (shared with Vertex AI, whose
-- :streamRawPredict answers the same events).
function M.sse_decoder(asm, max_event_bytes)
  local parser = core.sse.parser(max_event_bytes)
  return function(bytes)
    if bytes == nil then return nil end
    local events, err = parser:feed(bytes)
    if not events then return core.error("bad_event", err.message) end
    for i = 1, #events, 2 do
      local e = asm:event(events[i], events[i + 1])
      if e then return e end
    end
  end
end

function P:decoder(asm, max_event_bytes) return M.sse_decoder(asm, max_event_bytes) end

function M.api_error(body)
  local doc = json.decode(body or "")
  local e = type(doc) == "table" and type(doc.error) == "table" and doc.error or {}
  local kind = type(e.type) == "string" and e.type or "error"
  local message = type(e.message) == "string" and e.message or "(no message)"
  return kind, message:sub(1, 500)
end

function P:api_error(body) return M.api_error(body) end

return M

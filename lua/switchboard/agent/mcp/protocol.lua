-- The Model Context Protocol's messages as this client sends and reads them (JSON-RPC 2.0;
-- docs/mcp.md): initialize, notifications/initialized, tools/list, tools/call, and what a
-- call's result becomes for the model. Transports (stdio.lua, http.lua) move these bytes.
--
--   protocol.request(id, method, params) → JSON text
--   protocol.initialize(id) / protocol.initialized() → JSON text
--   protocol.answer(messages, id) → result | nil, core.error("mcp_server", why)   (the reply with that id)
--   protocol.tool_name(server, tool) → "mcp__SERVER__TOOL" within ^[a-zA-Z0-9_-]{1,64}$
--   protocol.content(result) → content (text or blocks), is_error
local core = require("switchboard.core")
local json = core.json

local M = {}

M.VERSION = "2025-06-18"
M.CLIENT = { name = "switchboard", version = "1" }

function M.request(id, method, params)
  return json.encode{ jsonrpc = "2.0", id = id, method = method, params = params or {} }
end

function M.initialize(id)
  return M.request(id, "initialize", {
    protocolVersion = M.VERSION,
    capabilities = {},
    clientInfo = M.CLIENT,
  })
end

function M.initialized()
  return '{"jsonrpc":"2.0","method":"notifications/initialized"}'
end

-- The reply to id among decoded messages: its result, or nil and the error it carries.
function M.answer(messages, id)
  for _, m in ipairs(messages) do
    if type(m) == "table" and m.id == id then
      if type(m.error) == "table" then
        return nil, core.error("mcp_server", ("error %s: %s"):format(tostring(m.error.code), tostring(m.error.message)))
      end
      if type(m.result) == "table" then return m.result end
      return nil, core.error("mcp_server", "a reply without a result")
    end
  end
  return nil, core.error("mcp_server", "no reply to " .. tostring(id))
end

-- Lines of text, each a JSON message (stdio; an SSE event's data): the ones that decode.
function M.decode_lines(text)
  local out = {}
  for line in (text or ""):gmatch("[^\n]+") do
    local m = json.decode(line)
    if type(m) == "table" then out[#out + 1] = m end
  end
  return out
end

local function clean(s)
  return (tostring(s):gsub("[^%w_-]", "_"))
end

-- The API's tool-name rule ^[a-zA-Z0-9_-]{1,64}$: other characters become _, and a name too
-- long keeps its head and ends with a short hash of the whole so that two long names differ.
function M.tool_name(server, tool)
  local name = "mcp__" .. clean(server) .. "__" .. clean(tool)
  if #name <= 64 then return name end
  local h = 0
  for i = 1, #name do h = (h * 31 + name:byte(i)) % 0xFFFFFF end
  return name:sub(1, 57) .. ("_%06x"):format(h)
end

-- A tools/call result as a tool_result's content: its text blocks joined, images as image
-- blocks, other kinds named; isError → is_error.
function M.content(result)
  local blocks, texts, images = type(result.content) == "table" and result.content or {}, {}, {}
  for _, b in ipairs(blocks) do
    if type(b) == "table" and b.type == "text" and type(b.text) == "string" then
      texts[#texts + 1] = b.text
    elseif type(b) == "table" and b.type == "image" and type(b.data) == "string" and type(b.mimeType) == "string" then
      images[#images + 1] = { type = "image", source = { type = "base64", media_type = b.mimeType, data = b.data } }
    elseif type(b) == "table" then
      texts[#texts + 1] = ("[%s content not shown]"):format(tostring(b.type))
    end
  end
  if #texts == 0 and result.structuredContent ~= nil then texts[1] = json.encode(result.structuredContent) end
  local text = #texts > 0 and table.concat(texts, "\n") or "(no output)"
  local is_error = result.isError == true
  if #images == 0 then return text, is_error end
  images[#images + 1] = { type = "text", text = text }
  return images, is_error
end

return M

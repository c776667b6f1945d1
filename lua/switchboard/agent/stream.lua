-- The Messages API's streamed answer, event by event (Anthropic's "Streaming Messages" docs):
-- the SSE events core.sse yields become one assistant message.
--
--   message_start        {message = {id, model, usage = {input_tokens, …}}}
--   content_block_start  {index, content_block = {type = "text" | "tool_use" | "thinking" |
--                                                 "redacted_thinking" | …}}
--   content_block_delta  {index, delta = {type = "text_delta", text} |
--                                         {type = "input_json_delta", partial_json} |
--                                         {type = "thinking_delta", thinking} |
--                                         {type = "signature_delta", signature}}
--   content_block_stop   {index}          a tool_use's concatenated partial_json is decoded here
--   message_delta        {delta = {stop_reason, stop_sequence}, usage = {output_tokens}}
--   message_stop         the message is complete
--   ping                 nothing
--   error                {error = {type, message}} — the stream failed on the server's side
-- Unknown events, block types and delta types are skipped; so are deltas for a block that
-- never started. Thinking blocks are kept exactly as they came (thinking text and signature;
-- a redacted_thinking block's data): the API requires them back unchanged in a tool loop.
-- A tool_use whose input JSON did not complete (max_tokens cut it) carries input_error.
-- usage holds the API's own figures: input_tokens (fresh input), cache_read_input_tokens,
-- cache_creation_input_tokens, output_tokens.
--
--   local s = stream.new{on_progress = function(kind, s, block) end}
--     kind: "usage" | "block" | "text" | "thinking"
--   local err = s:event(type, data)     -- nil, or core.error("bad_event", message)
--   s.done, s.error, s:message()        -- message = {id, content, stop_reason, usage}
local core = require("switchboard.core")

local M = {}
local S = {}
S.__index = S

function M.new(opts)
  local on_progress = opts and opts.on_progress or function() end
  return setmetatable({
    blocks = {},          -- index (0-based from the API) + 1 → block
    json_parts = {},      -- index + 1 → list of partial_json fragments
    closed = {},          -- index + 1 → true once a tool_use's content_block_stop came
    usage = { input_tokens = 0, output_tokens = 0, cache_read_input_tokens = 0, cache_creation_input_tokens = 0 },
    done = false,
    error = nil,          -- {type, message} of an error event
    events = 0,
    on_progress = on_progress,
  }, S)
end

local function num(v) return type(v) == "number" and v or 0 end

local function take_usage(self, u)
  if type(u) ~= "table" then return end
  for _, k in ipairs({ "input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens" }) do
    if u[k] ~= nil then self.usage[k] = num(u[k]) end
  end
  self.on_progress("usage", self)
end

local function slot(doc)
  local i = doc.index
  if type(i) ~= "number" or i ~= math.floor(i) or i < 0 or i > 10000 then return nil end
  return math.tointeger(i) + 1
end

local H = {}

function H.message_start(self, doc)
  local m = doc.message
  if type(m) ~= "table" then return "message_start without a message" end
  self.id, self.model = m.id, m.model
  take_usage(self, m.usage)
end

function H.content_block_start(self, doc)
  local i, b = slot(doc), doc.content_block
  if not i or type(b) ~= "table" then return "content_block_start without an index or a block" end
  if b.type == "text" then
    self.blocks[i] = { type = "text", text = type(b.text) == "string" and b.text or "" }
  elseif b.type == "tool_use" then
    if type(b.id) ~= "string" or type(b.name) ~= "string" then return "a tool_use block without an id or a name" end
    self.blocks[i] = { type = "tool_use", id = b.id, name = b.name, input = {} }
    self.json_parts[i] = {}
  elseif b.type == "thinking" then
    self.blocks[i] = { type = "thinking", thinking = type(b.thinking) == "string" and b.thinking or "",
                       signature = type(b.signature) == "string" and b.signature or "" }
  elseif b.type == "redacted_thinking" then
    if type(b.data) ~= "string" then return "a redacted_thinking block without its data" end
    self.blocks[i] = { type = "redacted_thinking", data = b.data }
  else
    self.blocks[i] = false -- a type this client does not know: skipped
  end
  self.on_progress("block", self, self.blocks[i])
end

function H.content_block_delta(self, doc)
  local i, d = slot(doc), doc.delta
  if not i or type(d) ~= "table" then return "content_block_delta without an index or a delta" end
  local b = self.blocks[i]
  if not b then return end
  if d.type == "text_delta" and b.type == "text" and type(d.text) == "string" then
    b.text = b.text .. d.text
    self.on_progress("text", self, b)
  elseif d.type == "input_json_delta" and b.type == "tool_use" and type(d.partial_json) == "string" then
    local parts = self.json_parts[i] or {} -- after its stop, a delta has nowhere to go
    parts[#parts + 1] = d.partial_json
  elseif d.type == "thinking_delta" and b.type == "thinking" and type(d.thinking) == "string" then
    b.thinking = b.thinking .. d.thinking
    self.on_progress("thinking", self, b)
  elseif d.type == "signature_delta" and b.type == "thinking" and type(d.signature) == "string" then
    b.signature = b.signature .. d.signature
  end
end

function H.content_block_stop(self, doc)
  local i = slot(doc)
  if not i then return "content_block_stop without an index" end
  local b = self.blocks[i]
  -- a second stop for a closed call is ignored (its arguments were read at the first)
  if not b or b.type ~= "tool_use" or not self.json_parts[i] then return end
  local raw = table.concat(self.json_parts[i])
  self.json_parts[i] = nil
  self.closed[i] = true
  if raw:match("^%s*$") then return end -- a tool called without arguments
  local input = core.json.decode(raw)
  if type(input) == "table" then
    b.input = input
  else
    b.input_error = "its input is not a JSON object"
  end
end

function H.message_delta(self, doc)
  local d = doc.delta
  if type(d) == "table" then
    if type(d.stop_reason) == "string" then self.stop_reason = d.stop_reason end
  end
  take_usage(self, doc.usage)
end

function H.message_stop(self)
  self.done = true
end

function H.ping() end

function H.error(self, doc)
  local e = type(doc.error) == "table" and doc.error or {}
  self.error = {
    type = type(e.type) == "string" and e.type or "error",
    message = type(e.message) == "string" and e.message or "(no message)",
  }
end

-- One SSE event. Returns nil, or an error naming what could not be read.
function S:event(type_, data)
  self.events = self.events + 1
  local h = H[type_]
  if h == nil then return nil end -- unknown events are skipped
  local doc = core.json.decode(data)
  if type(doc) ~= "table" then
    return core.error("bad_event", ("the %s event's data is not a JSON object"):format(type_))
  end
  local why = h(self, doc)
  if why then return core.error("bad_event", why) end
  return nil
end

-- The assembled message: blocks of known types, in order. A tool_use that never reached its
-- content_block_stop (the stream ended inside it) is marked cut like one whose JSON is short.
function S:message()
  local content = {}
  local max = 0
  for i in pairs(self.blocks) do if i > max then max = i end end
  for i = 1, max do
    local b = self.blocks[i]
    if b then
      if b.type == "tool_use" and not self.closed[i] and not b.input_error then
        b.input_error = "its input was not complete"
      end
      content[#content + 1] = b
    end
  end
  return { id = self.id, content = content, stop_reason = self.stop_reason, usage = self.usage }
end

return M

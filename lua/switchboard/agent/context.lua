-- The conversation of a run within the model's window (policies/agents.lua context, models):
-- how big the next request is, and how to make it smaller.
--
-- Size comes from the API's own figures: the last answer's usage (fresh + cache read + cache
-- written input, + output) is what the conversation weighed then; what was added since (tool
-- results) is counted at 1 token per 4 bytes until the next answer says. Compaction has two
-- steps, cheapest first:
--   elide      tool results older than the latest keep_tool_results are replaced by one line
--              saying what they were and how to get them again
--   summarise  the model writes a summary of the conversation (one extra request, the
--              summary prompt of policy); the conversation becomes the ask with that summary,
--              then the latest keep_turns exchanges as they were
--
--   local conv = context.new(messages, fixed_tokens)   fixed: the system prompt and tools
--   conv:answered(usage)           after an answer: the API's figures of that request
--   conv:add(message)              a message appended (its bytes count until the next answer)
--   conv:estimate() → tokens       the next request's size
--   conv:elide(keep, describe) → n results elided, bytes freed
--   conv:restart(first_text, keep_turns) → exchanges kept
--   context.with_breakpoints(messages) → a copy whose latest two user messages carry cache_control
local json = require("switchboard.core").json

local M = {}
local Conv = {}
Conv.__index = Conv

M.BYTES_PER_TOKEN = 4

local function bytes_of(v)
  if type(v) == "string" then return #v end
  return #json.encode(v)
end

function M.new(messages, fixed_tokens)
  local c = setmetatable({ messages = messages, fixed_tokens = fixed_tokens or 0, added_bytes = 0 }, Conv)
  c.base_tokens = c.fixed_tokens
  for _, m in ipairs(messages) do c.added_bytes = c.added_bytes + bytes_of(m.content) end
  return c
end

function Conv:answered(usage)
  self.base_tokens = (usage.input_tokens or 0) + (usage.cache_read_input_tokens or 0)
    + (usage.cache_creation_input_tokens or 0) + (usage.output_tokens or 0)
  self.added_bytes = 0
end

function Conv:add(message)
  self.messages[#self.messages + 1] = message
  if message.role == "user" then self.added_bytes = self.added_bytes + bytes_of(message.content) end
end

-- Blocks added at the end of the last message, a user message (a message of the thread that
-- came in while the run worked goes after the tool results: roles still alternate).
function Conv:append_to_last(blocks)
  local last = self.messages[#self.messages]
  local content = type(last.content) == "string" and { { type = "text", text = last.content } } or {}
  if type(last.content) == "table" then for i, b in ipairs(last.content) do content[i] = b end end
  for _, b in ipairs(blocks) do content[#content + 1] = b end
  self.messages[#self.messages] = { role = last.role, content = content }
  self.added_bytes = self.added_bytes + bytes_of(blocks)
end

function Conv:estimate()
  return self.base_tokens + self.added_bytes // M.BYTES_PER_TOKEN
end

-- A result already elided, or too small to be worth it, is left alone.
local ELIDED = "[elided to keep the conversation within the model's window"
local MIN_BYTES = 400

-- The tool_use a tool_result answers: in the assistant message just before its own.
local function use_of(messages, i, id)
  local prev = messages[i - 1]
  if prev and type(prev.content) == "table" then
    for _, b in ipairs(prev.content) do
      if b.type == "tool_use" and b.id == id then return b end
    end
  end
  return nil
end

-- The API's own count, when it said the prompt is too long ("prompt is too long: N tokens >
-- M maximum"): what the conversation weighs now, in place of the estimate.
function Conv:too_long(message)
  local n = tostring(message or ""):match("(%d+) tokens > %d+")
  if n then self.base_tokens, self.added_bytes = tonumber(n), 0 end
  return n ~= nil
end

-- The bytes the messages take in a request (the conversation's real size, for the record).
function Conv:bytes()
  return #json.encode(self.messages)
end

-- Elides tool results older than the latest `keep`; the results of the newest message when
-- it is the user's (the model has not seen them yet) are never elided. describe(use, id) →
-- "the result of …; how to get it again". Returns how many were elided and the bytes freed.
function Conv:elide(keep, describe)
  local seen, n, freed = 0, 0, 0
  for i = #self.messages, 1, -1 do
    local m = self.messages[i]
    local unseen = i == #self.messages and m.role == "user"
    if m.role == "user" and type(m.content) == "table" then
      local copy -- the message is replaced, never changed in place: the thread's record tells
                 -- a rewritten conversation from an appended one by the message tables
      for j = #m.content, 1, -1 do
        local b = m.content[j]
        if b.type == "tool_result" then
          seen = seen + 1
          local size = bytes_of(b.content)
          local done = type(b.content) == "string" and b.content:sub(1, #ELIDED) == ELIDED
          if seen > keep and not done and not unseen and size >= MIN_BYTES then
            local line = ("%s: %s (%d bytes).]"):format(ELIDED, describe(use_of(self.messages, i, b.tool_use_id), b), size)
            copy = copy or { table.unpack(m.content) }
            copy[j] = { type = "tool_result", tool_use_id = b.tool_use_id, is_error = b.is_error, content = line }
            n, freed = n + 1, freed + size - #line
          end
        end
      end
      if copy then self.messages[i] = { role = m.role, content = copy } end
    end
  end
  -- the freed bytes were in the last answer's figures, or in what was added since
  local from_added = math.min(self.added_bytes, freed)
  self.added_bytes = self.added_bytes - from_added
  self.base_tokens = math.max(0, self.base_tokens - (freed - from_added) // M.BYTES_PER_TOKEN)
  return n, freed
end

-- The index of the assistant message that starts the latest `keep_turns` exchanges, or nil.
local function tail_start(messages, keep_turns)
  if keep_turns <= 0 then return nil end
  local found = 0
  for i = #messages, 1, -1 do
    if messages[i].role == "assistant" then
      found = found + 1
      if found == keep_turns then return i end
    end
  end
  return nil
end

-- The conversation after a summary: one user message (the ask and the summary), then the
-- latest exchanges as they were. The size is unknown until the next answer: counted by bytes,
-- with the system prompt and tools.
function Conv:restart(first_text, keep_turns)
  local k = tail_start(self.messages, keep_turns)
  local out = { { role = "user", content = { { type = "text", text = first_text } } } }
  if k then
    for i = k, #self.messages do out[#out + 1] = self.messages[i] end
  end
  local kept = #out - 1
  self.messages = out
  self.base_tokens, self.added_bytes = self.fixed_tokens, 0
  for _, m in ipairs(out) do self.added_bytes = self.added_bytes + bytes_of(m.content) end
  return kept
end

local CACHE = { type = "ephemeral" }

-- A copy of a non-empty list whose last item (copied too) carries a cache breakpoint; the
-- list and its items are not changed (the tools' list, a message's blocks).
function M.mark_last(list)
  local copy = {}
  for i, item in ipairs(list) do copy[i] = item end
  local last = {}
  for k, v in pairs(copy[#copy]) do last[k] = v end
  last.cache_control = CACHE
  copy[#copy] = last
  return copy
end

local function marked(message)
  local content = message.content
  if type(content) == "string" then
    return { role = message.role, content = { { type = "text", text = content, cache_control = CACHE } } }
  end
  return { role = message.role, content = M.mark_last(content) }
end

-- The messages as a request sends them: the latest two user messages carry a cache
-- breakpoint (the newest writes the prefix up to it; the one before reads what the previous
-- request wrote), the stored conversation is not changed. With the system prompt's and the
-- tools' breakpoints that makes the API's limit of 4.
function M.with_breakpoints(messages)
  local out, marks = {}, 0
  for i = #messages, 1, -1 do
    local m = messages[i]
    if marks < 2 and m.role == "user" and (type(m.content) == "string" and m.content ~= "" or
        type(m.content) == "table" and #m.content > 0) then
      out[i] = marked(m)
      marks = marks + 1
    else
      out[i] = m
    end
  end
  return out
end

return M

-- An OpenAI-compatible Chat Completions endpoint as the model (vLLM, Ollama, OpenRouter, …):
-- POST {base}/chat/completions with `stream: true`, `Authorization: Bearer KEY` when a key is
-- set (a local vLLM or Ollama needs none). The run keeps speaking the Messages API; this module
-- maps both ways (docs/agent.md "Model providers"):
--
--   request   system (string or text blocks)   → a first {role = "system"} message
--             user text / image blocks          → {role = "user", content = text | parts}
--             assistant text + tool_use blocks  → {role = "assistant", content, tool_calls =
--                                                  [{id, type = "function", function = {name,
--                                                  arguments = JSON text}}]}
--             tool_result blocks                → one {role = "tool", tool_call_id, content}
--                                                  each (text; an image is named, not sent)
--             tools [{name, description, input_schema}] → [{type = "function", function =
--                                                  {name, description, parameters}}]
--             thinking blocks and cache_control are Anthropic's only: left out
--   answer    chat.completion.chunk SSE events (data: {choices = [{delta, finish_reason}],
--             usage}) until `data: [DONE]`, assembled as the Messages API's events: content
--             → a text block, each tool_calls[index] → a tool_use block whose arguments
--             arrive as input_json_delta, finish_reason stop | tool_calls | length →
--             end_turn | tool_use | max_tokens, usage prompt_tokens (less cached_tokens) /
--             completion_tokens → input_tokens / output_tokens
local core = require("switchboard.core")
local json = core.json
local anthropic = require("switchboard.agent.providers.anthropic")

local M = {}
local P = {}
P.__index = P

local FIX = {
  [400] = "the endpoint refused the request as invalid (400 %s: %s) — check the agent's model in policies/agents.lua (the name the endpoint serves)",
  [401] = "the endpoint rejected the API key (401 %s: %s) — check the variable policies/agents.lua providers names as api_key_env, and restart switchboard",
  [403] = "the key may not use this model (403 %s: %s) — choose another model in policies/agents.lua",
  [404] = "the model or the endpoint does not exist (404 %s: %s) — check the agent's model and the provider's base URL in policies/agents.lua",
}

-- opts: base_url (…/v1), api_key (optional)
function M.new(opts)
  local key = opts.api_key ~= "" and opts.api_key or nil
  return setmetatable({ url = opts.base_url:gsub("/+$", "") .. "/chat/completions", key = key,
    keys = { key }, fix = FIX }, P)
end

local function text_of(blocks)
  if type(blocks) == "string" then return blocks end
  local out = {}
  for _, b in ipairs(type(blocks) == "table" and blocks or {}) do
    if b.type == "text" and type(b.text) == "string" then out[#out + 1] = b.text
    elseif b.type == "image" then out[#out + 1] = "[an image: this endpoint is sent text only]" end
  end
  return table.concat(out, "\n")
end

local function user_parts(blocks)
  local parts, plain = {}, true
  for _, b in ipairs(blocks) do
    if b.type == "text" then
      parts[#parts + 1] = { type = "text", text = b.text }
    elseif b.type == "image" and type(b.source) == "table" and b.source.type == "base64" then
      plain = false
      parts[#parts + 1] = { type = "image_url",
        image_url = { url = ("data:%s;base64,%s"):format(b.source.media_type, b.source.data) } }
    end
  end
  if plain then return text_of(blocks) end
  return parts
end

local function assistant(blocks)
  local msg, texts, calls = { role = "assistant" }, {}, {}
  for _, b in ipairs(blocks) do
    if b.type == "text" then texts[#texts + 1] = b.text
    elseif b.type == "tool_use" then
      local args = json.encode(b.input or {})
      if args == "[]" or args == "{}" then args = "{}" end
      calls[#calls + 1] = { id = b.id, type = "function", ["function"] = { name = b.name, arguments = args } }
    end
  end
  msg.content = #texts > 0 and table.concat(texts, "\n") or json.null
  if #calls > 0 then msg.tool_calls = calls end
  return msg
end

-- The Messages API body → the Chat Completions body.
function M.request_body(body)
  local messages = {}
  local system = text_of(body.system)
  if system ~= "" then messages[1] = { role = "system", content = system } end
  for _, m in ipairs(body.messages or {}) do
    if type(m.content) == "string" then
      messages[#messages + 1] = { role = m.role, content = m.content }
    elseif m.role == "assistant" then
      messages[#messages + 1] = assistant(m.content)
    else
      local rest = {}
      for _, b in ipairs(m.content) do
        if b.type == "tool_result" then
          local content = text_of(b.content)
          if b.is_error then content = "error: " .. content end
          messages[#messages + 1] = { role = "tool", tool_call_id = b.tool_use_id, content = content }
        else
          rest[#rest + 1] = b
        end
      end
      if #rest > 0 then messages[#messages + 1] = { role = "user", content = user_parts(rest) } end
    end
  end
  local out = { model = body.model, max_tokens = body.max_tokens, stream = true,
    stream_options = { include_usage = true }, messages = messages }
  if body.tools and #body.tools > 0 then
    local tools = {}
    for i, t in ipairs(body.tools) do
      tools[i] = { type = "function", ["function"] = { name = t.name, description = t.description,
        parameters = t.input_schema } }
    end
    out.tools = tools
  end
  return out
end

function P:encode(body) return json.encode(M.request_body(body)) end

function P:request()
  local headers = { ["content-type"] = "application/json", accept = "text/event-stream" }
  if self.key then headers.authorization = "Bearer " .. self.key end
  return self.url, headers
end

local STOP = { stop = "end_turn", tool_calls = "tool_use", function_call = "tool_use", length = "max_tokens",
  content_filter = "refusal" }

-- The Chat Completions chunks → the Messages API's events, fed to emit(type, doc) in order.
-- Returns feed(doc) → why | nil, and done() (at `[DONE]`).
function M.translator(emit)
  local started, next_index, text_at, calls, order, stop, usage = false, 0, nil, {}, {}, nil, {}
  local function start(doc)
    if started then return end
    started = true
    emit("message_start", { message = { id = type(doc.id) == "string" and doc.id or "chatcmpl",
      model = doc.model, usage = { input_tokens = 0, output_tokens = 0 } } })
  end
  local function close_text()
    if text_at then emit("content_block_stop", { index = text_at }); text_at = nil end
  end
  local function feed(doc)
    if type(doc) ~= "table" then return "a chunk that is not a JSON object" end
    if type(doc.error) == "table" then
      emit("error", { error = { type = tostring(doc.error.type or doc.error.code or "error"),
        message = tostring(doc.error.message or "(no message)") } })
      return
    end
    start(doc)
    if type(doc.usage) == "table" then
      local cached = type(doc.usage.prompt_tokens_details) == "table" and doc.usage.prompt_tokens_details.cached_tokens
      cached = type(cached) == "number" and cached or 0
      local prompt = type(doc.usage.prompt_tokens) == "number" and doc.usage.prompt_tokens or 0
      usage = { input_tokens = math.max(0, prompt - cached), cache_read_input_tokens = cached,
        output_tokens = type(doc.usage.completion_tokens) == "number" and doc.usage.completion_tokens or 0 }
    end
    local choice = type(doc.choices) == "table" and doc.choices[1]
    if type(choice) ~= "table" then return end
    local delta = type(choice.delta) == "table" and choice.delta or {}
    if type(delta.content) == "string" and delta.content ~= "" then
      if not text_at then
        text_at = next_index
        next_index = next_index + 1
        emit("content_block_start", { index = text_at, content_block = { type = "text", text = "" } })
      end
      emit("content_block_delta", { index = text_at, delta = { type = "text_delta", text = delta.content } })
    end
    for _, c in ipairs(type(delta.tool_calls) == "table" and delta.tool_calls or {}) do
      if type(c) ~= "table" then return "a tool_calls entry that is not an object" end
      -- a call's deltas name it by index (decoded JSON numbers are floats); a server that
      -- sends none streams one call at a time
      local k = type(c.index) == "number" and math.tointeger(c.index) or #order
      local fn = type(c["function"]) == "table" and c["function"] or {}
      local call = calls[k]
      if not call then
        if type(fn.name) ~= "string" or fn.name == "" then return "a tool call that starts without a function name" end
        close_text()
        call = { index = next_index }
        next_index = next_index + 1
        calls[k] = call
        order[#order + 1] = call
        local id = type(c.id) == "string" and c.id ~= "" and c.id or ("call_" .. call.index)
        emit("content_block_start", { index = call.index, content_block = { type = "tool_use", id = id, name = fn.name } })
      end
      if type(fn.arguments) == "string" and fn.arguments ~= "" then
        emit("content_block_delta", { index = call.index, delta = { type = "input_json_delta", partial_json = fn.arguments } })
      end
    end
    if type(choice.finish_reason) == "string" then stop = STOP[choice.finish_reason] or "end_turn" end
  end
  local function done()
    start({})
    close_text()
    for _, call in ipairs(order) do emit("content_block_stop", { index = call.index }) end
    order = {}
    emit("message_delta", { delta = { stop_reason = stop or "end_turn" }, usage = usage })
    emit("message_stop", {})
  end
  return feed, done
end

function P:decoder(asm, max_event_bytes)
  local parser = core.sse.parser(max_event_bytes)
  local failed
  local feed, done = M.translator(function(type_, doc)
    failed = failed or asm:event(type_, json.encode(doc))
  end)
  return function(bytes)
    if bytes == nil then return nil end
    local events, err = parser:feed(bytes)
    if not events then return core.error("bad_event", err.message) end
    for i = 1, #events, 2 do
      local data = events[i + 1]
      if data == "[DONE]" then
        done()
      else
        local doc = json.decode(data)
        local why = feed(doc)
        if why then return core.error("bad_event", why) end
      end
      if failed then return failed end
    end
  end
end

-- {"error": {"message", "type"}} (OpenAI, vLLM), or {"error": "text"} (Ollama).
function P:api_error(body)
  local doc = json.decode(body or "")
  if type(doc) == "table" and type(doc.error) == "string" then return "error", doc.error:sub(1, 500) end
  return anthropic.api_error(body)
end

return M

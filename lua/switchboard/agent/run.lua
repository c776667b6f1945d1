-- The agent run: turns of the model (agent/client.lua) and the tools it calls (agent/tools.lua)
-- on the thread's executor stack, until the model answers without a tool call, or the run
-- must end:
--
--   done         the model answered (end_turn, or any stop without a tool call)
--   stopped      the hard stop fired (a `stop` in the thread, a shutdown): the model stream is
--                dropped and the running command killed at once
--   infra        the executor's transport failed health.max_consecutive_infra_failures times
--                in a row: the run stops at once, naming the sandbox failure (fail fast)
--   budget       the run's wall clock (the agent's max_run_minutes) ran out
--   turns        max_turns model turns were used
--   model_error  the model API refused the request (what to fix), or kept failing
--
-- Every tool_use of an answer gets exactly one tool_result, in order, in the next request:
-- when the run ends part-way through an answer's calls, the rest are recorded as not run.
--
--   local state, answer, problem, result = run.run{snap, def, agent, executor, tracker, client,
--     card, signal, deadline_ms, ask, repo, workspace, transcript, now_ms, instructions?,
--     history?, on_turn?}
--   instructions: agent/instructions.lua's read, appended to the system prompt
--   history: the thread's earlier conversation (Messages API messages as sent before); the ask
--     is appended to it as the next user turn (merged into a trailing user message, which a
--     run cut short after its tool results leaves)
--   on_turn(messages): called after each turn's messages are complete (the answer, its tool
--     results), before the next request, so the caller can persist what it acknowledged
--   result: {messages = the conversation as last sent plus the final answer, tokens_in,
--     tokens_out}
local core = require("switchboard.core")
local template = require("switchboard.policy.template")
local tools = require("switchboard.agent.tools")
local instructions = require("switchboard.agent.instructions")

local M = {}

function M.system_prompt(snap, def, o)
  local names = {}
  for _, t in ipairs(tools.definitions(snap, def)) do names[#names + 1] = t.name end
  return template.fill(def.system_prompt, {
    agent = def.name or o.agent,
    repository = o.repo or "no repository (the workspace starts empty)",
    workspace = o.workspace or "the current directory of each command",
    tools = #names > 0 and table.concat(names, ", ") or "no tools",
  })
end

-- The request body of a turn (the client adds stream = true).
function M.body(o, messages)
  local b = {
    model = o.def.model,
    max_tokens = o.def.max_tokens,
    system = o.system,
    messages = messages,
  }
  if #o.tools > 0 then b.tools = o.tools end
  return b
end

-- The answer's blocks as the next request carries them back, its text, and its tool calls.
function M.split(message)
  local content, texts, uses = {}, {}, {}
  for _, b in ipairs(message.content) do
    if b.type == "text" and b.text ~= "" then
      content[#content + 1] = { type = "text", text = b.text }
      texts[#texts + 1] = b.text
    elseif b.type == "tool_use" then
      content[#content + 1] = { type = "tool_use", id = b.id, name = b.name, input = b.input or {} }
      uses[#uses + 1] = b
    end
  end
  return content, table.concat(texts, "\n\n"), uses
end

local function continuation(text, i)
  local b = text:byte(i)
  return b ~= nil and b >= 0x80 and b < 0xC0
end

-- A tool result longer than model_api.max_tool_result_bytes keeps its head (a third) and its
-- tail (errors are usually at the end), cut on UTF-8 boundaries, around one marker line.
function M.cap(snap, text)
  local max = snap.agents.model_api.max_tool_result_bytes
  if #text <= max then return text end
  local head = max // 3
  while head > 0 and continuation(text, head + 1) do head = head - 1 end
  local tail = #text - (max - head - 120) + 1
  while continuation(text, tail) do tail = tail + 1 end
  return ("%s\n… [%d bytes cut here: the result is longer than %d bytes; narrow the command (head, tail, grep)] …\n%s")
    :format(text:sub(1, head), tail - head - 1, max, text:sub(tail))
end
local cap = M.cap

-- Runs the answer's tool calls in order. Returns the tool_result blocks and, when the run must
-- end here, "stopped" | "infra" with the infra failure's text.
function M.call_tools(o, uses, turn)
  local results, ending, why = {}, nil, nil
  for _, use in ipairs(uses) do
    local block
    if ending then
      block = { type = "tool_result", tool_use_id = use.id, is_error = true,
                content = "not run: the run ended before this call (" .. ending .. ")" }
    else
      o.card:tool(tools.describe(use))
      local t0 = o.now_ms()
      local out = tools.call(o.executor, o.snap, o.def, use, {
        signal = o.signal, remaining_ms = o.deadline_ms - o.now_ms(),
      })
      o.card:tool_done()
      if out.kind == "capacity" then
        o.card:add_note(("⏳ turn %d: the sandbox fleet was busy; the model was told to retry"):format(turn))
      end
      block = { type = "tool_result", tool_use_id = use.id, content = cap(o.snap, out.content),
                is_error = out.is_error or nil }
      o.transcript:write{ type = "tool_result", turn = turn, id = use.id, name = use.name, input = use.input, kind = out.kind,
                          is_error = out.is_error, duration_ms = o.now_ms() - t0, content = block.content }
      if o.signal.aborted then
        ending = "stopped"
      elseif out.kind == "infra" and o.tracker:tripped() then
        ending, why = "infra", out.content
      end
    end
    results[#results + 1] = block
  end
  return results, ending, why
end

local function progress(o, base_in, base_out)
  return function(kind, s)
    if kind == "usage" then o.card:usage(base_in + s.usage.input_tokens, base_out + s.usage.output_tokens) end
  end
end

-- The history plus the ask as the next user turn. A history that ends with a user message
-- (tool results of a run that ended there) gets the ask as a text block after them, so roles
-- still alternate.
function M.start_messages(history, ask)
  local messages = {}
  for i, m in ipairs(history or {}) do messages[i] = m end
  local ask_content = type(ask) == "table" and ask or { { type = "text", text = ask } }
  local last = messages[#messages]
  if last and last.role == "user" then
    local content = type(last.content) == "string" and { { type = "text", text = last.content } } or {}
    if type(last.content) == "table" then for i, b in ipairs(last.content) do content[i] = b end end
    for _, b in ipairs(ask_content) do content[#content + 1] = b end
    messages[#messages] = { role = "user", content = content }
  elseif type(ask) == "table" then
    messages[#messages + 1] = { role = "user", content = ask_content }
  else
    messages[#messages + 1] = { role = "user", content = ask }
  end
  return messages
end

function M.run(o)
  o.now_ms = o.now_ms or core.now_ms
  o.tools = tools.definitions(o.snap, o.def)
  o.system = instructions.append(M.system_prompt(o.snap, o.def, o), o.instructions)
  local messages = M.start_messages(o.history, o.ask)
  if o.on_turn then o.on_turn(messages) end -- the ask itself is kept before the first request
  local answer = ""
  local tokens_in, tokens_out = 0, 0
  local function result()
    return { messages = messages, tokens_in = tokens_in, tokens_out = tokens_out }
  end
  o.transcript:write{ type = "run_start", agent = o.agent, model = o.def.model, repo = o.repo,
                      ask = o.ask, system = o.system, tools = o.tools, max_turns = o.def.max_turns }
  for turn = 1, o.def.max_turns do
    if o.signal.aborted then return "stopped", answer, nil, result() end
    if o.now_ms() >= o.deadline_ms then
      return "budget", answer, ("the run's %d minutes (max_run_minutes) are used up"):format(o.def.max_run_minutes), result()
    end
    o.card:turn(turn)
    local t0 = o.now_ms()
    local message, err = o.client:create(M.body(o, messages), {
      signal = o.signal, deadline_ms = o.deadline_ms,
      on_progress = progress(o, tokens_in, tokens_out),
      on_wait = function(ms, why)
        o.card:wait(("model API busy — retrying in %ds (%s)"):format(math.ceil(ms / 1000), why))
      end,
    })
    o.card.waiting = nil
    if not message then
      o.transcript:write{ type = "model_error", turn = turn, kind = err.kind, message = err.message }
      if err.kind == "aborted" then return "stopped", answer, nil, result() end
      if err.kind == "budget" then return "budget", answer, err.message, result() end
      return "model_error", answer, err.message, result()
    end
    tokens_in = tokens_in + message.usage.input_tokens
    tokens_out = tokens_out + message.usage.output_tokens
    o.card:usage(tokens_in, tokens_out)
    local content, text, uses = M.split(message)
    if text ~= "" then answer = text end
    o.transcript:write{ type = "answer", turn = turn, stop_reason = message.stop_reason, usage = message.usage,
                        duration_ms = o.now_ms() - t0, content = content }
    if message.stop_reason == "pause_turn" and #content > 0 then
      messages[#messages + 1] = { role = "assistant", content = content }
    elseif #uses == 0 then
      if message.stop_reason == "max_tokens" then
        answer = answer .. "\n\n[the answer reached max_tokens and was cut]"
      end
      if #content > 0 then messages[#messages + 1] = { role = "assistant", content = content } end
      if o.on_turn then o.on_turn(messages) end
      return "done", answer, nil, result()
    else
      messages[#messages + 1] = { role = "assistant", content = content }
      local results, ending, why = M.call_tools(o, uses, turn)
      messages[#messages + 1] = { role = "user", content = results }
      if o.on_turn then o.on_turn(messages) end
      if ending == "stopped" then return "stopped", answer, nil, result() end
      if ending == "infra" then
        return "infra", answer, ("the executor failed %d times in a row (timeouts health."
          .. "max_consecutive_infra_failures), so the run stopped at once instead of spending "
          .. "turns on a dead sandbox; the next ask provisions a fresh one. Last failure: %s")
          :format(o.tracker.count, why), result()
      end
    end
  end
  return "turns", answer, ("the run used its %d turns (max_turns in policies/agents.lua) without "
    .. "finishing; a follow-up in this thread continues the conversation in the same workspace"):format(o.def.max_turns), result()
end

return M

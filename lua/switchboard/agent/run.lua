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
--   spend        a spend cap (policies/agents.lua spend) was reached: the problem names it
--   context      the conversation no longer fits the model's window and compaction cannot
--                make it fit (the problem says so in words)
--   model_error  the model API refused the request (what to fix), or kept failing
--
-- Every tool_use of an answer gets exactly one tool_result, in order, in the next request:
-- when the run ends part-way through an answer's calls, the rest are recorded as not run.
-- What enters a message is valid UTF-8 and bounded (agent/text.lua); the conversation is kept
-- within the window (agent/context.lua); each answer's cost is booked (agent/spend.lua).
--
--   local state, answer, problem, record = run.run{snap, def, agent, executor, tracker,
--     client, events, signal, deadline_ms, ask, repo, workspace, now_ms,
--     instructions?, history?, on_turn?, thread?, accounts?, now_s?, attach?}
--   events: the run's event stream (dispatch/run_events.lua): what happens is emitted there once
--            — the transcript's lines, and the live ones the card shows (turn, activity, usage,
--            note, …); the run never writes a card or a transcript itself
--   attach(image, tool_use_id): a screenshot taken (agent/screenshot.lua), for the page and thread
--   ask: text, or content blocks (a Slack ask's text and images)
--   on_turn(messages): called after each turn's messages are complete (the answer, its tool
--            results), before the next request, so the caller can persist them (the thread's
--            record); after a compaction the list is the compacted one
--   instructions: agent/instructions.lua's read, appended to the system prompt
--   facts: agent/facts.lua's gather: the workspace's (sandbox, repository) after the agent's
--            system prompt through policy's environment.prompt, the run's (date, branch, git
--            status) opening the new user turn through environment.turn — so the system
--            prompt and tools are byte-identical across a thread's runs (the prompt cache)
--   before_tools(): called before an answer's tool calls run: waits for what the workspace still
--            prepares beside the first request (dispatch/agent_run.lua: a warm thread's fetch)
--   history: the thread's earlier conversation (Messages API messages as sent before); the
--            ask follows it
--   inbox(): → the thread's messages that came in while the run works ({user, text}), taken;
--            read at each turn boundary and put after the tool results (or the ask) as text
--   thread, accounts: the thread's name and the spend totals (agent/spend.lua; default: the
--            shared in-memory ones)
--   record = {messages (the conversation as last sent, after any compaction, and the final
--            answer), usage =
--            {input_tokens, output_tokens, cache_read_input_tokens,
--            cache_creation_input_tokens}, cost_usd (cost: the same), tokens_in, tokens_out,
--            compactions, turns}
local core = require("switchboard.core")
local template = require("switchboard.policy.template")
local tools = require("switchboard.agent.tools")
local instructions = require("switchboard.agent.instructions")
local text = require("switchboard.agent.text")
local context = require("switchboard.agent.context")
local spend = require("switchboard.agent.spend")
local facts = require("switchboard.agent.facts")

local M = {}

function M.system_prompt(snap, def, o)
  local names = {}
  for _, t in ipairs(tools.definitions(snap, def)) do names[#names + 1] = t.name end
  return template.fill(def.system_prompt, {
    agent = def.name or o.agent,
    repository = o.repo or "no repository (the workspace starts empty)",
    -- not the path (a thread's own under the local backend): the system prompt stays the
    -- same across threads; the path opens each ask with the run's facts
    workspace = "the thread's workspace",
    tools = #names > 0 and table.concat(names, ", ") or "no tools",
  })
end

local CACHE = { type = "ephemeral" }

-- The ask as text (the summary's opening).
local function ask_text(ask)
  if type(ask) ~= "table" then return ask end
  local out = {}
  for _, b in ipairs(ask) do if b.type == "text" then out[#out + 1] = b.text end end
  return table.concat(out, "\n")
end

-- The tools as a request sends them: the last one carries a cache breakpoint (the prefix of
-- every request: tools, then the system prompt).
local function cached_tools(list)
  if #list == 0 then return list end
  return context.mark_last(list)
end

-- The request body of a turn (the client adds stream = true).
function M.body(o, messages, max_tokens)
  local b = {
    model = o.def.model,
    max_tokens = max_tokens or o.max_tokens or o.def.max_tokens,
    system = { { type = "text", text = o.system, cache_control = CACHE } },
    messages = context.with_breakpoints(messages),
  }
  if o.def.thinking then b.thinking = { type = "enabled", budget_tokens = o.def.thinking.budget_tokens } end
  if #o.tools > 0 then b.tools = o.cached_tools or cached_tools(o.tools) end
  return b
end

-- The answer's blocks as the next request carries them back, its text, and its tool calls.
-- Thinking blocks go back exactly as they came (the API checks their signatures).
function M.split(message)
  local content, texts, uses = {}, {}, {}
  for _, b in ipairs(message.content) do
    if b.type == "text" and b.text ~= "" then
      content[#content + 1] = { type = "text", text = b.text }
      texts[#texts + 1] = b.text
    elseif b.type == "tool_use" then
      content[#content + 1] = { type = "tool_use", id = b.id, name = b.name, input = b.input or {} }
      uses[#uses + 1] = b
    elseif b.type == "thinking" then
      content[#content + 1] = { type = "thinking", thinking = b.thinking, signature = b.signature }
    elseif b.type == "redacted_thinking" then
      content[#content + 1] = { type = "redacted_thinking", data = b.data }
    end
  end
  return content, table.concat(texts, "\n\n"), uses
end

-- Where a long tool result is saved in the workspace: inside .git/ when the run has a
-- repository, so that it is never committed.
function M.saved_path(o, turn, id)
  local dir = o.snap.agents.tool_output.saved_dir
  if o.repo then dir = ".git/" .. dir end
  return ("%s/turn-%d-%s.txt"):format(dir, turn, tostring(id):gsub("[^%w_-]", "_"))
end

-- A tool's content made fit for a message: valid UTF-8, and over tool_output.max_chars its
-- head and tail around a marker, the whole saved in the workspace when it can be.
function M.fit(o, content, turn, id)
  if type(content) ~= "string" then return content end -- an image's blocks
  local t = text.valid(content)
  local policy = o.snap.agents.tool_output
  if text.chars(t) <= policy.max_chars then return t end
  local path = M.saved_path(o, turn, id)
  local ok = o.executor:write_file(path, content, { signal = o.signal, snap = o.snap,
    remaining_ms = o.deadline_ms - o.now_ms() })
  return (text.bound(t, policy.max_chars, policy.head_percent, ok and path or nil))
end

-- A text-only stand-in of a tool_result for the transcript (an image is named, not dumped).
local function loggable(content)
  if type(content) == "string" then return content end
  return "[an image and its caption]"
end

-- One call. quiet: the card already names the batch this call runs in.
local function run_one(o, use, turn, quiet)
  if not quiet then o.events:emit{ type = "activity", text = tools.describe(use) } end
  local t0 = o.now_ms()
  local out = tools.call(o.executor, o.snap, o.def, use, {
    signal = o.signal, remaining_ms = o.deadline_ms - o.now_ms(),
    attach = o.attach and function(image) o.attach(image, use.id) end,
    on_preview = function(url) o.events:emit{ type = "preview", url = url } end, -- the card's Preview button
    on_todos = function(list)
      o.events:emit{ type = "todos", turn = turn, todos = list }
    end,
  })
  if not quiet then o.events:emit{ type = "activity" } end
  if out.kind == "capacity" then
    o.events:emit{ type = "note", text = ("⏳ turn %d: the sandbox fleet was busy; the model was told to retry"):format(turn) }
  end
  local block = { type = "tool_result", tool_use_id = use.id, content = M.fit(o, out.content, turn, use.id),
                  is_error = out.is_error or nil }
  o.described[use.id] = tools.describe(use)
  o.events:emit{ type = "tool_result", turn = turn, id = use.id, name = use.name, input = use.input, kind = out.kind,
                      is_error = out.is_error, started_ms = t0, duration_ms = o.now_ms() - t0, content = loggable(block.content) }
  if not out.is_error and tools.TOUCHES_FILE[use.name] and type(use.input) == "table" then
    o.touched[#o.touched + 1] = use.input.path
  end
  return block, out
end

-- Calls that only read, run at the same time, each in a task of its own; their results in
-- the calls' order.
local function run_together(o, batch, turn)
  local names = {}
  for i, use in ipairs(batch) do names[i] = tools.describe(use) end
  o.events:emit{ type = "activity", text = ("%d reads at once: %s"):format(#batch, table.concat(names, ", ")) }
  local tasks, blocks, outs = {}, {}, {}
  for i, use in ipairs(batch) do tasks[i] = core.go(run_one, o, use, turn, true) end
  local raised -- a call's raise (a bug), with the traceback of the task it was raised in
  for i, task in ipairs(tasks) do
    local ok, block, out = core.join(task)
    if ok then blocks[i], outs[i] = block, out else raised = raised or block end
  end
  -- not caught here: it goes on up to the run's one catch (dispatch/dispatcher.lua), in the
  -- run's own task, once every call of the batch has ended
  if raised then error(raised, 0) end
  o.events:emit{ type = "activity" }
  return blocks, outs
end

-- The answer's calls as groups that run one after another: consecutive calls that only read
-- form one group (run at the same time); every other call is a group of its own.
local function groups(o, uses)
  local out = {}
  for _, use in ipairs(uses) do
    local last = out[#out]
    local reads = tools.READ_ONLY[use.name] and not (use.input_error and o.cut) and tools.offered(o.snap, o.def, use.name)
    if reads and last and last.reads then
      last[#last + 1] = use
    else
      out[#out + 1] = { reads = reads, use }
    end
  end
  return out
end

-- Runs the answer's tool calls: calls that change something in order, consecutive calls that
-- only read at the same time. Returns the tool_result blocks (in the calls' order, then any
-- nested instruction files the calls reached, as text) and, when the run must end here,
-- "stopped" | "infra" with the infra failure's text. A call max_tokens cut short is not run:
-- its result says so.
function M.call_tools(o, uses, turn)
  local results, ending, why = {}, nil, nil
  o.touched = {}
  if o.before_tools then o.before_tools() end -- the workspace still being prepared (a fetch)
  for _, group in ipairs(groups(o, uses)) do
    local blocks, outs = {}, {}
    if ending then
      for i, use in ipairs(group) do
        blocks[i] = { type = "tool_result", tool_use_id = use.id, is_error = true,
                      content = "not run: the run ended before this call (" .. ending .. ")" }
      end
    elseif #group == 1 and group[1].input_error and o.cut then
      blocks[1] = { type = "tool_result", tool_use_id = group[1].id, is_error = true, content = o.cut }
    elseif #group == 1 then
      blocks[1], outs[1] = run_one(o, group[1], turn)
    else
      blocks, outs = run_together(o, group, turn)
    end
    for i = 1, #group do
      results[#results + 1] = blocks[i]
      local out = outs[i]
      if out and not ending then
        if o.signal.aborted then
          ending = "stopped"
        elseif out.kind == "infra" and o.tracker:tripped() then
          ending, why = "infra", out.content
        end
      end
    end
  end
  if not ending then M.nested_instructions(o, results) end
  return results, ending, why
end

-- The instruction files (AGENTS.md, CLAUDE.md) of the directories above the files this turn's
-- calls read or changed, each the first time: a text block after the tool results, and the
-- card's note naming them.
function M.nested_instructions(o, results)
  if not o.repo or #o.touched == 0 then return end
  local found = instructions.nested(o.executor, o.snap, o.touched, o.nested, {
    signal = o.signal, remaining_ms = o.deadline_ms - o.now_ms(),
  })
  if #found == 0 then return end
  for _, f in ipairs(found) do
    results[#results + 1] = { type = "text", text = text.valid(instructions.nested_text(f)) }
  end
  o.events:emit{ type = "note", key = "nested_instructions",
                 text = "instructions for subdirectories: " .. table.concat(o.nested.used, ", ") }
  o.events:emit{ type = "instructions", nested = true, files = found }
end

---------------------------------------------------------------------------------------------
-- Usage, cost and the card

local USAGE_KEYS = { "input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens" }

local function show_usage(o, extra)
  local u = o.totals
  local cur = extra or {}
  local function f(k) return u[k] + (cur[k] or 0) end
  o.events:emit{ type = "usage", tokens_in = f("input_tokens"), tokens_out = f("output_tokens"),
    cache_read = f("cache_read_input_tokens"), cache_write = f("cache_creation_input_tokens"),
    cost_usd = o.cost + (extra and spend.cost(o.price, extra) or 0) }
end

local function progress(o)
  return function(kind, s, block)
    if kind == "usage" then
      show_usage(o, s.usage)
    elseif kind == "thinking" then
      o.events:emit{ type = "thinking" }
    elseif kind == "block" and block then
      o.events:emit{ type = "activity" }
    end
  end
end

-- Books an answer's usage on the run, the thread and the workspace's day.
local function book(o, usage)
  for _, k in ipairs(USAGE_KEYS) do o.totals[k] = o.totals[k] + (usage[k] or 0) end
  local usd = spend.cost(o.price, usage)
  o.cost = o.cost + usd
  spend.book(o, usd)
  show_usage(o)
end

-- One model request with the run's options. Returns the message, or nil and the error.
local function ask_model(o, body)
  local message, err = o.client:create(body, {
    signal = o.signal, deadline_ms = o.deadline_ms, on_progress = progress(o),
    on_wait = function(ms, why)
      o.events:emit{ type = "waiting", text = ("model API busy — retrying in %ds (%s)"):format(math.ceil(ms / 1000), why) }
    end,
  })
  o.events:emit{ type = "waiting" }
  if message then book(o, message.usage) end
  return message, err
end

---------------------------------------------------------------------------------------------
-- Compaction

local function threshold(o)
  return o.model.context_tokens * o.snap.agents.context.compact_at_percent // 100
end

local function describe_elided(o)
  return function(use, block)
    local what = use and (o.described[use.id] or tools.describe(use)) or "a tool call of an earlier run"
    local saved = type(block.content) == "string" and block.content:match("saved at (%S+): read it")
    local again = saved and ("read_file %s with offset/limit reads the whole output"):format(saved)
      or "make the call again to see it"
    return ("the result of `%s` — %s"):format(what, again)
  end
end

-- The summary request: the conversation so far and the policy's summary prompt, answered
-- with text. Returns the summary or nil, a core.error (the model client's, or kind "spend" |
-- "empty").
local function summarise(o, conv)
  local c = o.snap.agents.context
  local msgs = {}
  for i, m in ipairs(conv.messages) do msgs[i] = m end
  local last = msgs[#msgs]
  local content = type(last.content) == "string" and { { type = "text", text = last.content } } or { table.unpack(last.content) }
  content[#content + 1] = { type = "text", text = c.summary_prompt }
  msgs[#msgs] = { role = "user", content = content }
  local max = c.summary_max_tokens + (o.def.thinking and o.def.thinking.budget_tokens or 0)
  local why = spend.check(o.snap, o, o.cost)
  if why then return nil, core.error("spend", why) end
  o.events:emit{ type = "activity", text = "compacting the conversation: the model summarises it" }
  local message, err = ask_model(o, M.body(o, msgs, math.min(max, o.model.max_output_tokens)))
  o.events:emit{ type = "activity" }
  if not message then return nil, err end
  local _, summary = M.split(message)
  if summary == "" then return nil, core.error("empty", "the summary request gave no text") end
  return summary
end

-- The card's one line about compaction: how often, and the latest.
local function compacted(o, what)
  o.compactions = o.compactions + 1
  o.events:emit{ type = "note", key = "compaction", text = ("🗜 context compacted %d time%s; the latest at %s")
    :format(o.compactions, o.compactions == 1 and "" or "s", what) }
end

-- Makes the next request fit, cheapest first: elide the tool results older than the latest
-- keep_tool_results, and when that does not make it fit, summarise. forced: the API said it
-- does not fit (its count replaces the estimate): the elided conversation is tried first, and
-- the summary comes only when the API refuses it again (nothing more to elide). The
-- transcript's compaction line has the real sizes: the messages' bytes and the tokens.
-- Returns true, or false, the state and the problem that end the run.
function M.compact(o, conv, turn, forced, api_said)
  local limit = threshold(o)
  if forced and api_said then conv:too_long(api_said) end
  if not forced and conv:estimate() <= limit then return true end
  local c = o.snap.agents.context
  local before, bytes_before = conv:estimate(), conv:bytes()
  local n = conv:elide(c.keep_tool_results, describe_elided(o))
  if n > 0 then
    local after, bytes_after = conv:estimate(), conv:bytes()
    compacted(o, ("turn %d: %d older tool results elided (~%d → ~%d tokens of %d)")
      :format(turn, n, before, after, o.model.context_tokens))
    o.events:emit{ type = "compaction", turn = turn, how = "elide", results = n, before = before, after = after,
                        bytes_before = bytes_before, bytes_after = bytes_after, forced = forced or nil }
    if forced or after <= limit then return true end
  end
  local summary, err = summarise(o, conv)
  if not summary then
    local why = err.message
    if err.kind == "aborted" then return false, "stopped" end
    if err.kind == "spend" then return false, "spend", why end
    if err.kind == "budget" then return false, "budget", why end
    return false, "context", ("the conversation (~%d tokens) no longer fits the model's window of %d "
      .. "tokens, and compacting it failed (%s). Ask again in this thread with a narrower task, or "
      .. "lower context.compact_at_percent in policies/agents.lua."):format(before, o.model.context_tokens, why)
  end
  local first = ("The ask: %s\n\n[The earlier turns of this run were summarised to fit the context window:]\n%s")
    :format(ask_text(o.ask), summary)
  local bytes_summarised = conv:bytes()
  local kept = conv:restart(first, c.keep_turns)
  -- the summary replaced the turns that carried subdirectories' instructions: the next read
  -- under one brings its files back
  o.nested = instructions.nested_state(o.nested)
  compacted(o, ("turn %d: earlier turns summarised by the model, the latest %d messages kept (~%d → ~%d tokens)")
    :format(turn, kept, before, conv:estimate()))
  o.events:emit{ type = "compaction", turn = turn, how = "summary", kept = kept, before = before,
                      after = conv:estimate(), bytes_before = bytes_summarised, bytes_after = conv:bytes(), summary = summary }
  if conv:estimate() > o.model.context_tokens then
    return false, "context", ("even after the model summarised the conversation, its latest turns "
      .. "(~%d tokens) do not fit the model's window of %d tokens. Ask again in this thread with a "
      .. "narrower task, or lower context.keep_turns in policies/agents.lua."):format(conv:estimate(), o.model.context_tokens)
  end
  return true
end

---------------------------------------------------------------------------------------------
-- The loop

-- The history plus the ask as the next user turn. A history that ends with a user message
-- (tool results of a run that ended there) gets the ask as a text block after them, so roles
-- still alternate. The ask's text is made valid UTF-8 first. opening: a text put before the
-- ask (the run's facts).
function M.start_messages(history, ask, opening)
  local messages = {}
  for i, m in ipairs(history or {}) do messages[i] = m end
  local ask_content = {}
  if opening then ask_content[1] = { type = "text", text = text.valid(opening) } end
  if type(ask) == "table" then
    for _, b in ipairs(ask) do
      ask_content[#ask_content + 1] = b.type == "text" and { type = "text", text = text.valid(b.text) } or b
    end
  else
    ask_content[#ask_content + 1] = { type = "text", text = text.valid(ask) }
  end
  local last = messages[#messages]
  if last and last.role == "user" then
    local content = type(last.content) == "string" and { { type = "text", text = last.content } } or {}
    if type(last.content) == "table" then for i, b in ipairs(last.content) do content[i] = b end end
    for _, b in ipairs(ask_content) do content[#content + 1] = b end
    messages[#messages] = { role = "user", content = content }
  else
    messages[#messages + 1] = { role = "user", content = ask_content }
  end
  return messages
end

local function setup(o)
  o.now_ms = o.now_ms or core.now_ms
  o.now_s = o.now_s or os.time
  o.accounts = o.accounts or spend.shared
  o.model = assert(o.snap.agents.models[o.def.model], "no models entry for " .. tostring(o.def.model))
  o.price = o.model.price
  o.max_tokens = o.def.max_tokens
  o.def = tools.attach(o) -- its MCP servers' tools (docs/mcp.md), what its executor can do
  o.tools = tools.definitions(o.snap, o.def)
  o.cached_tools = cached_tools(o.tools)
  local system = M.system_prompt(o.snap, o.def, o)
  if o.facts then system = system .. "\n\n" .. facts.text(o.snap, o.facts) end
  o.system = text.valid(instructions.append(system, o.instructions))
  o.totals = { input_tokens = 0, output_tokens = 0, cache_read_input_tokens = 0, cache_creation_input_tokens = 0 }
  o.cost, o.compactions, o.continuations, o.described = 0, 0, 0, {}
  o.nested = instructions.nested_seen_in(instructions.nested_state(), o.history)
end

local function record(o, conv, turns)
  local usage = {}
  for _, k in ipairs(USAGE_KEYS) do usage[k] = o.totals[k] end
  return { messages = conv.messages, usage = usage, cost_usd = o.cost, cost = o.cost, compactions = o.compactions,
           turns = turns, tokens_in = usage.input_tokens, tokens_out = usage.output_tokens }
end

-- max_tokens reached: a larger limit for the next turns, up to the model's maximum.
local function grow(o)
  local before = o.max_tokens
  o.max_tokens = math.min(o.max_tokens * o.snap.agents.on_max_tokens.grow_factor, o.model.max_output_tokens)
  return before, o.max_tokens
end

-- A turn's checks before its request: stop, time, spend. Returns nil or state, problem.
local function must_end(o)
  if o.signal.aborted then return "stopped" end
  if o.now_ms() >= o.deadline_ms then
    return "budget", ("the run's %d minutes (max_run_minutes) are used up"):format(o.def.max_run_minutes)
  end
  local why = spend.check(o.snap, o, o.cost)
  if why then return "spend", why end
  return nil
end

-- The thread's messages that came in while the run worked, at a turn boundary: text blocks at
-- the end of the last message, a user message (the tool results, or the ask). Returns how many.
function M.take_inbox(o, conv, turn)
  if not o.inbox then return 0 end
  local list = o.inbox()
  if not list or #list == 0 then return 0 end
  local last = conv.messages[#conv.messages]
  if not last or last.role ~= "user" then return 0 end
  local blocks = {}
  for i, m in ipairs(list) do
    blocks[i] = { type = "text", text = text.valid(("[A message from %s in the thread, sent while you worked:]\n%s")
      :format(tostring(m.user or "someone"), tostring(m.text or ""))) }
    o.events:emit{ type = "message_in", turn = turn, user = m.user, text = m.text }
  end
  conv:append_to_last(blocks)
  if o.on_turn then o.on_turn(conv.messages) end
  return #list
end

-- The answer of one turn. Returns nil to go on, or the state (and problem) that ends the run.
local function handle(o, conv, message, turn)
  local content, said, uses = M.split(message)
  if said ~= "" then o.answer = o.continuing and (o.answer .. said) or said end
  -- the text beside a turn's calls is the model's commentary: its last line on the card
  if #uses > 0 and said ~= "" then o.events:emit{ type = "commentary", text = said } end
  o.continuing, o.cut = false, nil
  if message.stop_reason == "pause_turn" and #content > 0 then
    conv:add{ role = "assistant", content = content }
    return nil
  end
  if #uses == 0 then
    local cut = message.stop_reason == "max_tokens" or message.stop_reason == "model_context_window_exceeded"
    if cut and o.continuations < o.snap.agents.on_max_tokens.max_continuations and #content > 0 then
      o.continuations, o.continuing = o.continuations + 1, true
      local _, now = grow(o)
      o.events:emit{ type = "note", key = "max_tokens",
        text = ("✂ turn %d: the answer reached max_tokens; asked the model to continue it (max_tokens %d)"):format(turn, now) }
      conv:add{ role = "assistant", content = content }
      conv:add{ role = "user", content = { { type = "text", text = "Your answer was cut off by the output "
        .. "limit. Continue it exactly where it stopped, without repeating what you already wrote." } } }
      return nil
    end
    if cut then o.answer = o.answer .. "\n\n[the answer reached max_tokens and was cut]" end
    if #content > 0 then conv:add{ role = "assistant", content = content } end -- for the thread's record
    -- a message that came in while the model answered: the run goes on with it
    if #content > 0 and o.inbox then
      conv:add{ role = "user", content = {} }
      if M.take_inbox(o, conv, turn) > 0 then return nil end
      table.remove(conv.messages)
    end
    if o.on_turn then o.on_turn(conv.messages) end
    return "done"
  end
  if message.stop_reason == "max_tokens" then
    local before, now = grow(o)
    o.cut = ("not run: this call was cut off by the output limit (max_tokens %d) before its input was "
      .. "complete. The next turn may use up to %d tokens; make the call again (a large file is better "
      .. "written in parts)."):format(before, now)
    o.events:emit{ type = "note", key = "max_tokens",
      text = ("✂ turn %d: a tool call was cut by max_tokens (%d); the model was told, max_tokens is now %d")
      :format(turn, before, now) }
  end
  conv:add{ role = "assistant", content = content }
  local results, ending, why = M.call_tools(o, uses, turn)
  conv:add{ role = "user", content = results }
  if o.on_turn then o.on_turn(conv.messages) end
  if ending == "stopped" then return "stopped" end
  if ending == "infra" then
    return "infra", ("the executor failed %d times in a row (timeouts health."
      .. "max_consecutive_infra_failures), so the run stopped at once instead of spending "
      .. "turns on a dead sandbox; the next ask provisions a fresh one. Last failure: %s")
      :format(o.tracker.count, why)
  end
  return nil
end

-- One turn's request, compacting first when it would not fit, and once more when the API
-- says it does not. Returns the message, or nil, state, problem.
local function request(o, conv, turn)
  local forced, api_said = false, nil
  for _ = 1, 3 do
    local ok, state, problem = M.compact(o, conv, turn, forced, api_said)
    if not ok then return nil, state, problem end
    local ending, why = must_end(o)
    if ending then return nil, ending, why end
    local t0 = o.now_ms()
    local message, err = ask_model(o, M.body(o, conv.messages))
    if message then
      conv:answered(message.usage)
      o.events:emit{ type = "answer", turn = turn, stop_reason = message.stop_reason, usage = message.usage,
                          duration_ms = o.now_ms() - t0, content = message.content }
      return message
    end
    o.events:emit{ type = "model_error", turn = turn, kind = err.kind, message = err.message }
    if err.kind == "aborted" then return nil, "stopped" end
    if err.kind == "budget" then return nil, "budget", err.message end
    if err.kind ~= "too_long" then return nil, "model_error", err.message end
    forced, api_said = true, err.message
  end
  return nil, "context", ("the conversation does not fit the model's window of %d tokens even after "
    .. "compacting it twice; ask again in this thread with a narrower task"):format(o.model.context_tokens)
end

function M.run(o)
  setup(o)
  local fixed = (#o.system + #core.json.encode(o.tools)) // context.BYTES_PER_TOKEN
  local conv = context.new(M.start_messages(o.history, o.ask, o.facts and facts.turn(o.snap, o.facts, o.workspace)), fixed)
  if o.on_turn then o.on_turn(conv.messages) end -- the ask itself is kept before the first request
  o.answer = ""
  o.events:emit{ type = "run_start", agent = o.agent, model = o.def.model, repo = o.repo,
                      ask = o.ask, system = o.system, tools = o.tools, max_turns = o.def.max_turns,
                      history = o.history and #o.history or 0 }
  local turn = 0
  local function finish(state, problem)
    return state, o.answer, problem, record(o, conv, turn)
  end
  while turn < o.def.max_turns do
    local ending, why = must_end(o)
    if ending then return finish(ending, why) end
    turn = turn + 1
    o.events:emit{ type = "turn", turn = turn }
    M.take_inbox(o, conv, turn)
    local message, state, problem = request(o, conv, turn)
    if not message then return finish(state, problem) end
    local e, p = handle(o, conv, message, turn)
    if e then return finish(e, p) end
  end
  return finish("turns", ("the run used its %d turns (max_turns in policies/agents.lua) without "
    .. "finishing; a follow-up in this thread continues the conversation in the same workspace"):format(o.def.max_turns))
end

return M

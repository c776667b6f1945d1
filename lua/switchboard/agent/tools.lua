-- The agent's tools: a registry. Each tool is declared by its own module (M.TOOLS, a list of
-- declarations; MODULES below names the modules) and this file only iterates them:
--
--   { name,                      the tool's name in policy and for the model
--     reaches = { "executor", … }, what it touches (CAPABILITIES: a tool reaches nothing else)
--     requires = "processes"?,   what the thread's executor must have for it to be offered
--                                (executor_can); elsewhere it is not offered
--     without_repository = "web"?  how it works for an agent without a workspace
--     writes?, read_only?, touches_file?,  declared properties (readonly agents, the batch of
--                                reads run at once, the nested instruction files)
--     policy = "agents.…"?,      the policy part it reads (docs)
--     help,                      one line: what it does (docs, `tools.help`)
--     definition(snap, def) → the API's tool entry (agent/tool_schema.lua builds one), or nil (not offered)
--     call(ex, snap, input, ctx, def) → outcome | nil, executor error }
--
-- What a call returns becomes exactly one tool_result:
--
--   a result (any exit code)        → its rendered text (exit N: …, (no output), the 124 line)
--   a tool error (escape, no file)  → is_error, its message
--   a refusal (run budget spent)    → is_error, "exit 124: run budget exhausted …"
--   an infra error                  → is_error, the sandbox failure; the health tracker counts it
--   a capacity error (fleet busy)   → not an error of the model's: policy's fleet_busy_tool text
--   bad input (not an object, no command) → is_error, what the input lacks
--   a raise (a bug below)           → not caught here: it passes through the run to the one
--                                     catch of the dispatcher's lifecycle, with its traceback
--
--   tools.register(decl)            a tool (a module's M.TOOLS entry; a spec's toy tool)
--   tools.attach(o)                 the run's def: the agent's policy entry, its MCP servers'
--                                   tools (agent/mcp/bridge.lua) and what its executor can do
--   tools.definitions(snap, def, ex?) → the API's `tools` list for the agent
--   tools.call(executor, snap, def, tool_use, ctx) → {content, is_error, kind, result?, image?}
--     ctx: signal, remaining_ms, attach? (function(image): a screenshot for the page and
--          thread), on_todos?, on_preview? (function(url): an exposed port's preview URL);
--     kind: "result" | "tool" | "refused" | "infra" | "capacity" | "input"
local core = require("switchboard.core")
local classify = require("switchboard.shell.classify")
local errors = require("switchboard.exec.errors")
local tracing = require("switchboard.exec.tracing")
local mcp = require("switchboard.agent.mcp.bridge")

local M = {}

-- What a tool may reach (ARCHITECTURE.md "The rooms of the program", agent/):
M.CAPABILITIES = {
  executor = "commands and files in the thread's workspace, through its executor stack",
  processes = "the executor's background processes and exposed ports (sandboxd, Kubernetes)",
  web = "the internet from the bot (core.http: a search provider, a page without a sandbox)",
  publish = "what the run shows people: an image for the Slack thread and the run page, a Preview button",
  card = "the run's card and transcript (the model's plan)",
}

-- The modules that declare tools, in the order of this list; a new tool is one line here.
M.MODULES = {
  "switchboard.agent.bash",
  "switchboard.agent.file_tools",
  "switchboard.agent.find",
  "switchboard.agent.web_fetch",
  "switchboard.agent.web_search",
  "switchboard.agent.screenshot",
  "switchboard.agent.todos",
  "switchboard.agent.processes",
}

local REGISTRY, ORDER = {}, {}
-- Derived from the declarations (agent/run.lua reads them): tools that change the workspace,
-- tools that only read (the calls of one turn that are all of these run at the same time),
-- tools whose path is a file read or changed (the nested instruction files).
M.WRITE_TOOLS, M.READ_ONLY, M.TOUCHES_FILE = {}, {}, {}

function M.register(decl)
  assert(type(decl.name) == "string" and decl.name:match("^[a-z][a-z0-9_]*$"), "a tool needs a name")
  assert(type(decl.definition) == "function" and type(decl.call) == "function",
    decl.name .. ": a tool declares definition and call")
  assert(type(decl.help) == "string", decl.name .. ": a tool declares its help")
  for _, cap in ipairs(decl.reaches or {}) do
    assert(M.CAPABILITIES[cap], ("%s reaches %s, which is not a capability"):format(decl.name, tostring(cap)))
  end
  assert(decl.requires == nil or M.CAPABILITIES[decl.requires], decl.name .. ": an unknown requirement")
  if not REGISTRY[decl.name] then ORDER[#ORDER + 1] = decl.name end
  REGISTRY[decl.name] = decl
  M.WRITE_TOOLS[decl.name] = decl.writes or nil
  M.READ_ONLY[decl.name] = decl.read_only or nil
  M.TOUCHES_FILE[decl.name] = decl.touches_file or nil
  return decl
end

for _, name in ipairs(M.MODULES) do
  for _, decl in ipairs(require(name).TOOLS) do M.register(decl) end
end

function M.get(name) return REGISTRY[name] end

-- Every registered tool's name, in registration order.
function M.names()
  local out = {}
  for i, n in ipairs(ORDER) do out[i] = n end
  return out
end

-- The registered declarations in registration order, each given to fn.
local function each_declared(fn)
  for _, name in ipairs(ORDER) do fn(REGISTRY[name]) end
end

-- The tools that need the thread's workspace — they reach the executor and have no way
-- without it (web_fetch's without_repository = "web": the bot fetches) — as a set: the policy
-- loader's list (policy/schema.lua EXECUTOR_TOOLS) is checked against it.
function M.needing_repository()
  local out = {}
  each_declared(function(d)
    for _, c in ipairs(d.reaches or {}) do
      if (c == "executor" or c == "processes") and not d.without_repository then out[d.name] = true end
    end
  end)
  return out
end

-- One line per tool: its name, what it reaches and what it does.
function M.help()
  local out = {}
  each_declared(function(d)
    out[#out + 1] = ("%-14s %-28s %s"):format(d.name, table.concat(d.reaches or {}, ","), d.help)
  end)
  return table.concat(out, "\n")
end

-- What the thread's executor can do beyond commands and files (a tool's `requires`).
function M.executor_can(ex)
  return { processes = ex ~= nil and type(ex.start_process) == "function" }
end

function M.attach(o)
  local def = mcp.attach(o) -- the agent's MCP servers' tools for this run (docs/mcp.md)
  return setmetatable({ can = M.executor_can(o.executor) }, { __index = def })
end

local function offerable(decl, def, can)
  if not decl then return false end
  if def.readonly and decl.writes then return false end -- the loader refuses it; the second lock
  return decl.requires == nil or can[decl.requires] == true
end

-- The tools an agent is offered: its policy list, in order, minus the write tools for a
-- readonly agent and the tools its executor cannot serve, then its MCP servers' tools.
function M.definitions(snap, def, ex)
  local can = def.can or M.executor_can(ex)
  local out = {}
  for _, name in ipairs(def.tools or {}) do
    local decl = REGISTRY[name]
    if offerable(decl, def, can) then
      local d = decl.definition(snap, def, can)
      if d then out[#out + 1] = d end -- nil: not offered (web_search without a provider)
    end
  end
  if def.mcp then for _, t in ipairs(def.mcp:definitions()) do out[#out + 1] = t end end -- agent/mcp/bridge.lua
  return out
end

function M.offered(snap, def, name, ex)
  for _, t in ipairs(M.definitions(snap, def, ex)) do
    if t.name == name then return true end
  end
  return false
end

local function outcome(kind, content, is_error, extra)
  local o = extra or {}
  o.kind, o.content, o.is_error = kind, content, is_error
  return o
end

local function from_error(snap, err)
  if errors.is_capacity(err) then
    return outcome("capacity", classify.fleet_busy_tool_text(snap, tostring(err)), false, { error = err })
  end
  if errors.is_infra(err) then
    return outcome("infra", "sandbox failure (infrastructure, not the command's exit status): "
      .. tostring(err), true, { error = err })
  end
  if errors.is_refused(err) then
    return outcome("refused", "exit " .. tostring(err.exit_code or 124) .. ": " .. tostring(err), true, { error = err })
  end
  return outcome("tool", tostring(err), true, { error = err })
end

-- What reaches the model passes the log's redaction: a repository secret (docs/secrets.md),
-- a GitHub token or any other registered secret a command printed is [redacted] in the
-- tool_result, so no secret is ever sent to the model.
local function scrubbed(out)
  local c = out.content
  if type(c) == "string" then
    out.content = core.log_scrub(c)
  elseif type(c) == "table" then
    for _, block in ipairs(c) do
      if type(block) == "table" and type(block.text) == "string" then block.text = core.log_scrub(block.text) end
    end
  end
  return out
end

-- use: {id, name, input, input_error?}; def: the agent's policy entry (or tools.attach's).
local function call_tool(ex, snap, def, use, ctx)
  if not M.offered(snap, def, use.name, ex) then
    return outcome("input", ("there is no tool %q for this agent; the tools are: %s"):format(
      tostring(use.name), table.concat(def.tools or {}, ", ")), true)
  end
  if use.input_error then
    return outcome("input", use.name .. " was called with input that is not a JSON object (" .. use.input_error .. ")", true)
  end
  if def.mcp and def.mcp:owns(use.name) then
    local out, err = def.mcp:call(ex, snap, use, ctx)
    return out or from_error(snap, err)
  end
  local input = type(use.input) == "table" and use.input or {}
  local out, err = REGISTRY[use.name].call(ex, snap, input, ctx, def)
  if not out then return from_error(snap, err) end
  return out
end

-- One tool call, as an agent.tool span (where the executor's spans go) that is the parent of the
-- exec.* spans — and their HTTP requests — the call causes (exec/tracing.lua).
function M.call(ex, snap, def, use, ctx)
  local span = tracing.tool_span(ex, use.name)
  if not span then return scrubbed(call_tool(ex, snap, def, use, ctx)) end
  local done <close> = setmetatable({}, { __close = function(_, err)
    if err ~= nil then span:finish("error", err) end
  end })
  local out = scrubbed(tracing.within(span, call_tool, ex, snap, def, use, ctx))
  span.attributes.outcome = out.kind
  span:finish(out.is_error and "error" or "ok", { kind = out.kind })
  return out
end

-- The first line of a call's command (or its path), for the card.
function M.describe(use)
  local input = type(use.input) == "table" and use.input or {}
  if use.name == "bash" and type(input.command) == "string" then
    return "$ " .. (input.command:match("^%s*([^\n]*)") or "") .. (input.run_in_background == true and " &" or "")
  end
  if type(input.pattern) == "string" then
    return use.name .. " " .. input.pattern .. (type(input.path) == "string" and (" in " .. input.path) or "")
  end
  if type(input.path) == "string" then return use.name .. " " .. input.path end
  if type(input.url) == "string" then return use.name .. " " .. input.url end
  if type(input.id) == "string" then return use.name .. " " .. input.id end
  if math.type(input.port) then return use.name .. " " .. tostring(math.tointeger(input.port) or input.port) end
  return tostring(use.name)
end

local file_tools = require("switchboard.agent.file_tools")
M.lines, M.nearest, M.CONTEXT_LINES = file_tools.lines, file_tools.nearest, file_tools.CONTEXT_LINES

return M

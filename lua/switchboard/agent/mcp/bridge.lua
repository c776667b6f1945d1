-- The agent's MCP servers (policies/agents.lua mcp_servers; docs/mcp.md) as tools of one run:
-- at the run's start each server's tools are listed once (tools/list, every page; the servers
-- at the same time) and offered
-- to the model as mcp__SERVER__TOOL with their descriptions and input schemas (bounded by
-- policy's agents.mcp); a call goes to its server (stdio: inside the thread's sandbox through
-- the executor; HTTP: from the bot). A server that fails to start or to list its tools is a
-- named note on the card, not a failed run: its tools are just not offered.
--
--   local def = bridge.attach(o)   o: the run's {snap, def, executor, card, signal, deadline_ms,
--                                  now_ms}; returns o.def itself when it names no server, else
--                                  a def that reads through to it with .mcp, the run's session
--   def.mcp:definitions() → the API's tool entries; def.mcp:owns(name) → bool
--   def.mcp:call(ex, snap, use, ctx) → {kind, content, is_error} | nil, the executor's error
local core = require("switchboard.core")
local errors = require("switchboard.exec.errors")
local protocol = require("switchboard.agent.mcp.protocol")
local stdio = require("switchboard.agent.mcp.stdio")
local http = require("switchboard.agent.mcp.http")

local M = {}

local B = {}
B.__index = B

local sorted_names = require("switchboard.policy.schema").sorted_keys

local function transport(name, server, opts)
  local s = { name = name }
  for k, v in pairs(server) do s[k] = v end
  if s.url then
    local session = http.session(s, opts)
    return { kind = "http", exchange = function(_, _, snap, method, params, ctx)
      return session:exchange(snap, method, params, ctx)
    end }
  end
  return { kind = "stdio", exchange = function(_, ex, snap, method, params, ctx)
    return stdio.exchange(ex, snap, s, method, params, ctx)
  end }
end

local function bounded_schema(schema, limits)
  if type(schema) ~= "table" or schema.type ~= "object" then return { type = "object" } end
  if #core.json.encode(schema) > limits.max_schema_bytes then return nil end
  if type(schema.required) == "table" and #schema.required == 0 then schema.required = nil end
  if type(schema.properties) == "table" and next(schema.properties) == nil then schema.properties = nil end
  return schema
end

-- Every page of a server's tools/list, at most limits.max_tools tools.
local function list_tools(t, ex, snap, ctx, limits)
  local tools, cursor = {}, nil
  for _ = 1, 20 do
    local result, err = t:exchange(ex, snap, "tools/list", cursor and { cursor = cursor } or nil, ctx)
    if not result then return nil, err end
    for _, tool in ipairs(type(result.tools) == "table" and result.tools or {}) do
      if #tools >= limits.max_tools then return tools end
      if type(tool) == "table" and type(tool.name) == "string" and tool.name ~= "" then tools[#tools + 1] = tool end
    end
    cursor = type(result.nextCursor) == "string" and result.nextCursor ~= "" and result.nextCursor or nil
    if not cursor then return tools end
  end
  return tools
end

-- list(name) for every name at the same time, each in a task of its own (a server that is slow
-- to start holds the run's start once, not once per server); the results in the names' order.
-- A raise (a bug) in one goes on up, with its traceback, once every task has ended.
local function list_all(names, list)
  local tasks, out, raised = {}, {}, nil
  for i, name in ipairs(names) do tasks[i] = core.go(list, name) end
  for i, task in ipairs(tasks) do
    local ok, v = core.join(task)
    if ok then out[i] = v else raised = raised or v end
  end
  if raised then error(raised, 0) end
  return out
end

-- one line on the run's card (the run's event stream: dispatch/run_events.lua)
local function note(events, notes)
  if events and #notes > 0 then events:emit{ type = "note", key = "mcp", text = "🔌 " .. table.concat(notes, "; ") } end
end

function M.open(o, opts)
  local snap, def = o.snap, o.def
  local limits = snap.agents.mcp
  local self = setmetatable({ defs = {}, routes = {}, notes = {} }, B)
  local ctx = { signal = o.signal, remaining_ms = o.deadline_ms and (o.deadline_ms - o.now_ms()) or nil }
  local names = sorted_names(def.mcp_servers)
  local listed = list_all(names, function(name)
    local t = transport(name, def.mcp_servers[name], opts)
    local tools, err = list_tools(t, o.executor, snap, ctx, limits)
    return { transport = t, tools = tools, err = err }
  end)
  for i, name in ipairs(names) do
    local t, tools, err = listed[i].transport, listed[i].tools, listed[i].err
    if not tools then
      self.notes[#self.notes + 1] = ("MCP server %s failed to start or list its tools (%s): %s"):format(
        name, errors.is_infra(err) and "sandbox failure" or "server", tostring(err))
    else
      local offered = 0
      for _, tool in ipairs(tools) do
        local api_name = protocol.tool_name(name, tool.name)
        local schema = bounded_schema(tool.inputSchema, limits)
        if not self.routes[api_name] and schema then
          local description = type(tool.description) == "string" and tool.description or ""
          if utf8.len(description) and utf8.len(description) > limits.max_description_chars then
            description = description:sub(1, utf8.offset(description, limits.max_description_chars + 1) - 1) .. "…"
          end
          self.defs[#self.defs + 1] = { name = api_name, description = ("[MCP server %s] %s"):format(name, description),
                                        input_schema = schema }
          self.routes[api_name] = { transport = t, server = name, tool = tool.name }
          offered = offered + 1
        end
      end
      if offered < #tools then
        self.notes[#self.notes + 1] = ("MCP server %s: %d of its tools not offered (a name taken, or a schema over %d bytes)")
          :format(name, #tools - offered, limits.max_schema_bytes)
      end
    end
  end
  note(o.events, self.notes)
  return self
end

function M.attach(o, opts)
  -- a policy snapshot's tables are frozen proxies: pairs sees their entries, next does not
  if type(o.def.mcp_servers) ~= "table" or #sorted_names(o.def.mcp_servers) == 0 then return o.def end
  return setmetatable({ mcp = M.open(o, opts) }, { __index = o.def })
end

function B:definitions() return self.defs end

function B:owns(name) return self.routes[name] ~= nil end

function B:call(ex, snap, use, ctx)
  local route = self.routes[use.name]
  local args = type(use.input) == "table" and use.input or {}
  local result, err = route.transport:exchange(ex, snap, "tools/call", { name = route.tool, arguments = args }, ctx)
  if not result and not (type(err) == "table" and err.kind == "mcp_server") then return nil, err end
  if not result then
    return { kind = "tool", content = ("MCP server %s, tool %s: %s"):format(route.server, route.tool, tostring(err)),
             is_error = true }
  end
  local content, is_error = protocol.content(result)
  return { kind = "result", content = content, is_error = is_error }
end

return M

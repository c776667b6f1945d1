-- The todo_write tool (Claude Code's shape): the model's plan as a list of
-- {content, status = pending | in_progress | completed}; each call replaces the previous
-- list. It touches no workspace: the list goes to the card (a checklist, live) and to the
-- transcript and the run's page (dispatch/run_card.lua, pages/render.lua).
--
--   todos.definition() → the API's tool definition
--   todos.call(input, ctx) → {kind, content, is_error}   ctx.on_todos(list) shows the list
local core = require("switchboard.core")
local tool_schema = require("switchboard.agent.tool_schema")

local M = {}

M.NAME = "todo_write"
M.STATUSES = { pending = true, in_progress = true, completed = true }

function M.definition()
  return tool_schema.tool(M.NAME, "Write your plan for this task as a checklist the person who asked can watch "
    .. "while you work. Each call replaces the whole list: send every item, each with its "
    .. "status (pending, in_progress or completed). Use it for work of three steps or more; "
    .. "keep one item in_progress at a time and mark an item completed as soon as it is done.", {
    { "todos", "array", "The whole list, in order.", required = true, items = tool_schema.object{
      { "content", "string", "What the step is, in a short sentence.", required = true },
      { "status", "string", enum = { "pending", "in_progress", "completed" }, required = true },
    } },
  })
end

local function problem(why)
  return { kind = "input", content = "todo_write: " .. why, is_error = true }
end

-- The list as given, checked: every item a non-empty one-line content and a known status.
function M.read(input)
  local list = type(input) == "table" and input.todos
  if type(list) ~= "table" then return nil, core.error("input", "todos must be a list of {content, status}") end
  local out = {}
  for i, item in ipairs(list) do
    if type(item) ~= "table" or type(item.content) ~= "string" or item.content:match("^%s*$") then
      return nil, core.error("input", ("item %d needs a content (text)"):format(i))
    end
    if not M.STATUSES[item.status] then
      return nil, core.error("input", ("item %d has status %q; it must be pending, in_progress or completed"):format(i, tostring(item.status)))
    end
    out[i] = { content = (item.content:gsub("%s+", " "):gsub("^ ", ""):gsub(" $", "")), status = item.status }
  end
  return out
end

function M.call(input, ctx)
  local list, why = M.read(input)
  if not list then return problem(tostring(why)) end
  if ctx and ctx.on_todos then ctx.on_todos(list) end
  local done = 0
  for _, t in ipairs(list) do if t.status == "completed" then done = done + 1 end end
  return { kind = "result", content = ("The list is updated (%d items, %d completed)."):format(#list, done), is_error = false }
end

M.TOOLS = {
  { name = M.NAME, reaches = { "card" }, help = "the model's plan as a checklist on the card and the run page",
    definition = function() return M.definition() end, call = function(_, _, input, ctx) return M.call(input, ctx) end },
}

return M

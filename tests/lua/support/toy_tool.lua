-- A toy tool, declared from the test tree the way a tool module of agent/ declares its tools
-- (agent/tools.lua): tests/lua/tool_registry_spec.lua registers it and a scripted model calls
-- it. It reaches nothing: it reverses its input's text.
local tool_schema = require("switchboard.agent.tool_schema")

local M = {}

M.TOOLS = {
  { name = "toy_reverse", reaches = {}, help = "the input's text reversed (a spec's toy)",
    definition = function()
      return tool_schema.tool("toy_reverse", "Reverse a text.", { { "text", "string", required = true } })
    end,
    call = function(_, _, input)
      if type(input.text) ~= "string" then return { kind = "input", content = "toy_reverse needs {\"text\": \"…\"}", is_error = true } end
      return { kind = "result", content = "reversed: " .. input.text:reverse(), is_error = false }
    end },
}

return M

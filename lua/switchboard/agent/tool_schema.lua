-- How a tool module declares what it offers the model: its definition (name, description,
-- input schema) with the input schema built from a compact list of fields, so that every tool
-- writes only what is its own and the JSON-schema object around it is written once.
--
--   tool_schema.object(fields) → {type = "object", properties = {…}, required = {…}?}
--     fields: a list, in order, of { name, type, description?, required = true?, … }; any other
--     named key of a field (enum, items) is copied into its property as it is. required lists
--     the fields so marked, in their order, and is left out where none is.
--   tool_schema.tool(name, description, fields) → {name, description, input_schema}

local M = {}

local function property(field)
  local p = { type = field[2], description = field[3] }
  for k, v in pairs(field) do
    if type(k) == "string" and k ~= "required" then p[k] = v end
  end
  return p
end

function M.object(fields)
  local properties, required = {}, {}
  for _, field in ipairs(fields) do
    properties[field[1]] = property(field)
    if field.required then required[#required + 1] = field[1] end
  end
  return { type = "object", properties = properties, required = required[1] and required or nil }
end

function M.tool(name, description, fields)
  return { name = name, description = description, input_schema = M.object(fields) }
end

return M

-- Scratch directories for specs, removed by remove_all() (call it in an after_each/teardown).
local core = require("switchboard.core")

local M = {}
local made = {}

function M.dir(prefix)
  local path = os.tmpname()
  os.remove(path)
  path = path .. "-" .. (prefix or "sb")
  assert(core.fs.mkdir_p(path))
  made[#made + 1] = path
  return path
end

function M.remove_all()
  for i = #made, 1, -1 do
    core.fs.remove_tree(made[i])
    made[i] = nil
  end
end

return M

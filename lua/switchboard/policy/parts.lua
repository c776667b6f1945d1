-- Named parts other rooms declare for themselves and register here, in order: the backends
-- (exec/backends.lua) and the fronts (fronts/registry.lua). Each registration (or a later one
-- of the same name, which replaces it) is handed to on_add — the schema learns the part's name
-- and settings — and a removal to on_remove.
--
--   local reg = parts.new{check = fn(decl), on_add = fn(decl), on_remove = fn(decl)}
--   reg.register(decl) → decl     reg.unregister(name) (a spec's toy, once the spec is over)
--   reg.get(name) → decl | nil    reg.names() → the names in their order (a copy)
local M = {}

function M.new(hooks)
  local by_name, order, reg = {}, {}, {}
  function reg.register(decl)
    hooks.check(decl)
    if not by_name[decl.name] then order[#order + 1] = decl.name end
    by_name[decl.name] = decl
    hooks.on_add(decl)
    return decl
  end
  function reg.unregister(name)
    local decl = by_name[name]
    if not decl then return end
    by_name[name] = nil
    for i, n in ipairs(order) do if n == name then table.remove(order, i) break end end
    hooks.on_remove(decl)
  end
  function reg.get(name) return by_name[name] end
  function reg.names() return table.move(order, 1, #order, 1, {}) end
  return reg
end

return M

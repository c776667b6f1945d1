-- Small file helpers the specs share (plain Lua io; nothing here waits on the engine).
local M = {}

-- The whole file, or nil when it cannot be opened.
function M.read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

-- A fresh directory from mktemp(1); the caller removes it.
function M.tmpdir()
  local p = io.popen("mktemp -d")
  local d = p:read("l")
  p:close()
  return d
end

return M

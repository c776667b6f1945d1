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

-- A fresh directory under the spec's own scratch root (tests/lua/support/tmp.lua): removed
-- with the root when busted ends, or earlier by the caller.
function M.tmpdir()
  return require("support.tmp").scratch("files")
end

return M

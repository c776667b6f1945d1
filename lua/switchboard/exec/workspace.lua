-- Per-thread workspaces: a thread key (a Slack "C123:1700000000.000100", a console thread
-- name, anything a front invents) becomes one safe directory name under a root. The name keeps
-- a readable prefix and ends with a hash of the whole key, so two keys that sanitize alike
-- ("a/b" and "a_b") never share a workspace, and nothing in a key can climb out of the root.
local core = require("switchboard.core")

local M = {}

local MAX_PREFIX = 48

function M.dir_name(thread_key)
  if type(thread_key) ~= "string" or thread_key == "" then
    error("a thread key must be a non-empty string", 2)
  end
  local prefix = thread_key:gsub("[^%w%-_.]", "_"):sub(1, MAX_PREFIX):gsub("^%.", "_")
  local digest = core.crypto.hex(core.crypto.sha256(thread_key)):sub(1, 16)
  return prefix .. "-" .. digest
end

function M.path(root, thread_key)
  return root .. "/" .. M.dir_name(thread_key)
end

-- Creates the workspace (and the root) when missing; returns the path or nil, err.
function M.ensure(root, thread_key)
  local dir = M.path(root, thread_key)
  local ok, err = core.fs.mkdir_p(dir, tonumber("700", 8))
  if not ok then return nil, err end
  return dir
end

return M

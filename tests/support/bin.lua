-- Runs the real switchboard binary from specs.
local core = require("switchboard.core")

local M = {}

M.path = os.getenv("SWITCHBOARD_BIN") or "./build/switchboard"

-- The environment the binary gets: ours, minus nothing, plus `extra`.
function M.env(extra)
  local env = {}
  for _, name in ipairs({ "PATH", "HOME", "LANG", "ASAN_OPTIONS", "UBSAN_OPTIONS", "SWITCHBOARD_LUA_DIR" }) do
    env[name] = os.getenv(name)
  end
  for k, v in pairs(extra or {}) do env[k] = v end
  return env
end

-- Runs `switchboard args...` to completion: the engine's result table.
function M.run(args, opts)
  opts = opts or {}
  local argv = { M.path }
  for _, a in ipairs(args) do argv[#argv + 1] = a end
  local p = assert(core.spawn{
    argv = argv, env = M.env(opts.env), stdin = opts.stdin, cwd = opts.cwd,
    deadline_ms = opts.deadline_ms or 120000, signal = opts.signal,
  })
  return p:wait(), p
end

-- Starts it and returns the process handle (for servers and signals).
function M.start(args, opts)
  opts = opts or {}
  local argv = { M.path }
  for _, a in ipairs(args) do argv[#argv + 1] = a end
  return assert(core.spawn{
    argv = argv, env = M.env(opts.env), stdin = opts.stdin, cwd = opts.cwd,
    on_output = opts.on_output, deadline_ms = opts.deadline_ms,
  })
end

return M

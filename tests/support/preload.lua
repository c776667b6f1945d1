-- The sanitized run (scripts/test's second stage) starts busted with the ASan and UBSan
-- runtimes in LD_PRELOAD: lua5.4 is not instrumented, the engine module it loads is.
-- tests/lua/support/helper.lua takes the variable out of busted's environment before any spec
-- runs, so the sh, git and rm a spec starts do not each load both runtimes (~30 ms of CPU
-- apiece on these machines; the switchboard binary is instrumented itself and needs none).
-- A spec that starts another Lua interpreter on the engine module passes them on from here.
local M = { ld_preload = nil }

-- env with the runtimes a plain lua5.4 needs to load the sanitized engine (unchanged on the
-- normal build).
function M.env(env)
  env = env or {}
  env.LD_PRELOAD = M.ld_preload
  env.ASAN_OPTIONS = os.getenv("ASAN_OPTIONS")
  env.UBSAN_OPTIONS = os.getenv("UBSAN_OPTIONS")
  return env
end

-- The same as a prefix for a shell command line ("" on the normal build).
function M.shell_prefix()
  if not M.ld_preload then return "" end
  return "LD_PRELOAD='" .. M.ld_preload .. "' "
end

return M

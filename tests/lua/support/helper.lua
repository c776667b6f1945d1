-- Loaded by busted before the specs (.busted): find the engine module of the build under
-- test (SB_BUILD_DIR, default ./build).
local build = os.getenv("SB_BUILD_DIR") or "./build"
package.cpath = build .. "/lua/?.so;" .. package.cpath
-- The sanitizers' runtimes stay in this interpreter and leave the environment its children
-- inherit (tests/support/preload.lua says why and gives them back to a child lua5.4).
package.path = "./tests/?.lua;" .. package.path
require("support.preload").ld_preload = require("switchboard.core").secrets.take_env("LD_PRELOAD")
-- The registries fill policy/schema.lua's lists of backends and fronts and their settings, as
-- the binary does before it loads a policy (exec/backends.lua, fronts/registry.lua).
require("switchboard.exec.backends")
require("switchboard.fronts.registry")
-- When busted ends: the servers a failed spec left are killed and waited for, then the spec's
-- scratch root (support/tmp.lua: every directory the support helpers made) is removed — a run
-- leaves nothing of its own in $TMPDIR. A root that cannot go is named, not silently kept.
-- Both modules are loaded here, before busted insulates the spec file: the spec then shares
-- these instances (insulation would otherwise drop the spec's, and with them what they made).
local tmp = require("support.tmp")
local sandbox = require("support.sandbox")
require("busted").subscribe({ "exit" }, function()
  sandbox.cleanup_servers()
  local ok, why = tmp.remove_root()
  if not ok then io.stderr:write("tests/lua/support/helper.lua: scratch root kept: ", tostring(why), "\n") end
  return nil, true
end)

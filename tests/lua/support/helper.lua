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

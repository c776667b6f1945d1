-- Loaded by busted before the specs (.busted): find the engine module of the build under
-- test (SB_BUILD_DIR, default ./build).
local build = os.getenv("SB_BUILD_DIR") or "./build"
package.cpath = build .. "/lua/?.so;" .. package.cpath

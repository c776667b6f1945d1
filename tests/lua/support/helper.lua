-- Loaded by busted before the specs (.busted): find the engine module when it is built.
-- SB_BUILD_DIR (or SWITCHBOARD_BUILD) selects another build directory.
local build = os.getenv("SB_BUILD_DIR") or os.getenv("SWITCHBOARD_BUILD") or "./build"
package.cpath = build .. "/lua/?.so;" .. package.cpath

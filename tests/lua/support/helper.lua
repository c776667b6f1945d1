-- Loaded by busted before the specs (.busted): find the engine module when it is built.
local build = os.getenv("SB_BUILD_DIR") or "./build"
package.cpath = build .. "/lua/?.so;" .. package.cpath

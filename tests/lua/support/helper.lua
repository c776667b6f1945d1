-- Loaded by busted before the specs (.busted): find the engine module when it is built.
local build = os.getenv("SWITCHBOARD_BUILD") or "./build"
package.cpath = build .. "/lua/?.so;" .. package.cpath

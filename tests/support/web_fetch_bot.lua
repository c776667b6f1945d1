-- web_fetch from the bot (an agent without a sandbox: agent/web_fetch.lua over core.http with
-- public_only), run as a process of its own so that a spec can run it inside a network
-- namespace it made (`ip netns exec NS lua5.4 tests/support/web_fetch_bot.lua URL…`).
-- Prints one JSON line per URL: {url, kind, is_error, content}.
--   SB_BUILD_DIR: the build whose engine module to load (default ./build)
local build = os.getenv("SB_BUILD_DIR") or "./build"
package.cpath = build .. "/lua/?.so;" .. package.cpath
package.path = "./lua/?.lua;./lua/?/init.lua;./tests/lua/?.lua;./tests/?.lua;" .. package.path
local core = require("switchboard.core")
local cjson = require("cjson")
local tools = require("switchboard.agent.tools")
local P = require("support.policies")

local snap = P.shipped()
local def = { resources = {}, readonly = true, tools = { "web_fetch" } }
core.run(function()
  for _, url in ipairs(arg) do
    local out = tools.call(nil, snap, def, { id = "w", name = "web_fetch", input = { url = url } },
      { signal = core.signal(), remaining_ms = 600000 })
    io.write(cjson.encode{ url = url, kind = out.kind, is_error = out.is_error, content = out.content }, "\n")
  end
end)

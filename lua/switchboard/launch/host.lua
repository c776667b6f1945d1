-- The host of a dispatcher: what belongs to the process that runs the dispatcher, whichever
-- front it serves (`switchboard slack`, `switchboard console`) — the thread's record in the
-- state directory (store/record.lua: conversations, runs, the thread's repository and pull
-- request, kept across restarts and expired by policy), the run pages served from it
-- (pages/routes.lua) and their address.
--
--   local host, err = host.open(snap)      opens <state dir>/record.db
--   host.record                            for dispatcher.new{record = …}; d:restore() next
--   host.pages, host.log_hide              the pages' handler and the path prefix a log never shows
--   host.page_url(token) → url | nil       the run page's address (policy record.pages), once
--                                          a listener is known: host:listening(host, port)
--   host:keep_expiring()                   old threads expire by policy while the process runs
--   host:close()                           at the process's end
local core = require("switchboard.core")
local policy = require("switchboard.policy")
local state = require("switchboard.state")
local record_mod = require("switchboard.store.record")
local pages_routes = require("switchboard.pages.routes")

local M = {}
local H = {}
H.__index = H

function M.open(snap)
  core.fs.mkdir_p(state.dir(), tonumber("700", 8))
  local path = state.dir() .. "/record.db"
  local rec, err = record_mod.open(path, { excerpt_bytes = snap.record.excerpt_bytes })
  if not rec then
    return nil, core.error("config", ("cannot open the thread record %s: %s (check the state directory's "
      .. "permissions and free space)"):format(path, tostring(err)))
  end
  local self = setmetatable({ record = rec, stop = core.signal(), base = nil,
                              pages = pages_routes.handler{ record = rec, policy = policy.current },
                              log_hide = { pages_routes.PREFIX } }, H) -- a page's token is its credential
  self.page_url = function(token)
    local pages = policy.current().record.pages
    local base = pages.base_url or self.base
    if not pages.enabled or not base then return nil end
    return base .. "/runs/" .. token
  end
  return self
end

-- A listener that serves the pages: the first one's own address is the pages' base when
-- policy names none.
function H:listening(host, port)
  self.base = self.base or ("http://%s:%d"):format(host, port)
end

function H:keep_expiring()
  self.record:keep_expiring(policy.current, self.stop)
end

function H:close()
  self.stop:abort("stopped")
  self.record:close()
end

return M

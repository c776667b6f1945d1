-- The null executor (seed item 7): what an agent that declared no repository gets. Nothing is
-- provisioned for it, and every tool call is a legible tool error naming the wiring bug — a
-- tool without a declared resource — never a crash.
local errors = require("switchboard.exec.errors")

local M = {}
M.__index = M

function M.new(opts)
  opts = opts or {}
  return setmetatable({ backend = "local", agent = opts.agent or "this agent" }, M)
end

function M:refusal(what)
  return nil, errors.tool(("%s is not available: %s declared no repository, so it has no "
    .. "workspace or sandbox to run in. Ask an agent that works on a repository "
    .. "(for example agent:coding … in OWNER/REPO), or declare `resources = { repository = "
    .. "true }` for it in policies/agents.lua."):format(what, self.agent))
end

function M:exec() return self:refusal("bash") end
function M:read_file() return self:refusal("read_file") end
function M:write_file() return self:refusal("write_file") end

return M

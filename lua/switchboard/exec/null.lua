-- The null executor (seed item 7): what an agent that declared no repository gets. Nothing is
-- provisioned for it, and every tool call is a legible tool error naming the wiring bug — a
-- tool without a declared resource — in policy's words (errors.messages.null_executor),
-- never a crash.
local errors = require("switchboard.exec.errors")
local template = require("switchboard.policy.template")

local M = {}
M.__index = M

-- opts: agent (name), policy (function → snapshot)
function M.new(opts)
  return setmetatable({ backend = "local", agent = opts.agent, policy = opts.policy }, M)
end

function M:refusal(tool)
  local snap = self.policy()
  return nil, errors.tool(template.fill(snap.errors.messages.null_executor, {
    tool = tool, agent = self.agent,
  }))
end

function M:exec() return self:refusal("bash") end
function M:read_file() return self:refusal("read_file") end
function M:write_file() return self:refusal("write_file") end

return M

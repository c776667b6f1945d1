-- The null executor (docs/contract.md#provisioning): what an agent that declared no repository gets. Nothing is
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

function M:refusal(tool, opts)
  local snap = opts and opts.snap or self.policy()
  return nil, errors.tool(template.fill(snap.errors.messages.null_executor, {
    tool = tool, agent = self.agent,
  }))
end

function M:exec(_, opts) return self:refusal("bash", opts) end
function M:read_file(_, opts) return self:refusal("read_file", opts) end
function M:write_file(_, _, opts) return self:refusal("write_file", opts) end

return M

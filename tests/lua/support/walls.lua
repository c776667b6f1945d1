-- Whether this kernel gives the walls, answered by one real sandboxd start, and a `describe`
-- that runs a block only where it does. The specs of the walls share it:
--
--   local describe_walls = require("support.walls").probe(policy_dir(),
--     { describe = describe, it = it, pending = pending })
--
-- (busted's describe, it and pending live in the spec's environment, not in a module's.)
-- A kernel lacking a feature makes the blocks pending, with sandboxd's own words for what is
-- missing; sandboxd failing for any other reason is a failure, never a skip.
local core = require("switchboard.core")
local S = require("support.sandbox")

local M = {}

-- Reasons the walls are missing that are this checkout's, not the kernel's: the build's own
-- helper binary, or a package scripts/bootstrap installs. A spec fails on these, never skips.
local OURS = { "switchboard-walls is not next to", "bwrap is not installed" }

-- Whether `why` (instance.host's or sandboxd's words) names something the kernel lacks.
function M.kernel_lacks(why)
  if type(why) ~= "string" or why == "" then return false end
  for _, ours in ipairs(OURS) do
    if why:find(ours, 1, true) then return false end
  end
  return true
end

function M.probe(policies, bdd)
  local available, why, broken
  local ok, err = pcall(core.run, function()
    local h = S.start_sandboxd{ policies = policies, may_fail = true }
    if h.port then
      available = h.log():find('walls="cgroup v', 1, true) ~= nil
      h:stop("KILL"); h:wait()
    else
      h:wait()
      why = h.log():match("cannot build the walls[^\n]*")
      if not M.kernel_lacks(why) then broken = "sandboxd did not start: " .. h.log() end
    end
  end)
  if not ok then broken = tostring(err) end
  S.cleanup_servers()
  local describe_walls = available and bdd.describe or function(name)
    bdd.describe(name, function()
      if broken then
        bdd.it("starts", function() error(broken, 0) end)
      else
        bdd.pending("this kernel cannot give the walls: " .. tostring(why))
      end
    end)
  end
  return describe_walls, available
end

return M

-- Runs a spec body as the engine's main task, so it can await engine primitives:
--   it("…", async(function() … end))
local core = require("switchboard.core")

return function(fn)
  return function(...)
    return core.run(fn, ...)
  end
end

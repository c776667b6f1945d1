-- sandboxd's descriptor budget (issue 28): the open-files limit sized from the policy at start,
-- and the number of instances that fit in it, so that a full fleet is refused in words (the
-- fleet-busy answer) before the kernel refuses with EMFILE and commands are lost.
--
--   local b = descriptors.size{max_instances = n, spares = n, max_connections = n, log = fn}
--   b.limit, b.hard, b.need, b.capacity   (capacity: instances that fit, running a command each)
--
-- What sandboxd holds, measured (`ls /proc/PID/fd` with instances awake and commands running):
-- per awake instance the holder's stdout and stderr pipes, the spawner's socket and the
-- workspace's directory handle; per running command its stdout and stderr pipes and its pidfd;
-- per request its connection (bounded apart by timeouts server.max_connections).
local core = require("switchboard.core")

local M = {}

M.PER_INSTANCE = 4
M.PER_COMMAND = 3
-- The server's own: the listener, the loop's handles, the log, policy reloads, `du` and the
-- walls helper's runs, the metrics listener; with room to spare.
M.RESERVE = 128

-- The connections the HTTP server will allow under a limit (src/http/server.c
-- clamp_connections: it keeps 64 + limit/8 for everything else).
local function connections_under(limit, max_connections)
  local allowed = math.max(16, limit - (64 + limit // 8))
  return math.min(max_connections, allowed)
end

-- Descriptors a fleet of n instances needs, one command running in each.
function M.need(instances, max_connections)
  return M.RESERVE + max_connections + instances * (M.PER_INSTANCE + M.PER_COMMAND)
end

-- Instances that fit under a limit once connections and the reserve are counted.
function M.capacity(limit, max_connections)
  local left = limit - M.RESERVE - connections_under(limit, max_connections)
  return math.max(0, left // (M.PER_INSTANCE + M.PER_COMMAND))
end

function M.size(opts)
  local instances = opts.max_instances + (opts.spares or 0)
  local need = M.need(instances, opts.max_connections)
  local limit, hard = core.open_files_limit(need)
  local capacity = math.max(0, M.capacity(limit, opts.max_connections) - (opts.spares or 0))
  local b = { limit = limit, hard = hard, need = need, capacity = capacity }
  local log = opts.log or core.log
  if capacity < opts.max_instances then
    log("warn", "sandboxd.descriptors_short", {
      open_files_limit = limit, hard_limit = hard, needed = need, max_instances = opts.max_instances,
      instances_that_fit = capacity,
      hint = "raise the hard open-files limit (LimitNOFILE= in the unit, ulimit -Hn) or lower "
        .. "max_instances / timeouts server.max_connections; past the fit new threads get fleet-busy",
    })
  else
    log("info", "sandboxd.descriptors", { open_files_limit = limit, needed = need, instances_that_fit = capacity })
  end
  return b
end

return M

-- sandboxd's descriptor budget (issue 28): the open-files limit sized from the policy at start,
-- and the number of instances that fit in it, so that a full fleet is refused in words (the
-- fleet-busy answer) before the kernel refuses with EMFILE and commands are lost.
--
--   local b = descriptors.size{max_instances = n, spares = n, max_connections = n, log = fn}
--   b.limit, b.hard, b.need, b.capacity   (capacity: instances that fit, running a command each)
--   b.connections                          (the server.max_connections the HTTP server gets)
--   b.counters                             (instances whose two cgroup counter files the exec
--                                           lane may hold open: the room the fleet leaves)
--
-- What sandboxd holds, measured (`ls -l /proc/PID/fd` on a walled sandboxd, three instances
-- awake, each running a `sleep`): per awake instance the holder's pidfd and its stderr pipe (its
-- stdout ends once it said ready: walls/process.c stdout_to_null), the init's pidfd
-- (core.pid_watch), the workspace's directory handle (O_PATH, for /read and /write) and the
-- engine's link to its spawner (src/proc/link.c) — 5; per running command its stdout and
-- stderr pipes and, unwalled, its pidfd — 3; per request its connection (bounded by the
-- connection cap this budget gives the server). The cgroup counters are opened per read
-- (shell/instance.lua), not held: two descriptors per instance more would leave 2,000 instances
-- short of a 20,000 open-files limit. The exec lane (sandboxd/lane.lua) holds them open where
-- the limit has room past the whole fleet (four opens a request fewer, ~40 µs of CPU: issue
-- 43): asked for beside the fleet's need, and given only out of what the fleet leaves, never
-- taken from the instances' share.
local core = require("switchboard.core")

local M = {}

M.PER_INSTANCE = 5
M.PER_COMMAND = 3
-- The exec lane's held counter files per armed instance (memory.events, pids.events), when the
-- limit has room for them (M.size: b.counters).
M.COUNTERS = 2
-- The server's own: the listener, the loop's handles, the log, policy reloads, `du` and the
-- walls helper's runs, the metrics listener; with room to spare. A quarter of the limit, from
-- 64 (what it holds idle is about 20) to 128, so that a low limit still has room for work.
M.RESERVE = 128
M.RESERVE_FLOOR = 64
-- Connections never get fewer than the HTTP server's own floor (src/http/server.c).
M.MIN_CONNECTIONS = 16

function M.reserve(limit)
  return math.min(M.RESERVE, math.max(M.RESERVE_FLOOR, limit // 4))
end

-- Descriptors a fleet of n instances needs, one command running in each.
function M.need(instances, max_connections)
  return M.RESERVE + max_connections + instances * (M.PER_INSTANCE + M.PER_COMMAND)
end

-- The one split of a limit: the reserve, then the connections — all the fleet of `instances`
-- leaves them, but never fewer than half of what is left after the reserve, nor more than
-- max_connections — then the instances in the rest. The connection cap is passed to the HTTP
-- server, so its own clamp (64 + limit/8 for everything else) never takes the instances' share.
-- → connections, capacity (instances that fit, a command running in each)
function M.split(limit, instances, max_connections)
  local per = M.PER_INSTANCE + M.PER_COMMAND
  local left = limit - M.reserve(limit)
  local connections = math.max(left - instances * per, left // 2)
  connections = math.max(M.MIN_CONNECTIONS, math.min(max_connections, connections))
  return connections, math.max(0, (left - connections) // per)
end

function M.size(opts)
  local spares = opts.spares or 0
  local instances = opts.max_instances + spares
  local need = M.need(instances, opts.max_connections)
  local limit, hard = core.open_files_limit(need + instances * M.COUNTERS)
  local connections, fit = M.split(limit, instances, opts.max_connections)
  -- the lane's counters in the room past the whole fleet (its instances each with a command, the
  -- connections, the reserve), and that room is then not the instances' (a reload that raises
  -- max_instances finds the fit it left)
  local room = limit - M.reserve(limit) - connections - instances * (M.PER_INSTANCE + M.PER_COMMAND)
  local counters = math.max(0, math.min(instances, room // M.COUNTERS))
  if counters > 0 then
    fit = math.max(0, (limit - M.reserve(limit) - connections - counters * M.COUNTERS)
      // (M.PER_INSTANCE + M.PER_COMMAND))
  end
  local capacity = math.max(0, fit - spares)
  local b = { limit = limit, hard = hard, need = need, capacity = capacity, connections = connections,
    counters = counters }
  local log = opts.log or core.log
  if connections < opts.max_connections then
    log("warn", "sandboxd.max_connections_clamped", {
      max_connections = opts.max_connections, clamped_to = connections, open_files_limit = limit,
      hint = "raise the hard open-files limit (LimitNOFILE= in the unit, ulimit -Hn)",
    })
  end
  if capacity < opts.max_instances then
    log("warn", "sandboxd.descriptors_short", {
      open_files_limit = limit, hard_limit = hard, needed = need, max_instances = opts.max_instances,
      instances_that_fit = capacity, connections = connections,
      hint = "raise the hard open-files limit (LimitNOFILE= in the unit, ulimit -Hn) or lower "
        .. "max_instances / timeouts server.max_connections; past the fit new threads get fleet-busy",
    })
  else
    log("info", "sandboxd.descriptors", { open_files_limit = limit, needed = need, instances_that_fit = capacity,
      connections = connections, lane_counters_held = counters })
  end
  return b
end

return M

-- The walls a server's commands run behind (docs/isolation.md), built the same way for every
-- server subcommand that runs threads' commands (sandboxd, resident): `--no-walls` runs
-- without them, loudly, for development; otherwise the kernel must give them or the server
-- does not start.
local core = require("switchboard.core")
local policy = require("switchboard.policy")
local instance = require("switchboard.shell.instance")

local M = {}

-- p: the command's prologue; who: "sandboxd" | "resident"; what: "sandbox instances" | …
-- Returns walls (nil with --no-walls) or false, status after saying why.
function M.build(p, opts, snap, root, who, what, config_status)
  if opts.no_walls then
    core.log("warn", who .. ".no_walls", { warning = "--no-walls: commands run WITHOUT walls "
      .. "(no namespaces, no cgroups, the server's own uid); for development only" })
    io.stderr:write("switchboard " .. who .. ": WARNING: --no-walls: every command runs as this "
      .. "server's user, with a view of the whole host; never serve real threads like this\n")
    return nil
  end
  -- spare instances only for sandboxd: its new threads start on empty workspaces in root (the
  -- resident's start on worktrees it made)
  local walls, why = instance.host{ snap = snap, policy = policy.current, scratch = root, log = core.log,
    spares = who == "sandboxd" }
  if not walls then
    return false, p:fail(config_status, "cannot build the walls around " .. what .. ": " .. tostring(why)
      .. ". Run where the kernel gives user namespaces, cgroups and bubblewrap (docs/isolation.md), "
      .. "or pass --no-walls to run without them for development only.")
  end
  return walls
end

return M

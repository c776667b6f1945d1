-- The walls a server's commands run behind (docs/isolation.md), built the same way for every
-- server subcommand that runs threads' commands (sandboxd, resident): `--no-walls` runs
-- without them, loudly, for development; otherwise the kernel must give them or the server
-- does not start.
local core = require("switchboard.core")
local policy = require("switchboard.policy")
local instance = require("switchboard.shell.instance")

local M = {}

-- A server's --root: the missing directories above it made searchable (0755, as any /var/lib
-- directory; an instance's uid walks through them to its workspace: docs/isolation.md), the root
-- itself private (0700; the walls make it 0711, searchable but not listable). → true | nil, err
function M.make_root(dir)
  local parent = dir:match("^(.+)/[^/]+/*$")
  if parent and not core.fs.exists(parent) then
    local ok, err = core.fs.mkdir_p(parent, tonumber("755", 8))
    if not ok then return nil, err end
  end
  return core.fs.mkdir_p(dir, tonumber("700", 8))
end

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
    owner = { kind = who, root = root, listen = opts.listen },
    spares = who == "sandboxd",
    -- each workspace a file system of its own (docs/isolation.md "Workspace size while writing")
    disks = who == "sandboxd" }
  if walls == nil and why.code == "uids" then
    return false, p:fail(config_status, "cannot build the walls around " .. what .. ": " .. tostring(why))
  end
  if not walls then
    return false, p:fail(config_status, "cannot build the walls around " .. what .. ": " .. tostring(why)
      .. ". Run where the kernel gives user namespaces, cgroups and bubblewrap (docs/isolation.md), "
      .. "or pass --no-walls to run without them for development only.")
  end
  return walls
end

return M

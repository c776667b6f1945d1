-- sandboxd's disk budget (issue 35 item 3; docs/isolation.md "The host's disk"): whether the
-- fleet's workspaces fit the host's disk, said once at start. Each workspace image is wholly
-- reserved on the host's disk when its instance is made (src/walls/disk.c), so a fleet larger
-- than the disk never loses a write — its instances past the fit are refused in words, "the
-- host's disk is full: …" — but the operator hears of it here, before a thread does.
--
--   disk_budget.check{root = DIR, max_instances = n, spares = n, isolation = snap.isolation,
--                     deadline_ms = ms, log = fn, slept = n?}  → the room read ({size, avail}) or nil
local run = require("switchboard.shell.run")

local M = {}

local MIB, GIB = 1024 * 1024, 1024 * 1024 * 1024

-- "52 GiB", "76.9 GiB", "700 MiB": a disk's amounts, to the tenth of a GiB.
local function size(bytes)
  if bytes >= GIB then return (("%.1f GiB"):format(bytes / GIB):gsub("%.0 ", " ")) end
  return ("%d MiB"):format(bytes // MIB)
end

-- The file system holding `root`: its size and the bytes free to us, or nil.
function M.room(root, deadline_ms)
  local r = run.tool{ argv = { "df", "-B1", "--output=size,avail", root }, deadline_ms = deadline_ms }
  if not r or r.exit ~= 0 then return nil end
  local size, avail = (r.stdout or ""):match("\n%s*(%d+)%s+(%d+)")
  if not size then return nil end
  return { size = tonumber(size), avail = tonumber(avail) }
end

-- Workspaces of `each` bytes that fit in `avail` bytes while `reserve` stay free.
function M.fit(avail, each, reserve)
  return math.max(0, (avail - reserve) // each)
end

-- What the fleet promises beyond the host's free disk, in words, or nil when it fits.
function M.problem(iso, workspaces, room)
  local each, reserve = iso.workspace_max_bytes, iso.disk_reserve_bytes
  local promised = workspaces * each + reserve
  if promised <= room.avail then return nil end
  return ("the fleet's workspaces can take %s (%d × %s, workspace_max_bytes, plus disk_reserve_bytes %s) "
    .. "and the host's disk has %s free of %s: %d of them fit; past the fit new threads are "
    .. "refused (\"the host's disk is full\"). Lower workspace_max_bytes or max_instances, or "
    .. "give --root a larger disk"):format(size(promised), workspaces, size(each), size(reserve),
      size(room.avail), size(room.size), M.fit(room.avail, each, reserve))
end

function M.check(opts)
  local iso = opts.isolation
  if iso.workspace_size ~= "filesystem" then return nil end -- measured: no image (docs/sandboxd.md)
  local room = M.room(opts.root, opts.deadline_ms)
  local log = opts.log
  if not room then
    log("warn", "sandboxd.disk_unknown", { root = opts.root, hint = "df could not read --root's file system" })
    return nil
  end
  local workspaces = opts.max_instances + (opts.spares or 0)
  local why = M.problem(iso, workspaces, room)
  local fields = { root = opts.root, workspaces = workspaces, workspace_max_bytes = iso.workspace_max_bytes,
    disk_reserve_bytes = iso.disk_reserve_bytes, disk_free_bytes = room.avail, disk_size_bytes = room.size,
    workspaces_that_fit = M.fit(room.avail, iso.workspace_max_bytes, iso.disk_reserve_bytes),
    -- slept workspaces kept from an earlier run: their images hold their disk already (not in
    -- disk_free_bytes), so awake and slept together never promise more than the disk has
    slept_workspaces = opts.slept, slept_max_bytes = opts.slept and iso.slept_max_bytes or nil }
  if why then
    fields.problem = why
    log("warn", "sandboxd.disk_short", fields)
  else
    log("info", "sandboxd.disk", fields)
  end
  return room
end

return M

-- Slept workspaces (issue 37; docs/sandboxd.md "Instances: workspaces, sleep and the fleet
-- ceiling"): a thread's workspace outlives its instance. On idle sleep and on shutdown the
-- instance's processes end and its workspace — `<root>/<dir_name(key)>`, holding the ext4 image
-- (walled) or the files themselves (measured mode) — stays; the thread's next request remounts it
-- in a fresh instance. Slept workspaces live under a budget (policies/isolation.lua
-- slept_max_bytes, slept_max_age_ms, the latter never past policies/record.lua retention_ms, so an
-- image never outlives its thread's record): the oldest are evicted first, and an evicted
-- thread's next request is told so ("workspace expired (…)"), through a tombstone
-- `<root>/.expired/<dir name>` holding the reason.
--
--   keep.list(root, awake?, deadline_ms)   → {{name, dir, bytes, slept_s}} oldest first
--                                           (awake: dir name → true, left out)
--   keep.enforce{root, awake, isolation, record, now_s?, deadline_ms, log} → evicted count
--   keep.evict(root, name, why)             the workspace removed, its tombstone written
--   keep.expired(root, name)                → the tombstone's reason (and it is removed) | nil
--   keep.recover(root, deadline_ms, log)    at start: trash and half-made images removed, each
--                                           image checked (e2fsck -p): kept, repaired or
--                                           discarded, with a log line → {kept, repaired, discarded}
--   keep.in_use(dir, deadline_ms)           → an instance has its image mounted (the lock)
--   keep.kind(path, deadline_ms)            → "directory" | "symbolic link" | … (lstat) | nil
--   keep.compact(dir, wait_ms, deadline_ms) a slept image's free blocks given back to the disk
--   keep.touch(dir, deadline_ms)            its sleep time (the directory's mtime) set to now
local core = require("switchboard.core")
local run = require("switchboard.shell.run")

local M = {}

M.IMAGE = ".workspace.img"
M.EXPIRED = ".expired"
M.TRASH = ".trash-"

local WORKSPACE_NAME = "%-" .. ("%x"):rep(16) .. "$"

function M.is_workspace(name) return name:find(WORKSPACE_NAME) ~= nil and name:sub(1, 1) ~= "." end

local function tool(argv, deadline_ms)
  -- e2fsck lives in the sbin directories, which a service's PATH may lack
  return run.tool{ argv = argv, deadline_ms = deadline_ms or 30000,
    env = { PATH = (os.getenv("PATH") or "/usr/bin:/bin") .. ":/usr/sbin:/sbin" } }
end

-- Whether an instance has the workspace's image mounted now (its holder's lock on the image,
-- src/walls/disk.c hold_image). A directory without an image (measured mode) cannot tell: false.
function M.in_use(dir, deadline_ms)
  local image = dir .. "/" .. M.IMAGE
  if not core.fs.exists(image) then return false end
  local r = tool({ "flock", "-n", "-E", "75", image, "true" }, deadline_ms)
  return r ~= nil and r.exit == 75
end

-- What is at path, not following a link: "directory", "symbolic link", "regular file" … | nil.
function M.kind(path, deadline_ms)
  local r = tool({ "stat", "-c", "%F", "--", path }, deadline_ms)
  return r and r.exit == 0 and (r.stdout or ""):match("^([^\n]+)") or nil
end

-- A slept image gives its free blocks back to the host's disk (e2fsck -E discard punches them
-- out of the file: a 2 GiB image holding 13 MB of files then holds ~25 MB on the host), so
-- the budget counts what slept threads really hold. Under the image's lock, taken once the
-- instance's loop device has let it go (src/walls/disk.c hold_image), and the thread's next
-- holder reserves the image whole again only under that lock, after this — or is refused in
-- words ("the host's disk is full"), its files intact. → true | nil, err (kind workspace)
function M.compact(dir, wait_ms, deadline_ms)
  local image = dir .. "/" .. M.IMAGE
  if not core.fs.exists(image) then return true end
  -- e2fsck discards nothing in a run that changed the file system, and every run here does: the
  -- walls' helper removes the empty lost+found at each mount (src/walls/mounts.c), e2fsck makes
  -- it again — so a second run, on a clean file system, is the one that discards
  local r = tool({ "flock", "-x", "-w", ("%.1f"):format(wait_ms / 1000), "-E", "75", image,
    "sh", "-c", 'e2fsck -f -y -E discard "$1"; rc=$?; if [ $rc -eq 1 ]; then e2fsck -f -y -E discard "$1"; rc=$?; fi; exit $rc',
    "sh", image }, deadline_ms)
  if r and (r.exit == 0 or r.exit == 1) then return true end
  if r and r.exit == 75 then return nil, core.error("workspace", "its loop device was not released in time") end
  return nil, core.error("workspace", ("e2fsck exit %s: %s"):format(tostring(r and r.exit),
    tostring(r and r.stderr or ""):sub(1, 200)))
end

function M.touch(dir, deadline_ms) tool({ "touch", "-c", "--", dir }, deadline_ms) end

-- A slept workspace's bytes, measured once per sleep: dir → {mtime_ms, bytes}. A pass follows
-- every sleep (sandboxd/server.lua), and a `stat` and a `du` process per slept workspace per pass
-- made each sleep cost O(slept) processes (issue 43). Its bytes change only while it is awake,
-- and every sleep sets its mtime anew (Runner:stop: compacted, then touched), so the mtime, read
-- in-process, keys the measurement: a pass runs `du` only for what slept since the last one.
local measured = {}

-- What a slept workspace holds on the host's disk (du: allocated blocks — an image's whole
-- reservation), from the last pass when it has not slept again since (same mtime).
local function bytes_of(dir, mtime_ms, deadline_ms)
  local m = measured[dir]
  if m and m.mtime_ms == mtime_ms then return m.bytes end
  local du = tool({ "du", "-s", "-x", "-P", "--block-size=1", "--", dir }, deadline_ms)
  local bytes = du and du.exit == 0 and tonumber((du.stdout or ""):match("^(%d+)"))
  measured[dir] = bytes and { mtime_ms = mtime_ms, bytes = bytes } or nil -- a failed du: next pass
  return bytes or 0
end

-- Every workspace in root not awake, with the bytes it holds on the host's disk and its sleep
-- time (the directory's mtime, set at sleep).
function M.list(root, awake, deadline_ms)
  awake = awake or {}
  local out, seen = {}, {}
  local names = core.fs.list(root) or {}
  local handle = #names > 0 and core.fs.root(root) or nil
  for _, name in ipairs(names) do
    if M.is_workspace(name) and not awake[name] then
      local dir = root .. "/" .. name
      local st = handle and handle:stat(name) -- not followed, as `stat` without -L
      if st then
        seen[dir] = true
        out[#out + 1] = { name = name, dir = dir, bytes = bytes_of(dir, st.mtime_ms, deadline_ms),
          slept_s = st.mtime_ms // 1000 }
      end
    end
  end
  if handle then handle:close() end
  local prefix = root .. "/"
  for dir in pairs(measured) do -- gone, or awake again (measured anew at its next sleep)
    if not seen[dir] and dir:sub(1, #prefix) == prefix then measured[dir] = nil end
  end
  table.sort(out, function(a, b)
    if a.slept_s ~= b.slept_s then return a.slept_s < b.slept_s end
    return a.name < b.name
  end)
  return out
end

-- The workspace removed and its thread's next request told why (a tombstone, mode 0600).
-- The rename comes first, before anything here yields: a thread woken after it finds no
-- workspace (and, once the tombstone is written, the reason).
function M.evict(root, name, why, deadline_ms)
  local from = root .. "/" .. name
  local trash = ("%s/%s%s-%s"):format(root, M.TRASH, name, core.crypto.hex(core.crypto.random_bytes(4)))
  if not os.rename(from, trash) then return false end
  core.fs.mkdir_p(root .. "/" .. M.EXPIRED, tonumber("700", 8))
  core.fs.write_file(root .. "/" .. M.EXPIRED .. "/" .. name, why, tonumber("600", 8))
  local r = tool({ "rm", "-rf", "--", trash }, deadline_ms)
  if (not r or r.exit ~= 0) and core.fs.exists(trash) then pcall(core.fs.remove_tree, trash) end
  return true
end

-- The tombstone's reason for this workspace, removed as it is read (told once).
function M.expired(root, name)
  local path = root .. "/" .. M.EXPIRED .. "/" .. name
  local why = core.fs.exists(path) and core.fs.read_file(path)
  if why then os.remove(path) end
  return why or nil
end

-- The sleep time of a workspace directory (seconds since the epoch), or nil.
function M.slept_s(dir, deadline_ms)
  local st = tool({ "stat", "-c", "%Y", "--", dir }, deadline_ms)
  return st and st.exit == 0 and tonumber((st.stdout or ""):match("%d+")) or nil
end

function M.age_text(ms)
  local h = ms / 3600000
  if h >= 48 then return ("%g days"):format(math.floor(h / 24 * 10 + 0.5) / 10) end
  if h >= 1 then return ("%g h"):format(math.floor(h * 10 + 0.5) / 10) end
  if ms >= 60000 then return ("%d min"):format(ms // 60000) end
  return ("%d s"):format(ms // 1000)
end

local function mib(bytes) return ("%d MiB"):format(bytes // (1024 * 1024)) end

-- The age past which a slept workspace is evicted: slept_max_age_ms, never past the thread
-- record's retention (an image never outlives the record of its thread).
function M.max_age_ms(isolation, record)
  local age = isolation.slept_max_age_ms
  if record and record.retention_ms and record.retention_ms < age then return record.retention_ms end
  return age
end

function M.enforce(opts)
  local iso = opts.isolation
  local now_s = opts.now_s or os.time()
  local all = M.list(opts.root, opts.awake, opts.deadline_ms)
  local total = 0
  for _, w in ipairs(all) do total = total + w.bytes end
  local max_age = M.max_age_ms(iso, opts.record)
  local n = 0
  for _, w in ipairs(all) do -- oldest first
    local age_ms = (now_s - w.slept_s) * 1000
    local why
    if age_ms > max_age then
      why = ("workspace expired (policy: slept longer than %s, policies/isolation.lua slept_max_age_ms)"):format(M.age_text(max_age))
    elseif total > iso.slept_max_bytes then
      why = ("workspace expired (policy: slept workspaces past %s, policies/isolation.lua slept_max_bytes; the oldest go first)")
        :format(mib(iso.slept_max_bytes))
    end
    if why and (not opts.awake_now or not opts.awake_now(w.name)) then
      if M.evict(opts.root, w.name, why, opts.deadline_ms) then
        n = n + 1
        total = total - w.bytes
        if opts.log then
          opts.log("info", "sandboxd.workspace_evicted", { workspace = w.name:match("(%x+)$"),
            bytes = w.bytes, slept_s = now_s - w.slept_s, reason = why })
        end
      end
    end
  end
  return n
end

-- At start: what an unclean stop left. Trash (an interrupted removal) and a half-made image
-- (.workspace.img.new) are removed; each kept image is checked with `e2fsck -p` (a clean one
-- in milliseconds; one a crash left unclean is repaired, or the workspace is discarded and its
-- thread told so), each with a log line.
function M.recover(root, deadline_ms, log)
  local counts = { kept = 0, repaired = 0, discarded = 0 }
  for _, name in ipairs(core.fs.list(root) or {}) do
    local dir = root .. "/" .. name
    if name:sub(1, #M.TRASH) == M.TRASH then
      core.fs.remove_tree(dir)
    elseif M.is_workspace(name) then
      os.remove(dir .. "/" .. M.IMAGE .. ".new")
      local image = dir .. "/" .. M.IMAGE
      local verdict = "kept"
      if core.fs.exists(image) then
        local r = tool({ "e2fsck", "-p", image }, deadline_ms)
        local code = r and r.exit
        if code == 1 or code == 2 then
          verdict = "repaired"
          log("warn", "sandboxd.workspace_repaired", { workspace = name:match("(%x+)$"), e2fsck_exit = code })
        elseif code ~= 0 then
          verdict = "discarded"
          local why = ("workspace expired (its image was damaged by an unclean stop of sandboxd and could "
            .. "not be repaired: e2fsck exit %s)"):format(tostring(code))
          log("error", "sandboxd.workspace_discarded", { workspace = name:match("(%x+)$"),
            e2fsck_exit = code, stderr = r and (r.stderr or ""):sub(1, 300) })
          M.evict(root, name, why, deadline_ms)
        end
      end
      counts[verdict] = counts[verdict] + 1
    end
  end
  return counts
end

return M

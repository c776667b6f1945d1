-- Prepared repository bases (issue 37 item 3; docs/sandboxd.md "Repository bases"): a new
-- thread on a repository starts from a copy of a workspace that already cloned it and ran its
-- `.switchboard/setup.sh`, instead of cloning and setting up again.
--
-- A base is `<root>/.bases/<key>/`, key a hash of the repository's name: `ws/` (a copy of the
-- workspace directory that prepared it — walled, its ext4 image; without walls, its files) and
-- `meta` ("<sha> <branch> <made_s>"). It is made lazily: the first thread of a repository with
-- no usable base clones and sets up in its own workspace (the agent's clone script, with the
-- credential its request carried: sandboxd never stores one); the script leaves
-- `.git/switchboard-base` (the commit) when it cloned the default branch and setup succeeded,
-- and sandboxd copies that workspace here. The copy is built beside (`<key>.new`) and renamed
-- into place whole: a crash leaves no half-made base (removed at start, with a log line), and
-- the previous base serves until then.
-- A base older than policies/isolation.lua bases_refresh_ms, or marked stale (a push to the
-- repository: `<key>.stale`), is not used: the next new thread prepares it again.
--
--   bases.path(root, repo)                 → the base's directory
--   bases.info(root, repo)                 → {sha, branch, made_s} | nil (no complete base)
--   bases.usable(info, refresh_ms, stale, now_s?) → bool
--   bases.stale(root, repo)                → a push marked it stale since it was made
--   bases.mark_stale(root, repo)           the next new thread prepares it again
--   bases.copy_into(root, repo, dir, deadline_ms) → info | nil, err   (dir must not exist)
--   bases.capture(root, repo, dir, meta, deadline_ms) → true | nil, err
--   bases.recover(root, deadline_ms, log)  half-made bases and trash removed → count
local core = require("switchboard.core")
local run = require("switchboard.shell.run")

local M = {}

M.DIR = ".bases"
M.MARKER = ".git/switchboard-base"

local MODE = tonumber("700", 8)

local function tool(argv, deadline_ms)
  return run.tool{ argv = argv, deadline_ms = deadline_ms or 60000 }
end

function M.key(repo)
  return core.crypto.hex(core.crypto.sha256("repository-base\0" .. repo)):sub(1, 24)
end

function M.path(root, repo)
  return root .. "/" .. M.DIR .. "/" .. M.key(repo)
end

function M.info(root, repo)
  local base = M.path(root, repo)
  local meta = core.fs.exists(base .. "/meta") and core.fs.read_file(base .. "/meta")
  if not meta then return nil end
  local sha, branch, made = meta:match("^(%x+) (%S+) (%d+)")
  if not sha then return nil end
  return { sha = sha, branch = branch, made_s = tonumber(made) }
end

function M.stale(root, repo, info)
  local mark = M.path(root, repo) .. ".stale"
  if not core.fs.exists(mark) then return false end
  local at = tonumber(core.fs.read_file(mark) or "")
  return at == nil or info == nil or at >= info.made_s
end

function M.mark_stale(root, repo)
  core.fs.mkdir_p(root .. "/" .. M.DIR, MODE)
  return core.fs.write_file(M.path(root, repo) .. ".stale", tostring(os.time()), tonumber("600", 8))
end

function M.usable(info, refresh_ms, stale, now_s)
  if not info or stale then return false end
  return ((now_s or os.time()) - info.made_s) * 1000 < refresh_ms
end

-- A copy that costs what the files hold, not their size: a reflink where the file system
-- shares blocks (btrfs, xfs), else a sparse copy (an ext4 image's holes stay holes: bench/keep.lua).
local function copy_tree(from, to, deadline_ms)
  local r = tool({ "cp", "-a", "--reflink=auto", "--sparse=always", "--", from .. "/.", to .. "/" }, deadline_ms)
  if r and r.exit == 0 then return true end
  return nil, core.error("workspace", ("the copy failed (exit %s): %s"):format(tostring(r and r.exit),
    tostring(r and r.stderr or ""):sub(1, 200)))
end

local function remove(path, deadline_ms)
  if not core.fs.exists(path) then return end
  local r = tool({ "rm", "-rf", "--", path }, deadline_ms)
  if (not r or r.exit ~= 0) and core.fs.exists(path) then pcall(core.fs.remove_tree, path) end
end

-- A new thread's workspace as a copy of the base. A half-made copy is removed (the thread then
-- starts empty and clones).
function M.copy_into(root, repo, dir, deadline_ms)
  local info = M.info(root, repo)
  if not info then return nil, core.error("workspace", "no base") end
  local ok, err = core.fs.mkdir_p(dir, MODE)
  if not ok then return nil, err end
  ok, err = copy_tree(M.path(root, repo) .. "/ws", dir, deadline_ms)
  if not ok then
    remove(dir, deadline_ms)
    return nil, err
  end
  return info
end

-- The workspace dir (its instance told to sync first, by the caller) copied as the repository's
-- base. An image copied while mounted is an ext4 whose journal needs replaying: e2fsck -p does it
-- on the copy, which nothing has mounted.
function M.capture(root, repo, dir, meta, deadline_ms)
  local base = M.path(root, repo)
  local new = ("%s.new-%s"):format(base, core.crypto.hex(core.crypto.random_bytes(4)))
  core.fs.mkdir_p(root .. "/" .. M.DIR, MODE)
  local ok, err = core.fs.mkdir_p(new .. "/ws", MODE)
  if ok then ok, err = copy_tree(dir, new .. "/ws", deadline_ms) end
  local image = new .. "/ws/.workspace.img"
  if ok and core.fs.exists(image) then
    local r = run.tool{ argv = { "e2fsck", "-p", image }, deadline_ms = deadline_ms or 60000,
      env = { PATH = (os.getenv("PATH") or "/usr/bin:/bin") .. ":/usr/sbin:/sbin" } }
    if not r or (r.exit ~= 0 and r.exit ~= 1) then
      ok, err = nil, core.error("workspace", ("the copied image did not check clean (e2fsck exit %s)")
        :format(tostring(r and r.exit)))
    end
  end
  if ok then
    ok, err = core.fs.write_file(new .. "/meta", ("%s %s %d\n"):format(meta.sha, meta.branch, os.time()),
      tonumber("600", 8))
  end
  if not ok then
    remove(new, deadline_ms)
    return nil, err
  end
  -- the previous base serves until the new one is whole; the swap is two renames
  local trash = ("%s/%s/.trash-%s"):format(root, M.DIR, core.crypto.hex(core.crypto.random_bytes(4)))
  local had = core.fs.exists(base) and os.rename(base, trash)
  if not os.rename(new, base) then
    remove(new, deadline_ms)
    if had then os.rename(trash, base) end
    return nil, core.error("workspace", "the new base could not be put in place")
  end
  os.remove(base .. ".stale")
  if had then remove(trash, deadline_ms) end
  return true
end

function M.recover(root, deadline_ms, log)
  local dir = root .. "/" .. M.DIR
  local n = 0
  for _, name in ipairs(core.fs.list(dir) or {}) do
    if name:find("%.new%-%x+$") or name:sub(1, 7) == ".trash-" then
      remove(dir .. "/" .. name, deadline_ms)
      n = n + 1
      if log then log("warn", "sandboxd.base_half_made_removed", { base = name:match("^(%x+)") or "trash" }) end
    end
  end
  return n
end

return M

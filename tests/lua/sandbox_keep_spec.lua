-- Slept workspaces' budget and start-up check (sandboxd/keep.lua, issue 37), on real
-- directories and real ext4 images (mkfs.ext4, e2fsck): the oldest evicted first, by bytes and by
-- age (never past the thread record's retention), awake ones never; a tombstone told once; at
-- start a clean image kept, an unclean one repaired, a damaged one discarded — each with a log
-- line — and half-made images and trash removed.
local core = require("switchboard.core")
local S = require("support.sandbox")
local keep = require("switchboard.sandboxd.keep")
local workspace = require("switchboard.shell.workspace")

local MiB = 1024 * 1024
local DAY_MS = 24 * 3600 * 1000

local function sh(cmd)
  local ok = os.execute(cmd)
  assert(ok, "failed: " .. cmd)
end

-- A workspace directory holding `mib` MiB, slept `ago_s` seconds before now.
local function slept_dir(root, key, mib, ago_s)
  local dir = workspace.path(root, key)
  sh(("mkdir -p '%s' && head -c %dM /dev/urandom > '%s/data' && touch -d @%d '%s'")
    :format(dir, mib, dir, os.time() - ago_s, dir))
  return workspace.dir_name(key)
end

local function logger()
  local lines = {}
  return function(level, event, fields) lines[#lines + 1] = { level = level, event = event, fields = fields } end, lines
end

local ISO = { slept_max_bytes = 1024 * MiB, slept_max_age_ms = 7 * DAY_MS }

describe("slept workspaces (sandboxd/keep.lua)", function()
  it("evicts the oldest first past slept_max_bytes, never an awake one; the tombstone is told once", function()
    core.run(function()
      local root = S.tmpdir()
      local oldest = slept_dir(root, "oldest", 4, 300)
      local awake = slept_dir(root, "awake", 4, 200)
      local middle = slept_dir(root, "middle", 4, 100)
      local newest = slept_dir(root, "newest", 4, 10)
      local log, lines = logger()
      local iso = { slept_max_bytes = 9 * MiB, slept_max_age_ms = ISO.slept_max_age_ms }
      local n = keep.enforce{ root = root, awake = { [awake] = true }, isolation = iso, log = log }
      assert.equal(1, n) -- 12 MiB slept (the awake one not counted): the oldest goes, 8 MiB stay
      assert.is_false(core.fs.exists(root .. "/" .. oldest))
      for _, name in ipairs({ awake, middle, newest }) do assert.is_true(core.fs.exists(root .. "/" .. name)) end
      assert.equal("sandboxd.workspace_evicted", lines[1].event)
      local function mode(path) return io.popen("stat -c %a '" .. path .. "'"):read("l") end
      assert.equal("600", mode(root .. "/.expired/" .. oldest)) -- root's alone
      assert.equal("700", mode(root .. "/.expired"))
      local why = keep.expired(root, oldest)
      assert.equal("workspace expired (policy: slept workspaces past 9 MiB, policies/isolation.lua "
        .. "slept_max_bytes; the oldest go first)", why)
      assert.is_nil(keep.expired(root, oldest))
      S.rm(root)
    end)
  end)

  it("measures a slept workspace once per sleep: a pass after another runs no du for it (issue 43)", function()
    core.run(function()
      local root = S.tmpdir()
      local name = slept_dir(root, "once", 2, 100)
      local dir = root .. "/" .. name
      local function bytes() return keep.list(root)[1].bytes end
      local first = bytes()
      assert.is_true(first >= 2 * MiB, tostring(first))
      -- more written under it with its sleep time kept (the directory's own mtime is unchanged:
      -- an existing file grows): a later pass reuses what the first measured
      sh(("head -c 3M /dev/urandom >> '%s/data'"):format(dir))
      assert.equal(first, bytes())
      -- slept again (Runner:stop touches it): measured anew
      sh(("touch -d @%d '%s'"):format(os.time() - 5, dir))
      assert.is_true(bytes() >= 5 * MiB)
      S.rm(root)
    end)
  end)

  it("evicts past slept_max_age_ms, and never keeps one past the thread record's retention", function()
    core.run(function()
      local root = S.tmpdir()
      local week = slept_dir(root, "week", 1, 8 * 24 * 3600)
      local two_days = slept_dir(root, "two-days", 1, 2 * 24 * 3600 + 60)
      local fresh = slept_dir(root, "fresh", 1, 60)
      assert.equal(1, keep.enforce{ root = root, isolation = ISO })
      assert.is_false(core.fs.exists(root .. "/" .. week))
      assert.equal("workspace expired (policy: slept longer than 7 days, policies/isolation.lua slept_max_age_ms)",
        keep.expired(root, week))
      -- a record kept 2 days: the workspace never outlives it
      assert.equal(2 * DAY_MS, keep.max_age_ms(ISO, { retention_ms = 2 * DAY_MS }))
      assert.equal(1, keep.enforce{ root = root, isolation = ISO, record = { retention_ms = 2 * DAY_MS } })
      assert.is_false(core.fs.exists(root .. "/" .. two_days))
      assert.is_true(core.fs.exists(root .. "/" .. fresh))
      S.rm(root)
    end)
  end)

  it("at start: a clean image is kept, an unclean one repaired, a damaged one discarded and its thread told", function()
    core.run(function()
      local root = S.tmpdir()
      local function image(key)
        local dir = workspace.path(root, key)
        local img = dir .. "/" .. keep.IMAGE
        sh(("mkdir -p '%s' && fallocate -l 16M '%s' && mkfs.ext4 -q -F -m 0 -O ^has_journal '%s'")
          :format(dir, img, img))
        return workspace.dir_name(key), img
      end
      local clean = image("clean")
      local _, unclean_img = image("unclean")
      -- the state a crash leaves: the file system marked not cleanly unmounted
      sh(("debugfs -w -R 'ssv state 0' '%s' >/dev/null 2>&1"):format(unclean_img))
      local damaged, damaged_img = image("damaged")
      -- its superblock and the group descriptors after it overwritten
      sh(("dd if=/dev/urandom of='%s' bs=1024 seek=1 count=64 conv=notrunc status=none"):format(damaged_img))
      -- a half-made image and a removal's trash
      sh(("touch '%s/%s.new' && mkdir -p '%s/.trash-x-00112233/y'"):format(workspace.path(root, "clean"), keep.IMAGE, root))
      local log, lines = logger()
      local counts = keep.recover(root, 30000, log)
      assert.same({ kept = 1, repaired = 1, discarded = 1 }, counts)
      local events = {}
      for _, l in ipairs(lines) do events[l.event] = true end
      assert.is_true(events["sandboxd.workspace_repaired"])
      assert.is_true(events["sandboxd.workspace_discarded"])
      assert.is_true(core.fs.exists(workspace.path(root, "clean") .. "/" .. keep.IMAGE))
      assert.is_false(core.fs.exists(workspace.path(root, "clean") .. "/" .. keep.IMAGE .. ".new"))
      assert.is_true(core.fs.exists(unclean_img))
      assert.is_false(core.fs.exists(root .. "/" .. damaged))
      assert.truthy(keep.expired(root, damaged):find("could not be repaired", 1, true))
      for _, name in ipairs(core.fs.list(root)) do assert.is_nil(name:find("^%.trash%-"), name) end
      assert.is_true(core.fs.exists(root .. "/" .. clean))
      S.rm(root)
    end)
  end)

  it("the pass after a sleep walks no awake instance: the fleet keeps their workspaces' names as they wake and sleep (issue 43)", function()
    core.run(function()
      local fleet = require("switchboard.sandboxd.fleet")
      local server = require("switchboard.sandboxd.server")
      local root = S.tmpdir()
      local long_ago = 400 * 24 * 3600 -- past any age the shipped policy keeps
      local gone = slept_dir(root, "slept", 1, long_ago)
      local real_dir_name, calls = workspace.dir_name, 0
      workspace.dir_name = function(key) calls = calls + 1; return real_dir_name(key) end
      local f = fleet.new{ max_instances = function() return 100 end, sleep_after_ms = function() return false end,
        new_runner = function() return { stop = function() end } end,
        dir_name = function(key) return workspace.dir_name(key) end }
      local awake = {}
      for i = 1, 30 do
        local key = "awake-" .. i
        slept_dir(root, key, 0, long_ago) -- as old as the slept one: only being awake keeps it
        awake[i] = assert(f:acquire(key))
        f:release(awake[i])
      end
      local pass = server.keeper({ fleet = f }, root, function() end)
      calls = 0
      pass()
      local during_pass = calls
      assert.is_false(core.fs.exists(root .. "/" .. gone))
      for i = 1, 30 do assert.is_true(core.fs.exists(workspace.path(root, "awake-" .. i))) end
      f:sleep(awake[7], "idle")
      calls = 0
      pass()
      local after_sleep = calls
      workspace.dir_name = real_dir_name
      assert.equal(0, during_pass) -- before: one per awake instance, and again per eviction
      assert.equal(0, after_sleep)
      assert.is_false(core.fs.exists(workspace.path(root, "awake-7")))
      assert.is_true(core.fs.exists(workspace.path(root, "awake-8")))
      local woke = assert(f:acquire("awake-8")) -- awake still: kept
      f:release(woke)
      f:close()
      S.rm(root)
    end)
  end)
end)

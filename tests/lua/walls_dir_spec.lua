-- shell/walls_dir.lua against the real kernel and file system (docs/isolation.md "A killed
-- server's leftovers"): the sweep takes a walls directory for a dead server's only when its pid
-- is gone or is another process's now (its start time not the one recorded), adopts only the
-- numbers recorded there, and removes the directory only when nothing is mounted under it. The
-- loop devices are the spec's own, at high numbers no one else uses (tests/lua/loop_devices_spec
-- .lua says why); the base is the spec's own scratch directory, so no other server's is looked at.
local core = require("switchboard.core")
local walls_dir = require("switchboard.shell.walls_dir")
local loop_devices = require("switchboard.shell.loop_devices")
local uids = require("switchboard.shell.uids")
local tmp = require("support.tmp")

local function sh(cmd) return os.execute(cmd) == true end
local function exists(n) return core.fs.exists(("/sys/block/loop%d"):format(n)) end

local function backing(n)
  local f = io.open(("/sys/block/loop%d/loop/backing_file"):format(n), "r")
  local b = f and f:read("l")
  if f then f:close() end
  return b
end

local MY_PID = tonumber(core.fs.read_file("/proc/self/stat"):match("^(%d+)"))

local can = sh("test -w /dev/loop-control && command -v losetup >/dev/null 2>&1")
local describe_root = can and describe or function(name) pending(name .. ": needs root and /dev/loop-control") end

-- A walls directory as a server `pid` (started at `started`) leaves it, with `loops` recorded.
local function leave(base, pid, hex, started, loops)
  local dir = ("%s/switchboard-walls-%d-%s"):format(base, pid, hex)
  assert.is_true(sh(("mkdir -p '%s/loops'"):format(dir)))
  if started then
    local f = assert(io.open(dir .. "/owner", "w"))
    f:write(("pid=%d\nstarted=%s\n"):format(pid, started))
    f:close()
  end
  for _, n in ipairs(loops or {}) do assert(io.open(dir .. "/loops/" .. n, "w")):close() end
  return dir
end

describe_root("a dead server's walls directory, swept", function()
  local n0 = 900000 + tonumber(core.crypto.hex(core.crypto.random_bytes(2)), 16) % 1000 * 10 -- this run's own
  local img, live, mounted
  after_each(function()
    if mounted then os.execute(("umount '%s'"):format(mounted)) end
    for n = n0, n0 + 2 do
      if backing(n) == img then os.execute(("losetup -d /dev/loop%d 2>/dev/null"):format(n)) end
      if not backing(n) then core.run(function() core.loop_remove(n) end) end
    end
    if live then live:kill("KILL"); core.run(function() live:wait() end) end
    if img then os.remove(img) end
  end)

  it("adopts the recorded devices of a gone or reused pid, never another number, and leaves a live server's and a mounted one", function()
    local base = tmp.dir()
    img = tmp.name("loop-image")
    assert.is_true(sh(("truncate -s 1M '%s'"):format(img)))
    for n = n0, n0 + 2 do assert.is_true(sh(("losetup /dev/loop%d '%s'"):format(n, img))) end
    -- n0: the dead server's, free now; n0+1: recorded, but bound (someone else's since); n0+2:
    -- free and recorded nowhere
    assert.is_true(sh(("losetup -d /dev/loop%d /dev/loop%d"):format(n0, n0 + 2)))
    core.run(function()
      local gone = assert(core.spawn{ argv = { "true" }, env = {} })
      local gone_pid = gone.pid
      gone:wait()
      live = assert(core.spawn{ argv = { "sleep", "1000" }, env = { PATH = os.getenv("PATH") } })
      local live_started = assert(uids.started(live.pid))
      local dead_dir = leave(base, gone_pid, "0badc0de", "1", { n0 })
      local reused_dir = leave(base, live.pid, "1badc0de", tostring(tonumber(live_started) - 1), { n0 + 1 })
      local live_dir = leave(base, live.pid, "2badc0de", live_started, { n0 + 2 })
      local old_dir = leave(base, live.pid, "3badc0de", nil, { n0 + 2 }) -- no owner: from before
      local mounted_dir = leave(base, gone_pid, "4badc0de", "1", {})
      mounted = mounted_dir .. "/m"
      assert.is_true(sh(("mkdir '%s' && mount -t tmpfs none '%s'"):format(mounted, mounted)))

      local mine = assert(walls_dir.open{ pid = MY_PID, base = base })
      local said = {}
      local keeper = loop_devices.new(function(_, event, fields) said[#said + 1] = event .. " " .. tostring(fields.device) end,
        mine.records)
      local adopted = {}
      local swept = walls_dir.sweep{ pid = MY_PID, base = base, euid = 0, path = os.getenv("PATH"),
        deadline_ms = 30000, adopt = function(n) adopted[#adopted + 1] = n; keeper:adopt(n, 0) end }
      table.sort(adopted)
      assert.same({ n0, n0 + 1 }, adopted)
      assert.same({ dirs = 2, devices = 2, mounted = 1 }, swept)
      assert.is_false(core.fs.exists(dead_dir))
      assert.is_false(core.fs.exists(reused_dir))
      assert.is_true(core.fs.exists(live_dir .. "/loops/" .. (n0 + 2)), "a live server's directory was touched")
      assert.is_true(core.fs.exists(old_dir), "a directory without owner, of a live pid, was removed")
      assert.is_true(core.fs.exists(mounted_dir), "a directory with a mount under it was removed")
      -- the adopted records are ours now, until each device is settled
      assert.same({ n0, n0 + 1 }, mine:recorded())
      -- n0 is free: removed at the first try — or, when the host has no other free device,
      -- taken by another server's GET_FREE first (then still asked again, and left to it)
      local function taken(n) return backing(n) ~= nil and backing(n) ~= img end
      local t0 = core.now_ms()
      while exists(n0) and not taken(n0) and core.now_ms() - t0 < 60000 do core.sleep(20) end
      local pending = keeper:close(300) -- n0+1 stays bound: still queued, its record kept
      local expect = taken(n0) and { n0, n0 + 1 } or { n0 + 1 }
      assert.same(expect, pending)
      assert.same(expect, mine:recorded())
      local removed, left = mine:close()
      assert.is_false(removed)
      assert.equal(#expect, left)
      assert.is_true(core.fs.exists(mine.path), "a walls directory with a record left was removed")
      assert.is_true(not exists(n0) or taken(n0), "the adopted free device is still there: " .. table.concat(said, ", "))
      assert.equal(img, backing(n0 + 1), "the bound one was touched")
      assert.is_true(exists(n0 + 2), "a number recorded nowhere but a live server's was removed")
      -- its binder lets go: the next try removes it, its record goes, and the directory with it
      assert.is_true(sh(("losetup -d /dev/loop%d"):format(n0 + 1)))
      assert.same({}, keeper:close(60000)) -- (one taken meanwhile: left after its tries, ~13 s)
      assert.is_true(not exists(n0 + 1) or taken(n0 + 1), table.concat(said, ", "))
      assert.is_true((mine:close()))
      assert.is_false(core.fs.exists(mine.path))
    end)
  end)
end)

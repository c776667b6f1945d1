-- shell/loop_devices.lua against the real kernel (docs/isolation.md "Loop devices given back"):
-- a device numbered past the pool is removed; one below it is kept; one still bound is asked
-- again until its binder lets go, and only then removed. The devices are the spec's own, made
-- with LOOP_CTL_ADD at high numbers no one else uses, and removed at the end whatever happened.
local core = require("switchboard.core")
local loop_devices = require("switchboard.shell.loop_devices")

local function sh(cmd) return os.execute(cmd) == true end

local function add(n)
  return sh(("python3 -c 'import fcntl, os; fcntl.ioctl(os.open(\"/dev/loop-control\", os.O_RDWR), 0x4C80, %d)' 2>/dev/null"):format(n))
end

local function exists(n) return core.fs.exists(("/sys/block/loop%d"):format(n)) end

local can = sh("test -w /dev/loop-control && command -v losetup >/dev/null")
local describe_root = can and describe or function(name) pending(name .. ": needs root and /dev/loop-control") end

describe_root("the walls' loop devices given back", function()
  local base = 900000 + tonumber(core.crypto.hex(core.crypto.random_bytes(2)), 16) % 1000 * 10 -- this run's own
  local img
  after_each(function()
    for n = base, base + 2 do
      os.execute(("losetup -d /dev/loop%d 2>/dev/null"):format(n))
      core.run(function() core.loop_remove(n) end)
    end
    if img then os.remove(img) end
  end)

  it("removes a device past the pool, keeps one below it, and waits for a bound one's binder", function()
    assert.is_true(add(base) and add(base + 1) and add(base + 2), "LOOP_CTL_ADD failed")
    img = os.tmpname()
    assert.is_true(sh(("truncate -s 1M '%s' && losetup /dev/loop%d '%s'"):format(img, base + 2, img)))
    local said = {}
    local keeper = loop_devices.new(function(level, event, fields) said[#said + 1] = { level, event, fields.device } end)
    core.run(function()
      keeper:release(base, base)          -- past the pool (numbers below `base` are kept)
      keeper:release(base + 1, base + 2)  -- inside it
      keeper:release(base + 2, base)      -- bound: busy until the spec detaches it
      core.sleep(500)
      assert.is_true(exists(base + 2), "a bound device was removed")
      assert.is_true(sh(("losetup -d /dev/loop%d"):format(base + 2)))
      keeper:close(30000)
    end)
    assert.is_false(exists(base), "the device past the pool is still there")
    assert.is_true(exists(base + 1), "the pool's device was removed")
    assert.is_false(exists(base + 2), "the device bound for a while was not removed once free")
    assert.equal(2, keeper.removed)
    for _, s in ipairs(said) do assert.equal("info", s[1], s[2]) end
  end)
end)

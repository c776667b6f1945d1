-- Black-box: what a killed sandboxd leaves is swept by the next one (docs/isolation.md "A killed
-- server's leftovers"). A kill -9 left the loop devices of the instances it had (free, once
-- their mounts went with the holders) and its walls directory; a restarted server did not know
-- them, and a host restarting its unit after crashes piled them up (every sysinfo() walks them).
-- Now the walls helper records each device it attaches in the server's walls directory, and the
-- next server gives back those of a server that is gone, then removes its directory. A device
-- the spec bound itself (losetup) is never touched. Both servers keep their walls directories
-- in this spec's own RUNTIME_DIRECTORY, so no other server on the host is swept, or sweeps.
local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")
local policies = require("support.policies")
local loops = require("support.loops")

local THREADS = 3

local function policy_dir()
  return policies.dir{
    timeouts = function(src) return src .. "\n" .. S.FAST .. '\nsandbox.sleep_after = "10m"\n' end,
    isolation = function(src)
      return src .. '\nworkspace_max_bytes = 16 * MiB\nnetwork = "none"\nloop_devices_kept = 0\n'
    end,
  }
end

local describe_walls = require("support.walls").probe(policy_dir(),
  { describe = describe, it = it, pending = pending })

after_each(S.cleanup_servers)
teardown(S.cleanup)

-- The walls directories of server `pid` in `base` (its name: switchboard-walls-<pid>-<8 hex>).
local function walls_dirs(base, pid)
  local out = {}
  for _, entry in ipairs(core.fs.list(base) or {}) do
    local name = type(entry) == "table" and entry.name or entry
    if name:match("^switchboard%-walls%-" .. pid .. "%-%x+$") then out[#out + 1] = base .. "/" .. name end
  end
  return out
end

-- The numbers of `set` not given back, once every server has stopped: the device exists and is
-- not someone else's (free, or bound to a file under `root`). One bound to a file outside `root`
-- is someone else's now — another GET_FREE took the number once it was free, and the kernel
-- refuses its removal, as it should; one that is gone was removed (by our servers: their
-- walls.loop_removed lines; or by another server that had the same number before).
local function left_behind(set, root)
  local left = {}
  for n in pairs(set) do
    local backing = S.read(("/sys/block/loop%d/loop/backing_file"):format(n))
    local theirs = backing ~= nil and backing:sub(1, #root + 1) ~= root .. "/"
    if core.fs.exists(("/sys/block/loop%d"):format(n)) and not theirs then left[#left + 1] = "loop" .. n end
  end
  table.sort(left)
  return left
end

describe_walls("a killed sandboxd's leftovers", function()
  it("its recorded loop devices are given back and its walls directory removed by the next server; someone else's device stays", function()
    core.run(function()
      local mine = S.tmpdir()
      assert(os.execute(("truncate -s 1M '%s/other.img'"):format(mine)))
      local other = assert(loops.sh(("losetup -f --show '%s/other.img'"):format(mine))):match("/dev/loop(%d+)")
      assert.truthy(other, "losetup gave no device")
      local runtime = S.tmpdir()
      local env = { RUNTIME_DIRECTORY = runtime }
      local ok, err = pcall(function()
        local dir = policy_dir()
        local h = S.start_sandboxd{ policies = dir, env = env }
        local root = core.fs.realpath(h.root)
        local attached = {}
        for i = 1, THREADS do
          local status, _, raw = S.call(h.url, "/exec", { thread = "t" .. i, deadline_ms = 180000,
            body = { command = "echo ok > f && cat f", timeoutMs = 120000 } })
          assert.equal(200, status, raw)
          assert.equal(0, cjson.decode(raw).exitCode, raw)
          for n in pairs(loops.under(root)) do attached[n] = true end -- the thread's, the spare's
        end
        local count = 0
        for _ in pairs(attached) do count = count + 1 end
        assert.is_true(count >= THREADS, "fewer loop devices than threads were seen: " .. count)
        local recorded = {}
        for _, d in ipairs(walls_dirs(runtime, h.pid)) do
          for _, e in ipairs(core.fs.list(d .. "/loops") or {}) do recorded[#recorded + 1] = type(e) == "table" and e.name or e end
        end
        recorded = table.concat(recorded, " ")
        -- kill -9 of its process group (core.spawn made it lead one): no close runs
        os.execute(("kill -KILL -%d"):format(h.pid))
        h:wait()
        local left_dirs = {}
        for _, base in ipairs({ runtime, "/tmp" }) do
          for _, d in ipairs(walls_dirs(base, h.pid)) do left_dirs[#left_dirs + 1] = d end
        end
        -- the next server on the same root and runtime directory sweeps what it left: the devices
        -- it adopted are given back while it runs, or at its stop (those its own instances took
        -- since, after theirs); the killed one's directory is gone
        local function next_server()
          local n = S.start_sandboxd{ policies = dir, env = env, root = h.root }
          local swept = S.wait_for(function() return n.log():match("walls%.swept[^\n]*devices=(%d+)") end, 60000)
          return n, swept
        end
        local h2, swept = next_server()
        local dirs_gone = S.wait_for(function()
          for _, d in ipairs(left_dirs) do if core.fs.exists(d) then return false end end
          return true
        end, 30000)
        local backing = S.read(("/sys/block/loop%s/loop/backing_file"):format(other)) or ""
        h2:stop(); h2:wait()
        -- a device still bound when its stop's bound (timeouts walls.loops_ms) ran out is recorded
        -- for the start after (walls.loops_recorded): that start gives it back
        local lines = "the killed server's lines about its devices:\n" .. loops.lines(h.log())
          .. "\nits record before the kill: " .. recorded .. "\nthe next server's:\n" .. loops.lines(h2.log())
        if h2.log():find("walls.loops_recorded", 1, true) then
          local h3 = next_server()
          h3:stop(); h3:wait()
          lines = lines .. "\nthe one after (the next had some left recorded):\n" .. loops.lines(h3.log())
        end
        local left = left_behind(attached, root)
        assert.is_true(#left == 0, "the killed server's loop devices, not given back: " .. table.concat(left, " ")
          .. "\n" .. lines)
        assert.is_true(tonumber(swept or 0) >= THREADS, "the next server adopted " .. tostring(swept)
          .. " recorded devices, fewer than the killed one's threads:\n" .. lines)
        assert.is_true(#left_dirs > 0, "the killed server's walls directory was not found in " .. runtime .. " or /tmp")
        assert.is_true(dirs_gone, "the killed server's walls directory is still there: " .. table.concat(left_dirs, " ")
          .. "\n" .. lines)
        -- someone else's is still there, bound to its own file
        assert.equal(mine .. "/other.img", (backing:gsub("\n$", "")))
      end)
      os.execute(("losetup -d /dev/loop%s"):format(other))
      S.rm(mine)
      S.rm(runtime)
      assert(ok, err)
    end)
  end)
end)

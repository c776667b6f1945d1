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
        -- the adopted devices' tries (~13 s for a busy one) before h2's own bounded stop; none is
        -- said of a number h2's own spare took meanwhile (GET_FREE hands out the lowest free)
        S.wait_for(function()
          for d in recorded:gmatch("%d+") do
            if loops.said(tonumber(d), h2.log()):find("^still") or loops.said(tonumber(d), h2.log()) == "nothing said of it" then
              return false
            end
          end
          return true
        end, 30000)
        h2:stop(); h2:wait()
        -- a device still bound when its stop's bound (timeouts walls.loops_ms) ran out is recorded
        -- for the start after (walls.loops_recorded): that start gives it back
        local lines = "the killed server's lines about its devices:\n" .. loops.lines(h.log())
          .. "\nits record before the kill: " .. recorded .. "\nthe next server's:\n" .. loops.lines(h2.log())
        local h3
        if h2.log():find("walls.loops_recorded", 1, true) then
          h3 = next_server()
          h3:stop(); h3:wait()
          lines = lines .. "\nthe one after (the next had some left recorded):\n" .. loops.lines(h3.log())
        end
        local logs = h.log() .. h2.log()
        if h3 then logs = logs .. h3.log() end
        local left = loops.left_behind(attached, root, logs, runtime)
        assert.is_true(#left == 0, "the killed server's loop devices, lost: " .. loops.paths(left, logs)
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

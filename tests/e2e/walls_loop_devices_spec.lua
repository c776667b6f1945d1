-- Black-box: a walled sandboxd gives back the loop devices its instances' workspaces were
-- attached to (docs/isolation.md "Loop devices given back"). LOOP_CTL_GET_FREE makes a new
-- device whenever none is free and autoclear only detaches it: before, every instance that ever
-- ran at once left a free device on the host for good (2,706 after the 2,000-instance benches),
-- and every sysinfo() — each `bash` — walked them all. Here, with loop_devices_kept = 0, every
-- device the server attached is removed once its instance sleeps or the server stops, and a
-- device someone else bound (losetup) is never touched. Other specs attach loop devices beside
-- this one: only the numbers this server's images were attached to are counted, and such a
-- number that exists afterwards must be bound to a file that is not this server's (someone
-- else's GET_FREE took it after us: the kernel refuses to remove it, and so it should).
local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")
local policies = require("support.policies")
local loops = require("support.loops")

local THREADS = 5

local function policy_dir()
  return policies.dir{
    timeouts = function(src) return src .. "\n" .. S.FAST .. '\nsandbox.sleep_after = "2s"\n' end,
    isolation = function(src)
      return src .. '\nworkspace_max_bytes = 16 * MiB\nnetwork = "none"\nloop_devices_kept = 0\n'
    end,
  }
end

local describe_walls = require("support.walls").probe(policy_dir(),
  { describe = describe, it = it, pending = pending })

after_each(S.cleanup_servers)
teardown(S.cleanup)

describe_walls("the walls' loop devices", function()
  it("are removed when their instances sleep and when the server stops; someone else's bound device stays", function()
    core.run(function()
      -- someone else's device, bound before the server starts: the server must never remove it
      local mine = S.tmpdir()
      assert(os.execute(("truncate -s 1M '%s/other.img'"):format(mine)))
      local other = assert(loops.sh(("losetup -f --show '%s/other.img'"):format(mine))):match("/dev/loop(%d+)")
      assert.truthy(other, "losetup gave no device")
      local ok, err = pcall(function()
        -- its walls directory (and the record of its devices) in a RUNTIME_DIRECTORY of this
        -- spec's own: the next server below sweeps it, and no other
        local env = { RUNTIME_DIRECTORY = S.tmpdir() }
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
        -- idle past sleep_after: the threads' instances go, and their devices with them
        assert.is_true(S.wait_for(function()
          local _, slept = h.log():gsub("sandboxd.instance_slept", "")
          return slept >= THREADS
        end, 60000), "not every thread slept:\n" .. h.log())
        -- the slept instances' devices, given back while the server runs (each asked again
        -- until its instance's mount is gone: a busy host's teardown is slow); checked below
        S.wait_for(function()
          local _, removed = h.log():gsub("walls%.loop_removed", "")
          return removed >= THREADS
        end, 60000)
        -- the spare's goes at the server's stop
        h:stop(); h:wait()
        -- a device still bound when the stop's bound (timeouts walls.loops_ms) ran out — a busy
        -- host's teardown of its instance's mounts — is recorded, and the next start gives it back
        local logs = h.log()
        if logs:find("walls.loops_recorded", 1, true) then
          local h2 = S.start_sandboxd{ policies = dir, env = env, root = h.root }
          S.wait_for(function() return h2.log():find("walls.swept", 1, true) end, 60000)
          -- the adopted devices' tries before h2's own stop (its stop is bounded too: stopped at
          -- once, it recorded the same device again) — ~13 s of them for a busy one; none is said
          -- of a number h2's own spare took meanwhile (GET_FREE hands out the lowest free), which
          -- h2's stop gives back with its spare
          local recorded = {}
          for devices in logs:gmatch("walls%.loops_recorded devices=\"?([%d ]*)") do
            for d in devices:gmatch("%d+") do recorded[#recorded + 1] = tonumber(d) end
          end
          S.wait_for(function()
            local said = h2.log()
            for _, d in ipairs(recorded) do
              local ended = false
              for _, event in ipairs({ "loop_removed", "loop_gone", "loop_left" }) do
                ended = ended or said:find(("walls%%.%s device=%d%%f[^%%d]"):format(event, d)) ~= nil
              end
              if not ended then return false end
            end
            return true
          end, 30000)
          h2:stop(); h2:wait()
          logs = logs .. h2.log()
        end
        local base = env.RUNTIME_DIRECTORY
        assert.is_true(S.wait_for(function() return #loops.left_behind(attached, root, logs, base) == 0 end, 30000),
          "loop devices this server attached, lost: " .. loops.paths(loops.left_behind(attached, root, logs, base), logs)
            .. "\nthe lines about them:\n" .. loops.lines(logs, { "instance_slept", "server.stop" }))
        -- someone else's is still there, bound to its own file
        local backing = S.read(("/sys/block/loop%s/loop/backing_file"):format(other)) or ""
        assert.equal(mine .. "/other.img", (backing:gsub("\n$", "")))
      end)
      os.execute(("losetup -d /dev/loop%s"):format(other))
      S.rm(mine)
      assert(ok, err)
    end)
  end)
end)

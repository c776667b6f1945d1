-- Black-box: the workspace's size limit holds while a command writes (issue 22 item 2). Before,
-- the size was measured after a command (and never after /write): ten `fallocate -l 100M`
-- against a 100 MiB limit wrote 1,001 MB, and afterwards even `rm` was refused, locking the
-- thread out. Now each workspace of a walled sandboxd is a file system of workspace_max_bytes
-- of its own (docs/isolation.md "Workspace size while writing"): the kernel refuses the write
-- that does not fit, the user reads which limit it met, deleting always works, /write is bounded
-- the same way, and no loop device or mount outlives the instance, the server, or a kill -9.
local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")
local policies = require("support.policies")

local MiB = 1024 * 1024
local LIMIT = 100 * MiB

local function policy_dir(extra_timeouts, extra_isolation)
  return policies.dir{
    timeouts = function(src) return src .. "\n" .. S.FAST .. "\n" .. (extra_timeouts or 'sandbox.sleep_after = "10m"') .. "\n" end,
    isolation = function(src) return src .. "\nworkspace_max_bytes = 100 * MiB\n" .. (extra_isolation or "") .. "\n" end,
  }
end

local describe_walls = require("support.walls").probe(policy_dir(),
  { describe = describe, it = it, pending = pending })

after_each(S.cleanup_servers)
teardown(S.cleanup)

local function exec(h, thread, command)
  local status, _, raw = S.call(h.url, "/exec", { thread = thread, deadline_ms = 180000,
    body = { command = command, timeoutMs = 120000 } })
  assert.equal(200, status, raw)
  return cjson.decode(raw)
end

local function write(h, thread, path, bytes)
  local status, _, raw = S.call(h.url, "/write", { thread = thread, deadline_ms = 120000,
    body = { path = path, content = core.crypto.base64_encode(bytes), encoding = "base64" } })
  return status, raw
end

-- The loop devices whose backing file is under `root` (a server's workspaces), as "loopN".
local function loops_under(root)
  local out = {}
  for _, name in ipairs(core.fs.list("/sys/block") or {}) do
    local backing = name:match("^loop%d+$") and S.read("/sys/block/" .. name .. "/loop/backing_file")
    if backing and backing:sub(1, #root + 1) == root .. "/" then out[#out + 1] = name end
  end
  return out
end

-- Mounts of the host's namespace on anything under `root`.
local function host_mounts_under(root)
  local n = 0
  for line in (S.read("/proc/self/mountinfo") or ""):gmatch("[^\n]+") do
    local at = line:match("^%S+ %S+ %S+ %S+ (%S+)")
    if at and at:sub(1, #root + 1) == root .. "/" then n = n + 1 end
  end
  return n
end

local function used_bytes(h, thread)
  local r = exec(h, thread, "du -s -B1 /workspace | cut -f1")
  assert.equal(0, r.exitCode, r.stderr)
  return tonumber(r.stdout:match("%d+"))
end

describe_walls("a walled workspace's size limit (100 MiB here)", function()
  it("holds while the command writes; rm then works and a new write succeeds; /write is bounded too", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = policy_dir() }
      local root = core.fs.realpath(h.root)

      -- the issue's loop: every fallocate that does not fit fails in the kernel, in words
      local r = exec(h, "q", "for i in $(seq 10); do fallocate -l 100M f$i; done")
      assert.are_not.equal(0, r.exitCode)
      assert.truthy(r.stderr:find("No space left on device", 1, true) or r.stderr:find("Disk quota exceeded", 1, true), r.stderr)
      assert.truthy(r.stderr:find("this sandbox's /workspace holds at most 100 MiB (policies/isolation.lua "
        .. "workspace_max_bytes); delete files to go on", 1, true), r.stderr)
      assert.is_true(used_bytes(h, "q") <= LIMIT)

      -- a plain write runs into the same wall, at the limit (not before it)
      r = exec(h, "q", "head -c 150M /dev/zero > big")
      assert.are_not.equal(0, r.exitCode)
      assert.truthy(r.stderr:find("No space left on device", 1, true), r.stderr)
      local used = used_bytes(h, "q")
      assert.is_true(used <= LIMIT, "the workspace holds " .. used .. " bytes")
      assert.is_true(used >= LIMIT * 0.9, "the write stopped early, at " .. used .. " bytes")
      -- the instance sees its limit as its disk
      r = exec(h, "q", "df -B1 --output=size /workspace | tail -1")
      assert.is_true(tonumber(r.stdout:match("%d+")) <= LIMIT, r.stdout)

      -- /write meets it too (the server writes as root, with no more room than a command)
      local status, raw = write(h, "q", "from-write.bin", ("x"):rep(4 * MiB))
      assert.equal(413, status, raw)
      assert.truthy(raw:find("the workspace is full", 1, true), raw)
      assert.truthy(raw:find("workspace_max_bytes", 1, true), raw)
      assert.is_nil(raw:find(root, 1, true), raw) -- no host path

      -- a full workspace never locks its thread out: rm runs, and then writes fit again
      r = exec(h, "q", "rm big f* && ls -A | wc -l")
      assert.equal(0, r.exitCode, r.stderr)
      assert.equal("0\n", r.stdout)
      r = exec(h, "q", "fallocate -l 50M again && head -c 10M /dev/zero > more && echo written")
      assert.equal(0, r.exitCode, r.stderr)
      assert.equal("written\n", r.stdout)
      status, raw = write(h, "q", "from-write.bin", ("x"):rep(4 * MiB))
      assert.equal(200, status, raw)

      -- the mount is the instance's alone: nothing of it in the host's mount namespace
      assert.equal(0, host_mounts_under(root))
      assert.is_true(#loops_under(root) >= 1) -- the thread's (and the spare's)
      h:stop(); h:wait()
      assert.is_true(S.wait_for(function() return #loops_under(root) == 0 end, 30000),
        "loop devices left after the server stopped: " .. table.concat(loops_under(root), " "))
    end)
  end)

  it("workspace_size = \"measured\" (where no loop device can be had): the host directory, no image", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = policy_dir(nil, 'workspace_size = "measured"') }
      local root = core.fs.realpath(h.root)
      local r = exec(h, "m", "echo hi > f && df --output=target /workspace | tail -1")
      assert.equal(0, r.exitCode, r.stderr)
      local dir = require("switchboard.shell.workspace").path(root, "m")
      assert.equal("hi\n", S.read(dir .. "/f"))
      assert.is_false(core.fs.exists(dir .. "/.workspace.img"))
      assert.equal(0, #loops_under(root))
      h:stop(); h:wait()
    end)
  end)

  it("leaves no loop device behind when its thread sleeps, or when the server is killed", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = policy_dir('sandbox.sleep_after = "2s"') }
      local root = core.fs.realpath(h.root)
      local r = exec(h, "sleeper", "head -c 1M /dev/zero > f && echo ok")
      assert.equal(0, r.exitCode, r.stderr)
      -- the thread's own image (the spare instance has a loop device of its own, which stays)
      local sleeper = core.fs.realpath(require("switchboard.shell.workspace").path(root, "sleeper"))
      assert.equal(1, #loops_under(sleeper))
      -- idle past sleep_after: the instance and its workspace go, and its loop device with them
      assert.truthy(S.wait_for(function() return h.log():find("sandboxd.instance_slept", 1, true) end, 60000))
      assert.is_true(S.wait_for(function() return #loops_under(sleeper) == 0 end, 30000),
        "the slept thread's loop device is still attached")
      -- a kill -9 of the server: its instances die with it (PR_SET_PDEATHSIG), and so do their mounts
      r = exec(h, "killed", "echo ok > f")
      assert.equal(0, r.exitCode, r.stderr)
      assert.is_true(#loops_under(root) >= 1)
      h:stop("KILL"); h:wait()
      assert.is_true(S.wait_for(function() return #loops_under(root) == 0 end, 30000),
        "loop devices left after kill -9: " .. table.concat(loops_under(root), " "))
      assert.equal(0, host_mounts_under(root))
    end)
  end)
end)

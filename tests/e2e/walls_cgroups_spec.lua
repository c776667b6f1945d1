-- A walled server's cgroup tree (switchboard-<pid>, in the pids, cpu and memory hierarchies;
-- an instance cgroup i<N> below it) never outlives the server (docs/isolation.md "Cgroups of a
-- server that is gone"). Each instance cgroup set holds ~470 KB of kernel memory that nothing
-- else frees: 22,000 of them, left by 43 killed servers, held 10.5 GB of this host.
--   * a server killed with SIGKILL leaves its tree; the next walled start removes it, and also a
--     dead server's tree whose pid another process holds now (pid_max is 32,768 here: the old
--     sweep took a live pid for a live server and kept the tree), never a live server's
--   * a TERM'd sandboxd with awake, asleep and busy instances, and `switchboard exec` through the
--     local executor's walls, leave no cgroup behind (the local executor's hosts were never
--     closed: each run left its tree)
-- Everything is a real walled sandboxd; the trees are looked at in /sys/fs/cgroup.
local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")
local bin = require("support.bin")
local policies = require("support.policies")

local UID_BASE = require("support.walls").private_uid_base(64)
local HIERARCHIES = { "pids", "cpu", "memory" }

-- Small workspaces and few processes: several servers and their spares at once.
local function policy_dir(extra, timeouts_extra)
  return policies.dir{
    timeouts = function(src) return src .. "\n" .. S.FAST .. "\n" .. (timeouts_extra or "") .. "\n" end,
    isolation = function(src)
      return src .. ("\nuid_base = %d\nuid_count = 64\nuid_blocks = 64\nworkspace_max_bytes = 16 * MiB\n"
        .. "disk_reserve_bytes = 0\npids_max = 64\n%s\n"):format(UID_BASE, extra or "")
    end,
  }
end

local describe_walls = require("support.walls").probe(policy_dir(),
  { describe = describe, it = it, pending = pending })

after_each(S.cleanup_servers)
teardown(S.cleanup)

-- Where a server started by this spec makes its trees: below this process's own cgroup in each
-- hierarchy (the server inherits it; cgroup v1 here, v2's one tree otherwise).
local function parents()
  local own = S.read("/proc/self/cgroup") or ""
  local out = {}
  if core.fs.exists("/sys/fs/cgroup/cgroup.controllers") then
    out.unified = ("/sys/fs/cgroup" .. (own:match("0::([^\n]*)") or "")):gsub("/+$", "")
    return out
  end
  for _, c in ipairs(HIERARCHIES) do
    local path = own:match("%d+:[^:\n]*%f[%w]" .. c .. "%f[^%w][^:\n]*:([^\n]*)")
    out[c] = ("/sys/fs/cgroup/" .. c .. (path or "")):gsub("/+$", "")
  end
  return out
end

-- hierarchy → the instance cgroups (sorted names) of tree switchboard-<pid>, or false when the
-- tree is gone.
local function tree(pid)
  local out = {}
  for c, parent in pairs(parents()) do
    local list = core.fs.list(("%s/switchboard-%d"):format(parent, pid))
    if list then
      local names = {}
      for _, name in ipairs(list) do
        if name:match("^i%d+$") then names[#names + 1] = name end
      end
      table.sort(names)
      out[c] = names
    else
      out[c] = false
    end
  end
  return out
end

local function gone(pid)
  for _, names in pairs(tree(pid)) do
    if names then return false end
  end
  return true
end

-- How many `sleep 1000` processes run in tree switchboard-<pid> (its first hierarchy).
local function sleeping(pid)
  local n = 0
  local parent, t = parents(), tree(pid)
  local at, names = parent.pids or parent.unified, t.pids or t.unified
  for _, name in ipairs(names or {}) do
    for member in (S.read(("%s/switchboard-%d/%s/cgroup.procs"):format(at, pid, name)) or ""):gmatch("%d+") do
      if (S.read("/proc/" .. member .. "/cmdline") or "") == "sleep\0001000\0" then n = n + 1 end
    end
  end
  return n
end

local function text(t) return cjson.encode(t) end

local function exec(h, thread, command)
  local status, _, raw = S.call(h.url, "/exec", { thread = thread, deadline_ms = 180000,
    body = { command = command, timeoutMs = 120000 } })
  assert.equal(200, status, raw)
  local r = cjson.decode(raw)
  assert.equal(0, r.exitCode, raw)
  return r
end

-- A server with `threads` awake instances (and its spare); `awake`: they stay awake (else they
-- sleep after 2 s idle, S.FAST).
local AWAKE = 'sandbox.sleep_after = "10m"'
local function server_with(threads, awake)
  local h = S.start_sandboxd{ policies = policy_dir(nil, awake and AWAKE or nil) }
  for i = 1, threads do exec(h, "T" .. i, "echo awake") end
  return h
end

describe_walls("a walled server's cgroup tree", function()
  it("of a SIGKILLed server goes at the next start, with a dead tree whose pid another process holds; a live server's stays", function()
    core.run(function()
      local live = server_with(2, true)
      local killed = server_with(2, true)
      local renamed = server_with(1, true)
      local live_tree = tree(live.pid)
      for c, names in pairs(live_tree) do assert.truthy(names and #names >= 2, c .. ": " .. text(live_tree)) end

      -- a process that is not a server: the pid a dead server's tree is named by, reused
      local holder = assert(core.spawn{ argv = { "sleep", "1000" }, env = { PATH = os.getenv("PATH") } })
      finally(function() os.execute(("kill -KILL %d 2>/dev/null"):format(holder.pid)) end) -- the one this spec started

      -- the other server's tree, named as if its pid were the sleeping process's (cgroup v1
      -- renames a directory in place; v2 too): renamed while that server lives, so that no other
      -- walled server's sweep on this host can have taken it first, then the server killed
      for _, parent in pairs(parents()) do
        assert(os.rename(("%s/switchboard-%d"):format(parent, renamed.pid),
          ("%s/switchboard-%d"):format(parent, holder.pid)))
      end
      renamed:stop("KILL"); renamed:wait()
      killed:stop("KILL"); killed:wait()
      -- both trees stay behind a SIGKILL (the server's close never ran) — until a walled server
      -- starts: another spec's, starting on this host now, may sweep them before ours does

      local next_start = S.start_sandboxd{ policies = policy_dir() }
      assert(S.wait_for(function() return gone(killed.pid) end, 60000),
        "the killed server's tree stayed: " .. text(tree(killed.pid)) .. "\n" .. next_start.log())
      assert(S.wait_for(function() return gone(holder.pid) end, 60000),
        "the dead tree named by a live pid stayed: " .. text(tree(holder.pid)) .. "\n" .. next_start.log())
      -- its one line says what went — unless another walled server starting on this host at the
      -- same moment (another spec's) swept these trees first: then the line may count fewer or be
      -- absent, never a failure
      S.wait_for(function() return next_start.log():find("walls.cgroups_swept", 1, true) end, 5000)
      local line = next_start.log():match("[^\n]*walls%.cgroups_swept[^\n]*")
      if line then
        assert.truthy(line:match("trees=%d+") and line:match("instances=%d+"), line)
        assert.is_nil(line:find("failed=", 1, true), line)
      end

      -- the live server's tree is whole, and its instances still answer
      assert.same(live_tree, tree(live.pid))
      exec(live, "T1", "echo still here")
      assert.same(live_tree, tree(live.pid))
      assert.is_nil(holder.result) -- the sleeping process was never signalled
      live:stop("TERM"); live:wait()
      next_start:stop("TERM"); next_start:wait()
      assert.is_true(gone(live.pid), text(tree(live.pid)))
      assert.is_true(gone(next_start.pid), text(tree(next_start.pid)))
    end)
  end)

  it("of a dead server with more instances than the helper reaps in one run (70) goes whole at the next start", function()
    core.run(function()
      -- a pid that was just ended: the tree is named as a killed server's would be (a dead server
      -- with 70 instance cgroups; the helper takes 64 --cgroup per run, and the sweep once asked
      -- for all of them at once: "too many --cgroup (at most 64)", the tree kept for good)
      local done = assert(core.spawn{ argv = { "true" }, env = { PATH = os.getenv("PATH") } })
      local dead = done.pid
      done:wait()
      for _, parent in pairs(parents()) do
        local dir = ("%s/switchboard-%d"):format(parent, dead)
        assert(core.fs.mkdir_p(dir))
        for i = 1, 70 do assert(core.fs.mkdir_p(("%s/i%d"):format(dir, i))) end
      end
      finally(function()
        for _, parent in pairs(parents()) do
          local dir = ("%s/switchboard-%d"):format(parent, dead)
          for i = 1, 70 do os.remove(("%s/i%d"):format(dir, i)) end
          os.remove(dir)
        end
      end)
      local next_start = S.start_sandboxd{ policies = policy_dir() }
      -- another spec's walled server starting on this host may sweep it first: gone either way
      assert(S.wait_for(function() return gone(dead) end, 60000),
        "the dead tree stayed: " .. #((tree(dead).pids or tree(dead).unified) or {}) .. " instance cgroups\n" .. next_start.log())
      next_start:stop("TERM"); next_start:wait()
    end)
  end)

  it("of a TERM'd sandboxd with awake, asleep and busy instances, and of `switchboard exec`'s local walls, is gone when they end", function()
    core.run(function()
      local h = server_with(3)
      -- asleep: past sleep_after (2 s, S.FAST), the fleet's keep pass puts them to sleep
      assert(S.wait_for(function() return select(2, h.log():gsub("sandboxd%.instance_slept", "")) >= 3 end, 60000),
        h.log())
      exec(h, "A1", "echo awake")
      exec(h, "A2", "echo awake")
      core.go(function()
        S.call(h.url, "/exec", { thread = "B1", deadline_ms = 180000,
          body = { command = "(setsid sleep 1000 &); exec sleep 1000", timeoutMs = 120000 } })
      end)
      assert(S.wait_for(function() return sleeping(h.pid) >= 2 end, 60000), text(tree(h.pid)))
      h:stop("TERM"); h:wait()
      assert.is_true(gone(h.pid), text(tree(h.pid)) .. "\n" .. h.log())

      -- the local executor's walls (policies/isolation.lua local_walls), in a process of its own
      local root = S.tmpdir()
      finally(function() S.rm(root) end)
      local dir = policy_dir('local_walls = { default = true, console = true, exec = true }\noutbound = "pasta"')
      local p = assert(core.spawn{ argv = { bin.path, "--policies", dir, "exec", "--workspace-root", root,
        "--backend", "local", "--", "echo walled; (setsid sleep 1000 &)" }, env = bin.env() })
      local pid = p.pid
      local r = p:wait()
      assert.equal(0, r.exit, r.stderr)
      assert.truthy(r.stdout:find("walled", 1, true), r.stdout)
      assert.is_true(gone(pid), text(tree(pid)) .. "\n" .. r.stderr)
    end)
  end)
end)

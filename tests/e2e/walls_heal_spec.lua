-- Black-box: an instance that killed its own spawner heals (issue 22 item 3). A command can end
-- every process of its instance (`kill -9 -1`: the PID namespace's init goes, and with it the
-- spawner's reason to serve) or run it out of memory (filling /dev/shm, a tmpfs charged to the
-- instance's memory cgroup); before, every later request of the thread failed "spawner does not
-- answer" with a host socket path. Now the dead instance is retired — none of its processes,
-- cgroups or mount namespace left — and the thread's next request runs in a fresh instance on
-- the same workspace, whose files are intact; what the user reads names what happened, never a
-- host path.
local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")
local policies = require("support.policies")

local UID_BASE = require("support.walls").private_uid_base(64)
local UID_COUNT = 64 -- (this run's own range, as tests/e2e/walls_spec.lua takes one)

local function policy_dir()
  return policies.dir{
    timeouts = function(src) return src .. "\n" .. S.FAST .. "\nsandbox.sleep_after = \"10m\"\n" end,
    -- spare_instances = 0: every cgroup of the server is an awake thread's; a small memory
    -- limit so that filling /dev/shm reaches it in a moment
    isolation = function(src)
      return src .. ("\nuid_base = %d\nuid_count = %d\nspare_instances = 0\nmemory_bytes = 96 * MiB\n")
        :format(UID_BASE, UID_COUNT)
    end,
  }
end

local describe_walls = require("support.walls").probe(policy_dir(),
  { describe = describe, it = it, pending = pending })

after_each(S.cleanup_servers)
teardown(S.cleanup)

local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

-- The processes in the server's instance cgroups (pids controller), as "pid:starttime" (a pid
-- alone may be reused) → the mount namespace each is in.
local function instance_procs(server_pid)
  local out = {}
  local p = io.popen(("cat $(find /sys/fs/cgroup -maxdepth 7 -path '*/switchboard-%d/i*/cgroup.procs') 2>/dev/null")
    :format(server_pid))
  for pid in p:lines() do
    local stat = read("/proc/" .. pid .. "/stat") or ""
    local start = stat:match("^%d+ %b() %S+" .. (" %S+"):rep(18) .. " (%d+)")
    local q = io.popen("readlink /proc/" .. pid .. "/ns/mnt 2>/dev/null")
    local mnt = q:read("l")
    q:close()
    if start then out[pid .. ":" .. start] = mnt or "?" end
  end
  p:close()
  return out
end

-- Every mount namespace a process of this run's uids (uid_blocks, 16 by default, from
-- UID_BASE: the server takes the first free block) is in, leaving out `except` (pid →
-- true): the fresh instance's processes. The kernel hands a freed namespace's number to the
-- next one made anywhere on the host (the lowest free): the fresh instance's, or another
-- server's instance on this shared machine; only a process of ours outside the fresh instance
-- can be one that holds the old namespace.
local function host_mount_namespaces(except)
  local seen = {}
  local p = io.popen("stat -c %N /proc/[0-9]*/ns/mnt 2>/dev/null") -- one process: '/proc/P/ns/mnt' -> 'mnt:[N]'
  for line in p:lines() do
    local pid, ns = line:match("^'/proc/(%d+)/ns/mnt' %-> '(mnt:%[%d+%])'$")
    local uid = pid and tonumber(((read("/proc/" .. pid .. "/status") or ""):match("\nUid:%s+(%d+)")))
    if ns and uid and uid >= UID_BASE and uid < UID_BASE + 16 * UID_COUNT and not (except or {})[pid] then
      seen[ns] = true
    end
  end
  p:close()
  return seen
end

-- The instance directories (i<N>) under this server's cgroup, in the pids controller.
local function instance_cgroups(server_pid)
  local p = io.popen(("find /sys/fs/cgroup -maxdepth 6 -type d -path '*/switchboard-%d/i*' 2>/dev/null"):format(server_pid))
  local dirs = {}
  for line in p:lines() do dirs[#dirs + 1] = line end
  p:close()
  return dirs
end

-- Who is in mount namespace `ns` (for a failure's message).
local function holders(ns)
  local p = io.popen("for f in /proc/[0-9]*/ns/mnt; do [ \"$(readlink $f)\" = '" .. ns
    .. "' ] && d=${f%/ns/mnt} && echo $d $(grep -E '^(Name|State|PPid|Uid)' $d/status | tr '\\n' ' '); done 2>/dev/null")
  local text = p:read("a")
  p:close()
  return text
end

local function exec(h, thread, command)
  local status, _, raw = S.call(h.url, "/exec", { thread = thread, deadline_ms = 120000,
    body = { command = command, timeoutMs = 60000 } })
  assert.equal(200, status, raw)
  return cjson.decode(raw)
end

local function no_host_paths(h, text)
  assert.is_nil(text:find("/tmp/switchboard-walls", 1, true), text)
  assert.is_nil(text:find(h.root, 1, true), text)
  assert.is_nil(text:find(".sock", 1, true), text)
end

-- sandboxd as its systemd unit starts it: root, with the unit's CapabilityBoundingSet= and
-- NoNewPrivileges= (read from deploy/systemd/switchboard-sandboxd.service itself, so the spec
-- follows the unit). The full set hid that remounting a workspace's file system chmod'ed a
-- root the instance's uid owned: CAP_FOWNER, which the unit does not give, so after any
-- instance death every later command of the thread failed (issue 38 item 1).
local function unit_capabilities()
  local f = assert(io.open("deploy/systemd/switchboard-sandboxd.service"))
  local unit = f:read("a")
  f:close()
  local line = assert(unit:match("\nCapabilityBoundingSet=([^\n]+)"), "the unit names no CapabilityBoundingSet=")
  local caps = {}
  for name in line:gmatch("CAP_([%u_]+)") do caps[#caps + 1] = "+" .. name:lower() end
  return "-all," .. table.concat(caps, ",")
end
local SETTINGS = {
  { "every capability", nil },
  { "the systemd unit's capability bounding set",
    { "setpriv", "--bounding-set=" .. unit_capabilities(), "--no-new-privs", "--" } },
}

local ATTACKS = {
  { "kill -9 -1", "kill -9 -1; sleep 5" },
  { "filling /dev/shm", "head -c 1G /dev/zero > /dev/shm/fill" },
}

describe_walls("an instance whose spawner died", function()
  for _, setting in ipairs(SETTINGS) do for _, attack in ipairs(ATTACKS) do
    it("under " .. setting[1] .. ", is retired after " .. attack[1] .. "; the next request runs in a fresh one on the same files", function()
      core.run(function()
        local h = S.start_sandboxd{ policies = policy_dir(), wrap = setting[2] }
        local first = exec(h, "heal", "echo kept > kept.txt && echo started")
        assert.equal(0, first.exitCode, first.stderr)
        local before = instance_procs(h.pid)
        assert.is_not_nil(next(before), "no instance process seen")
        local old_ns, host_ns = {}, nil
        do
          local p = io.popen("readlink /proc/self/ns/mnt"); host_ns = p:read("l"); p:close()
        end
        for _, ns in pairs(before) do
          if ns ~= host_ns then old_ns[ns] = true end -- bwrap itself runs in the host's
        end
        assert.is_not_nil(next(old_ns), "no instance mount namespace seen")

        local hit = exec(h, "heal", attack[2])
        assert.are_not.equal(0, hit.exitCode)
        no_host_paths(h, hit.stderr)
        if hit.stderr:find("while the command ran", 1, true) then -- the spawner died under it: said in words
          assert.truthy(hit.stderr:find("this sandbox instance ended: every process in it was killed", 1, true), hit.stderr)
        end

        -- the attack ended the instance, and the server noticed and retired it (a request racing
        -- the instance's last moments may still meet it dying, and is told so in words)
        assert.truthy(S.wait_for(function() return h.log():find("sandboxd.instance_retired", 1, true) end, 60000),
          "the instance was never retired:\n" .. h.log())
        -- the fresh instance mounts the workspace's image only when no other mount of it is left
        -- (src/walls/disk.c hold_image): held here for 3 s, as a dying instance's loop device
        -- holds it, the next request waits for it; a second mount read a file written just
        -- before as empty
        local held = S.tmpdir() .. "/held"
        os.execute(("flock %s/heal-*/.workspace.img -c 'touch %s; sleep 3' >/dev/null 2>&1 &"):format(h.root, held))
        assert.truthy(S.wait_for(function() return core.fs.exists(held) end, 60000), "the image was never free to lock")
        local t0 = core.now_ms()
        -- every later request works, in a fresh instance, on the same workspace
        for i = 1, 3 do
          local after = exec(h, "heal", "cat kept.txt && echo again-" .. i .. " >> kept.txt && touch /dev/shm/ok")
          no_host_paths(h, after.stderr)
          assert.equal(0, after.exitCode, cjson.encode(after) .. "\n" .. h.log())
          assert.truthy(after.stdout:find("^kept\n"), cjson.encode(after) .. "\n" .. h.log())
          if i == 1 then assert.is_true(core.now_ms() - t0 >= 2500, "the image was mounted while held") end
        end
        -- nothing of the old instance is left: its processes, its mount namespace, its cgroup
        local now = instance_procs(h.pid)
        for id in pairs(before) do assert.is_nil(now[id], "an old instance process is still alive: " .. id) end
        local fresh = {}
        for id in pairs(now) do fresh[id:match("^(%d+):")] = true end
        local namespaces = host_mount_namespaces(fresh)
        for ns in pairs(old_ns) do
          assert.is_nil(namespaces[ns], "the old mount namespace is still held: " .. ns .. "\n" .. holders(ns))
        end
        local cgroups = instance_cgroups(h.pid)
        local per_controller = {}
        for _, d in ipairs(cgroups) do
          local c = d:match("^/sys/fs/cgroup/([^/]+)/")
          per_controller[c] = (per_controller[c] or 0) + 1
        end
        for c, n in pairs(per_controller) do assert.equal(1, n, c .. ": " .. table.concat(cgroups, " ")) end
        h:stop()
        assert.equal(0, h:wait().exit)
      end)
    end)
  end end
end)

-- Black-box: the walls around sandboxd's instances (issue 10, docs/isolation.md). Each test is
-- an attack a hostile command would try against a real `switchboard sandboxd`, which must fail
-- from inside while the same command's legitimate work succeeds; the limits are exercised for
-- real. Every instance gets host uids from a range of this run's own, so what the spec counts on
-- the host is its own and nobody else's.
local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")
local policies = require("support.policies")
local procs = require("support.procs")

local UID_BASE = require("support.walls").private_uid_base(64)
local UID_COUNT = 64

local function policy_dir(isolation_extra, timeouts_extra)
  return policies.dir{
    timeouts = function(src) return src .. "\n" .. S.FAST .. "\n" .. (timeouts_extra or "") .. "\n" end,
    isolation = function(src)
      -- uid_blocks = 1: the processes counted below are this range's, so never move to another
      return src .. ("\nuid_base = %d\nuid_count = %d\nuid_blocks = 1\n"):format(UID_BASE, UID_COUNT) .. (isolation_extra or "") .. "\n"
    end,
  }
end

local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

-- Processes on this host that belong to this run's instances (their host uid is in our range),
-- zombies excluded (they are dead; reaping them is their parent's business).
local function instance_procs()
  local out = {}
  for _, pid in ipairs(procs.pids()) do
    local status = read("/proc/" .. pid .. "/status") or ""
    local uid = tonumber(status:match("\nUid:%s+%d+%s+(%d+)"))
    local state = status:match("\nState:%s+(%S)")
    if uid and uid >= UID_BASE and uid < UID_BASE + UID_COUNT and state ~= "Z" then
      out[#out + 1] = pid
    end
  end
  return out
end

-- The distinct host uids of this run's live instance processes (one per awake instance): their
-- count, and the set.
local function instance_uids()
  local seen, n = {}, 0
  for _, pid in ipairs(instance_procs()) do
    local uid = tonumber((read("/proc/" .. pid .. "/status") or ""):match("\nUid:%s+%d+%s+(%d+)"))
    if uid and not seen[uid] then seen[uid], n = true, n + 1 end
  end
  return n, seen
end

local function exec(h, thread, command, extra)
  local body = { command = command }
  for k, v in pairs(extra or {}) do body[k] = v end
  local status, _, raw = S.call(h.url, "/exec", { thread = thread, body = body, deadline_ms = 120000 })
  assert.equal(200, status, raw)
  return cjson.decode(raw)
end

local function file_op(h, thread, route, body)
  local status, _, raw = S.call(h.url, route, { thread = thread, body = body })
  return status, cjson.decode(raw)
end

-- Whether this kernel gives the walls (support/walls.lua): one real sandboxd start answers it.
-- The attacks themselves live in support/walls.lua: the image's test runs the same ones.
local function against(h)
  return function(thread, command, extra) return exec(h, thread, command, extra) end, {
    token = S.TOKEN, pid = h.pid, root = h.root,
    healthz = function() return (S.call(h.url, "/healthz", { thread = false })) end,
  }
end

local walls = require("support.walls")
local describe_walls = walls.probe(policy_dir(),
  { describe = describe, it = it, pending = pending })

after_each(S.cleanup_servers)
teardown(S.cleanup)

describe("sandboxd: starting with and without walls", function()
  it("refuses to start when the walls cannot be built, naming what is missing and --no-walls", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = policy_dir(), may_fail = true,
        env = { SWITCHBOARD_WALLS_HELPER = "/nonexistent/switchboard-walls" } }
      local r = h:wait()
      assert.equal(78, r.exit)
      assert.truthy(h.log():find("cannot build the walls around sandbox instances: the walls helper switchboard-walls", 1, true), h.log())
      assert.truthy(h.log():find("--no-walls", 1, true))
      -- the flag runs without them, loudly
      local dev = S.start_sandboxd{ policies = policy_dir(), args = { "--no-walls" },
        env = { SWITCHBOARD_WALLS_HELPER = "/nonexistent/switchboard-walls" } }
      assert.truthy(dev.log():find("WARNING: --no-walls", 1, true), dev.log())
      assert.truthy(dev.log():find('walls=none', 1, true), dev.log())
      dev:stop(); dev:wait()
    end)
  end)
end)

describe_walls("sandboxd walls: what a command sees and cannot do", function()
  local dir = policy_dir()

  it("cannot read the server's environment or memory, nor signal it; sees only its own processes", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = dir }
      walls.attacks.server(against(h))
      -- and the server's own environment no longer holds the bearer
      assert.is_nil((read("/proc/" .. h.pid .. "/environ") or ""):find(S.TOKEN, 1, true))
      h:stop(); h:wait()
    end)
  end)

  it("sees no other workspace, no server root and no secret files; its own work (git, files, /usr) succeeds", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = dir }
      walls.attacks.neighbours(against(h))
      h:stop(); h:wait()
    end)
  end)

  it("another thread's GH_TOKEN is not readable from /proc while its command runs", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = dir }
      walls.attacks.gh_token(against(h))
      h:stop(); h:wait()
    end)
  end)

  it("/read and /write hold the walls: a swapped workspace, a symlink out and a hard link to a host file lead nowhere", function()
    core.run(function()
      -- the held handle is an awake instance's: S.FAST's 2 s sleep_after put it to sleep between
      -- two requests on a loaded machine, and the wake opened the swapped path anew
      local h = S.start_sandboxd{ policies = policy_dir(nil, 'sandbox.sleep_after = "10m"') }
      local r = exec(h, "A", table.concat({
        "echo data > keep",
        "ln -s /etc/shadow shadow-link",
        "ln /etc/passwd passwd-hard 2>&1 || echo no-hardlink",
        "cd / && mv /workspace /workspace.bak 2>&1 || echo no-swap",
        "ln -s /etc /workspace2 2>&1 || echo no-symlink-at-root",
      }, "\n"))
      assert.truthy(r.stdout:find("no-hardlink", 1, true), r.stdout .. r.stderr)
      assert.truthy(r.stdout:find("no-swap", 1, true), r.stdout .. r.stderr)
      local status, doc = file_op(h, "A", "/read", { path = "shadow-link" })
      assert.equal(403, status)
      assert.equal("escape", doc.reason)
      status = file_op(h, "A", "/read", { path = "passwd-hard" })
      assert.equal(404, status)
      -- the host-side swap (as if the command had managed it): the held handle does not follow
      local ws
      for _, name in ipairs(core.fs.list(h.root)) do
        if name:find("^A%-") then ws = h.root .. "/" .. name end
      end
      assert.truthy(ws)
      assert.truthy(os.rename(ws, ws .. ".bak"))
      os.execute(("ln -s /etc '%s'"):format(ws))
      status, doc = file_op(h, "A", "/read", { path = "shadow" })
      assert.equal(404, status, cjson.encode(doc))
      status, doc = file_op(h, "A", "/read", { path = "keep" })
      assert.equal(200, status)
      assert.equal("data\n", core.crypto.base64_decode(doc.content))
      -- a write lands in the instance's own workspace, owned by its uid, and the command can edit it
      status = file_op(h, "A", "/write", { path = "w.txt", content = "from-write" })
      assert.equal(200, status)
      assert.equal(0, exec(h, "A", "echo more >> w.txt && cat w.txt").exitCode)
      assert.is_nil(read("/etc/w.txt"))
      os.remove(ws)
      h:stop(); h:wait()
    end)
  end)
end)

describe_walls("sandboxd walls: a workspace path swapped while its instance sleeps", function()
  -- Root on the host (or a bug) replaces a slept thread's kept workspace with a symlink. The wake
  -- must not follow it: the new instance's first request clears whatever is at its path that
  -- is not a directory (sandboxd/runner.lua fresh: the link itself, not its target), so no
  -- command, /read or /write reaches the target, and nothing there is created, chowned or mounted.
  it("the wake does not follow a symlink at the workspace's path", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = policy_dir("spare_instances = 0") } -- S.FAST: sleeps after 2 s
      assert.equal(0, exec(h, "A", "echo data > keep").exitCode)
      local ws = require("switchboard.shell.workspace").path(h.root, "A")
      assert.is_true(S.wait_for(function()
        return h.log():find("sandboxd.instance_slept", 1, true) ~= nil
      end, 60000), "the instance never slept:\n" .. h.log())
      S.rm(ws) -- the kept workspace (issue 37) replaced by the link below
      local bait = S.tmpdir()
      local f = assert(io.open(bait .. "/secret", "w"))
      f:write("canary-" .. S.TOKEN .. "\n")
      f:close()
      assert.is_true(os.execute(("chmod 755 '%s' && chmod 644 '%s/secret' && ln -s '%s' '%s'")
        :format(bait, bait, bait, ws)))
      local function listing() return io.popen(("ls -lnR --time-style=+%%s.%%N '%s'"):format(bait)):read("a") end
      local before = listing()
      local r = exec(h, "A", "ls -A; cat secret; echo planted > planted")
      assert.equal("", r.stdout, cjson.encode(r)) -- a new, empty workspace: not the link's target
      local status, doc = file_op(h, "A", "/read", { path = "secret" })
      assert.equal(404, status, cjson.encode(doc))
      status = file_op(h, "A", "/write", { path = "written", content = "x" })
      assert.equal(200, status)
      assert.equal("planted\n", exec(h, "A", "cat planted").stdout)
      assert.equal(before, listing())
      assert.falsy(os.execute(("test -L '%s'"):format(ws)), "the link is still at the workspace's path")
      h:stop(); h:wait()
      S.rm(bait)
    end)
  end)
end)

describe_walls("sandboxd walls: nothing left behind", function()
  it("a daemon a command started dies when its instance sleeps, and when the server stops", function()
    core.run(function()
      -- no spare instance here: every process of this run's uids must go when the one
      -- instance sleeps (the spare's own end is the next test's). It sleeps after 10 s, not
      -- S.FAST's 2 s: beside stress-ng (load 53) the count of its processes right after the
      -- answer once came after the instance had gone to sleep (line "#instance_procs() >= 2")
      local h = S.start_sandboxd{ policies = policy_dir("spare_instances = 0", 'sandbox.sleep_after = "10s"') }
      -- the previous test's instances are reaped, but a killed process leaves its cgroup before
      -- it has finished exiting (freeing a memory hog's pages takes a while on a loaded host)
      assert.is_true(S.wait_for(function() return #instance_procs() == 0 end, 20000),
        "left from before: " .. table.concat(instance_procs(), " "))
      local r = exec(h, "A", "setsid sleep 1000 >/dev/null 2>&1 < /dev/null & echo started")
      assert.truthy(r.stdout:find("started", 1, true))
      assert.is_true(#instance_procs() >= 2)  -- the holder and the daemon
      -- after sleep_after (10 s) the instance sleeps and every process goes with it
      assert.is_true(S.wait_for(function() return #instance_procs() == 0 end, 60000), "left: " .. #instance_procs())
      exec(h, "B", "setsid sleep 1000 >/dev/null 2>&1 < /dev/null & echo started")
      assert.is_true(#instance_procs() >= 2)
      h:stop("TERM")
      assert.equal(0, h:wait().exit)
      assert.same({}, instance_procs())
    end)
  end)

  it("a new thread takes the spare instance (empty, its own), a replacement is built, all gone at stop", function()
    core.run(function()
      -- S1 and S2 stay awake until the replacement spare is counted: building one (bwrap, and
      -- pasta for the network) takes seconds on a loaded host, past S.FAST's 2 s sleep_after
      local h = S.start_sandboxd{ policies = policy_dir("spare_instances = 1", 'sandbox.sleep_after = "60s"') }
      -- the spare is built at start, before any thread asks
      assert.is_true(S.wait_for(function() return instance_uids() == 1 end, 20000), "no spare: " .. instance_uids())
      -- the directories in sandboxd's root, by name → inode
      local function dirs()
        local p = io.popen("cd '" .. h.root .. "' && stat -c '%n %i' .[!.]* * 2>/dev/null")
        local t = {}
        for name, inode in p:read("a"):gmatch("(%S+) (%d+)\n") do t[name] = inode end
        p:close()
        return t
      end
      local spare_inode
      for name, inode in pairs(dirs()) do
        if name:match("^%.spare%-") then spare_inode = inode end
      end
      assert.truthy(spare_inode, "no spare workspace in the root")
      local r = exec(h, "S1", "ls -A /workspace | wc -l; id -u; echo mine > f")
      assert.equal(0, r.exitCode, r.stderr)
      assert.equal("0\n1000\n", r.stdout) -- a fresh workspace, the instance's own user inside
      local taken
      for name, inode in pairs(dirs()) do
        if inode == spare_inode then taken = name end
      end
      -- the spare's workspace is now the thread's (renamed onto its name)
      assert.truthy(taken and not taken:match("^%.spare%-"), tostring(taken))
      local status, doc = file_op(h, "S1", "/read", { path = "f" })
      assert.equal(200, status)
      assert.equal("mine\n", core.crypto.base64_decode(doc.content))
      -- another thread's spare is another instance: it does not see S1's file
      r = exec(h, "S2", "ls -A /workspace | wc -l")
      assert.equal("0\n", r.stdout)
      -- S1, S2 and a new spare: a replacement's build (its image, bwrap, pasta) took over 20 s
      -- on an ASan build beside stress-ng; two minutes rule out one that never comes
      assert.is_true(S.wait_for(function() return instance_uids() == 3 end, 120000),
        "uids: " .. instance_uids() .. "; the server's log:\n" .. h.log())
      h:stop("TERM")
      assert.equal(0, h:wait().exit)
      assert.same({}, instance_procs())
    end)
  end)

  it("kill -9 of sandboxd leaves no process of any instance on the host", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = policy_dir() }
      local before = #procs.pids()
      for _, t in ipairs({ "A", "B", "C" }) do
        exec(h, t, "setsid sleep 1000 >/dev/null 2>&1 < /dev/null & (sleep 1000 &) ; echo started")
      end
      local running = {}
      core.go(function() running.r = pcall(exec, h, "D", "sleep 1000") end) -- its connection drops
      assert.is_true(S.wait_for(function() return #instance_procs() >= 10 end, 10000), "#" .. #instance_procs())
      h:stop("KILL")
      h:wait()
      -- each instance's holder dies with its parent (PDEATHSIG) and takes its namespace with it;
      -- a minute rules out one that lives on, and bears a starved machine's slow reaping
      assert.is_true(S.wait_for(function() return #instance_procs() == 0 end, 60000),
        "left after kill -9: " .. table.concat(instance_procs(), " "))
      -- (the host's total is not compared: other people's processes come and go on a shared
      -- machine; every process of an instance runs as a uid of this run's range, counted above)
      assert.is_true(before > 0)
    end)
  end)
end)

describe_walls("sandboxd walls: limits, answered in words", function()
  local dir = policy_dir("memory_bytes = 96 * MiB\npids_max = 48\ncpu_percent = 20\nfile_size_bytes = 1 * MiB\n")

  -- Each walled server keeps its instances' sockets in /tmp/switchboard-walls-<pid>-<8 hex>,
  -- removed at its stop; a killed one's stayed (~1,900 on the development host). The next start
  -- removes those whose server is gone, and nothing else of that look.
  it("a sandboxd's sockets directory left by kill -9 is removed at the next start; a live pid's, a symlink and other names stay", function()
    core.run(function()
      local function socket_dirs(pid)
        local out = {}
        for _, entry in ipairs(core.fs.list("/tmp") or {}) do
          local name = type(entry) == "table" and entry.name or entry
          if name:match("^switchboard%-walls%-" .. pid .. "%-%x+$") then out[#out + 1] = "/tmp/" .. name end
        end
        return out
      end
      local h = S.start_sandboxd{ policies = policy_dir() }
      local left = socket_dirs(h.pid)
      assert.equal(1, #left, "the server's sockets directory: " .. table.concat(left, " "))
      left = left[1]
      h:stop("KILL")
      h:wait()
      -- (another walled server starting on this host meanwhile — a spec beside this one — may
      -- sweep it first: what counts is that it is gone after the next start, below)
      -- beside it: a live process's name, a symlink of the killed server's pid to a directory
      -- holding a file, and a name of another kind for the same pid
      local live = assert(core.spawn{ argv = { "sleep", "1000" }, env = { PATH = os.getenv("PATH") } })
      local live_dir = ("/tmp/switchboard-walls-%d-0badc0de"):format(live.pid)
      local target = S.tmpdir()
      local link = ("/tmp/switchboard-walls-%d-1badc0de"):format(h.pid)
      local other = ("/tmp/switchboard-walls-%d-notours"):format(h.pid)
      assert(os.execute(("mkdir '%s' '%s' && touch '%s/kept' && ln -s '%s' '%s'"):format(live_dir, other, target, target, link)))
      local h2 = S.start_sandboxd{ policies = policy_dir() }
      local gone = S.wait_for(function() return not core.fs.exists(left) end, 30000)
      local live_kept, other_kept = core.fs.exists(live_dir), core.fs.exists(other)
      local link_kept = os.execute(("test -L '%s'"):format(link)) and core.fs.exists(target .. "/kept")
      h2:stop("TERM")
      local exit = h2:wait().exit
      live:kill("KILL"); live:wait()
      os.execute(("rm -rf '%s' '%s' '%s' '%s'"):format(live_dir, other, link, left))
      S.rm(target)
      assert.is_true(gone, "the killed server's directory is still there: " .. left .. "\n" .. h2.log())
      assert.is_true(live_kept, "a live process's directory was removed")
      assert.is_true(other_kept, "a name of another kind was removed")
      assert.is_true(link_kept, "the symlink or what it points to was removed")
      assert.equal(0, exit)
    end)
  end)

  it("a memory hog is killed with the limit named; the server and another instance answer meanwhile", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = dir }
      local hog
      core.go(function() hog = exec(h, "hog", "python3 -c 'x = bytearray(400 << 20); import time; time.sleep(5)'; echo exit=$?") end)
      local other = exec(h, "other", "echo fine")
      assert.equal("fine\n", other.stdout)
      S.wait_for(function() return hog end, 60000)
      assert.truthy(hog.stdout:find("exit=137", 1, true), hog.stdout)
      assert.truthy(hog.stderr:find("killed: this sandbox's memory limit (96 MiB) was reached — policies/isolation.lua memory_bytes", 1, true), hog.stderr)
      assert.equal(200, (S.call(h.url, "/healthz", { thread = false })))
      h:stop(); h:wait()
    end)
  end)

  it("a fork bomb is bounded by the pids limit and named; others keep answering", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = dir }
      local run, ctx = against(h)
      ctx.pids_max = 48
      walls.attacks.fork_bomb(run, ctx)
      h:stop(); h:wait()
    end)
  end)

  it("a CPU spinner is throttled to its quota (20% of a core); a file past file_size_bytes is refused", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = dir }
      local spin
      core.go(function()
        spin = exec(h, "spin", "for i in 1 2 3; do timeout 2 sh -c 'while :; do :; done' & done; wait; times")
      end)
      local t0 = core.now_ms()
      assert.equal("fine\n", exec(h, "other", "echo fine").stdout)
      assert.is_true(core.now_ms() - t0 < 10000)
      S.wait_for(function() return spin end, 60000)
      -- the children's CPU time over ~2 s of wall clock: three spinners unthrottled would take up
      -- to 6 s (as many cores as the host gives); the quota allows 0.4 s and a period of slack
      local um, us, sm, ss = spin.stdout:match("\n(%d+)m([%d.]+)s (%d+)m([%d.]+)s\n$")
      assert.truthy(um, spin.stdout)
      local cpu_s = tonumber(um) * 60 + tonumber(us) + tonumber(sm) * 60 + tonumber(ss)
      assert.is_true(cpu_s <= 1.0, ("the spinners used %.2f s of CPU in 2 s"):format(cpu_s))
      local big = exec(h, "spin", "head -c 3000000 /dev/zero > big; echo st=$?; stat -c %s big")
      assert.truthy(big.stdout:find("1048576", 1, true), big.stdout .. big.stderr)
      h:stop(); h:wait()
    end)
  end)
end)

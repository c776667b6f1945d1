-- core.spawn{walls = SOCKET} (docs/engine.md, docs/isolation.md): a command started by a real
-- sandbox instance's spawner keeps every semantic of an unwalled one — result, stdin, streamed
-- output, the deadline's TERM then 124, proc:kill, an abort — and says in words when its
-- instance ends under it. Needs what sandboxd needs (root, user namespaces, cgroups, bwrap);
-- where the kernel lacks it each case is pending with the reason; a missing helper binary fails.
local core = require("switchboard.core")
local S = require("support.sandbox")
local policies = require("support.policies")
local instance = require("switchboard.shell.instance")
local support_walls = require("support.walls")

-- host uids of this run's own (other specs and engineers use theirs)
local UID_BASE = support_walls.private_uid_base(8)
local snap = assert(policies.load(policies.dir{
  isolation = function(src) return src .. ("\nuid_base = %d\nuid_count = 8\n"):format(UID_BASE) end,
}))
local HELPER = (os.getenv("SWITCHBOARD_BIN") or "./build/switchboard"):gsub("switchboard$", "switchboard-walls")
local walls, why, scratch

local function start_instance()
  local ws = scratch .. "/w-" .. core.crypto.hex(core.crypto.random_bytes(4))
  assert(core.fs.mkdir_p(ws, tonumber("700", 8)))
  local inst = walls:new(ws, "spec", snap)
  assert(inst:start())
  return inst
end

-- The spawn arguments of `bash -c cmd` inside inst, with extra options.
local function args(inst, cmd, extra)
  local a = { argv = { "/bin/bash", "-c", cmd }, env = { PATH = "/usr/bin:/bin" } }
  for k, v in pairs(extra or {}) do a[k] = v end
  return assert(inst:spawn_args(a))
end

-- A directory holding a `bwrap` for the helper's PATH that, the first time, waits pause_s and
-- says bwrap's transient "loopback: Failed RTM_NEWADDR: No child processes" and exits 1; every
-- later call execs the real bwrap. The helper runs bwrap as the instance's uid: the directory
-- (where the once-marker is made) is writable by it.
local function bwrap_failing_once(pause_s)
  local real_bwrap = io.popen("command -v bwrap"):read("l")
  assert.truthy(real_bwrap, "no bwrap")
  local wrap = S.tmpdir()
  local script = io.open(wrap .. "/bwrap", "w")
  script:write(("#!/bin/sh\nif mkdir '%s/failed' 2>/dev/null; then\n%s"
    .. "  echo 'bwrap: loopback: Failed RTM_NEWADDR: No child processes' >&2; exit 1\nfi\n"
    .. "exec '%s' \"$@\"\n"):format(wrap, pause_s > 0 and ("  sleep %d\n"):format(pause_s) or "", real_bwrap))
  script:close()
  os.execute("chmod 0777 '" .. wrap .. "' && chmod 0755 '" .. wrap .. "/bwrap'")
  return wrap
end

describe("core.spawn behind the walls", function()
  setup(function()
    core.run(function()
      scratch = S.tmpdir()
      os.execute("chmod 0711 '" .. scratch .. "'")
      -- spares as sandboxd has them (two hosts in one process would share its cgroups)
      walls, why = instance.host{ snap = snap, policy = function() return snap end, helper = HELPER,
        scratch = scratch, spares = true }
    end)
  end)
  teardown(function()
    if walls then core.run(function() walls:close() end) end
    if scratch then S.rm(scratch) end
    S.cleanup()
  end)

  local function walled_it(name, fn)
    it(name, function()
      if not walls then
        -- only the kernel may excuse a spec: a missing helper (a build that did not make it)
        -- or a missing package fails, with instance.host's words
        assert(support_walls.kernel_lacks(why), "the walls cannot be built: " .. tostring(why))
        pending("this kernel cannot give the walls: " .. tostring(why))
        return
      end
      core.run(fn)
    end)
  end

  walled_it("runs inside the instance: the result, exit codes, stdin, streamed output", function()
    local inst = start_instance()
    local chunks = {}
    local proc = assert(core.spawn(args(inst, "id -u; cat; echo err >&2; pwd; exit 3", {
      stdin = "from stdin\n",
      on_output = function(stream, bytes) chunks[#chunks + 1] = stream .. ":" .. bytes end,
    })))
    assert.equal(0, proc.pid) -- its pid is the instance's
    local r = proc:wait()
    assert.equal(3, r.exit)
    assert.equal("1000\nfrom stdin\n/workspace\n", r.stdout)
    assert.equal("err\n", r.stderr)
    assert.is_false(r.timed_out)
    assert.truthy(table.concat(chunks):find("stdout:", 1, true))
    inst:stop()
  end)

  -- A request larger than a unix socket's buffer (six variables of 100 KiB, each under the
  -- kernel's 128 KiB per string): the engine's non-blocking socket takes the header, the fds and
  -- a first part, and the rest follows as the socket drains.
  local function big_env()
    local env = { PATH = "/usr/bin:/bin" }
    for i = 1, 6 do env["BIG" .. i] = string.rep(tostring(i), 100 * 1024) end
    return env
  end
  local BIG_SCRIPT, BIG_OUT = 'id -u; cat; echo "${#BIG1}${BIG6: -1}"; exit 5', "1000\nvia %s\n1024006\n" -- 102400, then the last "6"

  walled_it("a request larger than the socket's buffer arrives whole", function()
    local inst = start_instance()
    local r = assert(core.spawn(args(inst, BIG_SCRIPT, { env = big_env(), stdin = "via engine\n" }))):wait()
    assert.equal(5, r.exit, r.stderr)
    assert.equal(BIG_OUT:format("engine"), r.stdout)
    inst:stop()
  end)

  -- The engine's unix sockets (this process is the engine): what each command would cost in
  -- connections, counted where they are held.
  local function unix_sockets()
    local inodes = {}
    for line in io.lines("/proc/net/unix") do
      local inode = line:match("^%x+: %x+ %x+ %x+ %x+ %x+%s+(%d+)")
      if inode then inodes[inode] = true end
    end
    local stat = io.open("/proc/self/stat"):read("l") -- (io.open runs in this process)
    local listing = io.popen("ls -l /proc/" .. stat:match("^(%d+)") .. "/fd")
    local n = 0
    for line in listing:lines() do
      local inode = line:match("socket:%[(%d+)%]")
      if inode and inodes[inode] then n = n + 1 end
    end
    listing:close()
    return n
  end

  -- The spawner holds its copy of a command's stdout until the command's reply is on the socket
  -- (spawner.c, command_ended), so a client's loop learns the end and the EOF in one wakeup,
  -- not one for each (issue 43: CPU per request). The probe (tests/c/walls_order_probe.c) reads
  -- each command's stdout to its EOF, then looks without waiting for the reply; before the hold
  -- the pipe ended as the command died and the reply came a few context switches later.
  walled_it("a command's reply is on the socket when its stdout ends (one wakeup, not two)", function()
    local inst = start_instance()
    local socket = assert(inst:spawn_args{ argv = { "true" } }).walls
    local probe = (os.getenv("SB_BUILD_DIR") or "./build") .. "/tests/walls_order_probe"
    local r = assert(core.spawn{ argv = { probe, socket, "40", "/bin/bash", "-c", "echo out" } }):wait()
    assert.equal(0, r.exit, r.stderr)
    assert.same({ n = 40, reply_at_eof = 40, errors = 0 }, require("cjson").decode(r.stdout))
    inst:stop()
  end)

  -- The spawner gives up the capabilities setns gave it and sets no_new_privs once, for itself,
  -- at its start; every command inherits both (no capset per command). Looked at in a command
  -- and, from the host, in the spawner that is its parent.
  walled_it("a command and its spawner hold no capability and have no_new_privs", function()
    local function privileges(status)
      local t = {}
      for name, value in status:gmatch("\n(Cap%a%a%a):%s*(%x+)") do t[name] = value end
      t.NoNewPrivs = status:match("\nNoNewPrivs:%s*(%d)")
      return t
    end
    local none = { CapInh = "0000000000000000", CapPrm = "0000000000000000",
      CapEff = "0000000000000000", CapAmb = "0000000000000000", NoNewPrivs = "1" }
    local inst = start_instance()
    local r = assert(core.spawn(args(inst, "cat /proc/self/status"))):wait()
    assert.equal(0, r.exit, r.stderr)
    local own = privileges("\n" .. r.stdout)
    own.CapBnd = nil
    assert.same(none, own)
    -- the spawner: the host's parent of a command found by its unique argument
    local mark = ("30.%d"):format(math.random(100000, 999999))
    local proc = assert(core.spawn(args(inst, "exec sleep " .. mark)))
    local spawner
    for _ = 1, 600 do
      local ls = io.popen("ls /proc")
      local pids = ls:read("a")
      ls:close()
      for pid in pids:gmatch("%d+") do
        local f = io.open("/proc/" .. pid .. "/cmdline")
        local cmdline = f and f:read("a")
        if f then f:close() end
        if cmdline == "sleep\0" .. mark .. "\0" then
          local status = io.open("/proc/" .. pid .. "/status"):read("a")
          spawner = tonumber(status:match("\nPPid:%s*(%d+)"))
        end
      end
      if spawner then break end
      core.sleep(50)
    end
    assert.truthy(spawner, "the command's process was not found on the host")
    local f = assert(io.open("/proc/" .. spawner .. "/status"))
    local theirs = privileges(f:read("a"))
    f:close()
    theirs.CapBnd = nil
    assert.same(none, theirs)
    proc:kill()
    proc:wait()
    inst:stop()
  end)

  walled_it("one link per instance: commands at once and in turn share one connection (issue 43)", function()
    local inst = start_instance()
    assert.equal(0, assert(core.spawn(args(inst, "true"))):wait().exit) -- the link is made
    local before = unix_sockets()
    local procs = {}
    for i = 1, 6 do procs[i] = assert(core.spawn(args(inst, "sleep 0.3; echo " .. i))) end
    local during = unix_sockets()
    for i = 1, 6 do
      local r = procs[i]:wait()
      assert.equal(0, r.exit, r.stderr)
      assert.equal(i .. "\n", r.stdout) -- each reply reached its own command
    end
    for _ = 1, 20 do assert.equal(0, assert(core.spawn(args(inst, "true"))):wait().exit) end
    assert.equal(before, during) -- no connection per command: six at once opened none
    assert.equal(before, unix_sockets())
    -- the link outlives its instance only until the spawner's end closes; a fresh instance at
    -- another path gets its own, and the stopped one's commands fail to start in words
    inst:stop()
    local again = start_instance()
    local r = assert(core.spawn(args(again, "echo again"))):wait()
    assert.equal("again\n", r.stdout)
    again:stop()
  end)

  -- What this process's descriptors point at.
  local function open_paths()
    local stat = io.open("/proc/self/stat"):read("l")
    local listing = io.popen("ls -l /proc/" .. stat:match("^(%d+)") .. "/fd")
    local paths = {}
    for line in listing:lines() do
      local target = line:match(" %-> (.*)$")
      if target then paths[#paths + 1] = target end
    end
    listing:close()
    return table.concat(paths, "\n")
  end

  -- The processes this process holds pidfds of (each pidfd's fdinfo names its pid).
  local function watched_pids()
    local self_pid = io.open("/proc/self/stat"):read("l"):match("^(%d+)")
    local listing = io.popen("grep -h '^Pid:' /proc/" .. self_pid .. "/fdinfo/* 2>/dev/null")
    local pids = {}
    for line in listing:lines() do pids[tonumber(line:match("(%-?%d+)"))] = true end
    listing:close()
    return pids
  end

  -- Where a process's fd 1 points (its /proc entry's link).
  local function stdout_of(pid)
    local link = io.popen("readlink /proc/" .. pid .. "/fd/1 2>/dev/null")
    local target = link:read("l")
    link:close()
    return target
  end

  walled_it("an awake instance holds the init's pidfd and no counter file, and its holder's stdout is let go (issue 43)", function()
    local inst = start_instance()
    local held = open_paths()
    -- the counters are opened per read (sandboxd's descriptor budget: sandboxd/descriptors.lua)
    assert.falsy(held:find(inst.cgroups.pids .. "/pids.events", 1, true), held)
    assert.falsy(held:find(inst.cgroups.memory, 1, true), held)
    -- the init is watched through a pidfd (core.pid_watch), not its /proc stat file
    assert.is_true(watched_pids()[inst.pid], held)
    assert.falsy(held:find("/proc/" .. inst.pid .. "/stat", 1, true), held)
    -- once it said ready, the holder's stdout (and its children's) is /dev/null: the pipe ended
    -- and the engine closed its end
    assert.equal("/dev/null", stdout_of(inst.proc.pid))
    assert.equal("/dev/null", stdout_of(inst.pid))
    local before = inst:counters()
    -- they still count: a fork past the instance's process limit is seen through the counter
    -- (sleeps that outlive the forks however slow the host: a 5 s one once ended under load
    -- before the last fork, and no fork was refused)
    local r = assert(core.spawn(args(inst, ("for i in $(seq %d); do sleep 120 & done; kill $(jobs -p) 2>/dev/null; wait"):format(
      snap.isolation.pids_max + 8), { deadline_ms = 60000 }))):wait()
    assert.is_true(inst:counters().pids > before.pids, r.stderr)
    assert.is_false(inst:dead())
    inst:stop()
    assert.is_nil(watched_pids()[inst.pid]) -- closed with it
  end)

  walled_it("the diagnostic `run` client (switchboard-walls run) speaks the same protocol", function()
    local inst = start_instance()
    local r = assert(core.spawn{
      argv = inst:argv{ "/bin/bash", "-c", BIG_SCRIPT }, env = big_env(), stdin = "via run\n",
    }):wait()
    assert.equal(5, r.exit, r.stderr)
    assert.equal(BIG_OUT:format("run"), r.stdout)
    inst:stop()
  end)

  walled_it("a deadline sends TERM to the group, then KILL after the grace: 124", function()
    local inst = start_instance()
    local t0 = core.now_ms()
    local r = assert(core.spawn(args(inst, "trap '' TERM; sleep 1000 & sleep 1000",
      { deadline_ms = 300, kill_grace_ms = 300 }))):wait()
    assert.equal(124, r.exit)
    assert.is_true(r.timed_out)
    assert.is_true(core.now_ms() - t0 < 30000) -- bounded, not timed: the grace's KILL ended it
    -- the group is gone: nothing of it is left in the instance
    local left = assert(core.spawn(args(inst, "pgrep -c sleep || true"))):wait()
    assert.equal("0\n", left.stdout)
    inst:stop()
  end)

  walled_it("proc:kill and an abort reach the command's group", function()
    local inst = start_instance()
    local up = false
    local proc = assert(core.spawn(args(inst, "echo up; exec sleep 1000", {
      on_output = function() up = true end })))
    assert.is_true(S.wait_for(function() return up end, 20000))
    proc:kill("TERM")
    local r = proc:wait()
    assert.equal(15, r.signal)
    assert.equal(143, r.exit)
    local sig = core.signal()
    local p2 = assert(core.spawn(args(inst, "exec sleep 1000", { signal = sig })))
    core.go(function() core.sleep(100); sig:abort("stop") end)
    r = p2:wait()
    assert.is_true(r.aborted)
    assert.equal(9, r.signal)
    inst:stop()
  end)

  -- Two requests of one new thread at once (sandboxd's first /exec and a second one beside it),
  -- both answered from the thread's instance: → the runner.
  local function two_requests(root, spares, key)
    local runner = require("switchboard.sandboxd.runner")
    local r = runner.new(root, key, { walls = spares })
    local results, done = {}, 0
    for i = 1, 2 do
      core.go(function()
        results[i] = { r:exec{ command = "pwd; stat -c %u .", deadline_ms = 60000 } }
        done = done + 1
      end)
    end
    assert.truthy(S.wait_for(function() return done == 2 end, 120000), "the requests never answered")
    for i = 1, 2 do
      local res, err = table.unpack(results[i])
      assert.truthy(res, tostring(err))
      assert.equal(0, res.exit, res.stderr)
      assert.equal("/workspace\n1000\n", res.stdout) -- the instance's own uid inside
    end
    return r
  end

  -- What the two-request cases mean: exactly one instance holds the thread's workspace — the
  -- one that answered (its hold and the hold's children: a forked child keeps the hold's argv)
  -- — and it was claimed once. The claim says where that instance came from: a spare renamed
  -- onto the workspace (its processes still name the ".spare-" directory), or one built for the
  -- thread on its workspace. Both are right: a spare whose build failed (bwrap's transient
  -- RTM_NEWADDR under load, the disk) or did not finish within ready_ms leaves the thread to
  -- build its own, once. Only another hold on the workspace beside the answering one is two
  -- instances (the failure says which path the thread's own instance took).
  local function assert_one_instance(r, seen)
    local procs = require("support.procs")
    local inst = r.ws.instance
    assert.truthy(inst and inst.proc, "the thread has no instance")
    local mine, parent = { [inst.proc.pid] = true }, {}
    for _, p in ipairs(procs.stats()) do parent[p.pid] = p.ppid end
    local function ours(pid)
      for _ = 1, 64 do
        if mine[pid] then return true end
        pid = parent[pid]
        if not pid or pid <= 1 then return false end
      end
      return false
    end
    local cmdlines = procs.cmdlines()
    local on_workspace = "--workspace " .. r.dir .. " "
    local how
    if seen.claimed ~= inst then
      how = "a fresh instance on its workspace, the claimed one's start having failed (the thread's retry)"
    elseif seen.from_spare then
      how = "a spare renamed onto the workspace"
    else
      how = "an instance built for the thread on its workspace (" .. (seen.spare_failed
        and ("the spare's build failed: " .. seen.spare_failed) or "no spare fitted or none was built in time") .. ")"
    end
    for pid, cmd in pairs(cmdlines) do
      assert.falsy(not ours(pid) and cmd:find(" hold ", 1, true) and cmd:find(on_workspace, 1, true),
        "a second instance holds the thread's workspace beside its own, " .. how .. ": " .. pid .. " " .. cmd)
    end
    assert.equal(1, seen.claims, "the thread's instance was claimed " .. seen.claims .. " times; its own is " .. how)
    -- (after the holds: a second instance's helper takes the directory, and the holds say why)
    local owner = io.popen("stat -c %u '" .. r.dir .. "'"):read("l")
    assert.equal(tostring(inst.uid), owner, "the workspace is not its instance's uid's; its own is " .. how)
    return how
  end

  -- Counts the host's claims and remembers its spares' failed builds while fn runs.
  local function watching_claims(spares, fn)
    local seen, real_claim, real_log = { claims = 0 }, spares.claim, spares.log
    spares.claim = function(self, ...)
      seen.claims = seen.claims + 1
      local before = { [spares.building or false] = true }
      for _, spare in ipairs(spares.spares) do before[spare] = true end
      local got = real_claim(self, ...)
      seen.claimed, seen.from_spare = got, before[got] == true
      return got
    end
    spares.log = function(level, event, fields)
      if event == "walls.spare_failed" then seen.spare_failed = tostring(fields.error) end
      return real_log(level, event, fields)
    end
    local ok, err = pcall(fn)
    spares.claim, spares.log = nil, real_log
    if not ok then error(err, 0) end
    return seen
  end

  -- Two requests of a new thread at once while a spare is being built (sandboxd's first /exec
  -- and a second one beside it): the first waits for the spare; the second must wait for that
  -- claim, not start an instance of its own on the same workspace, whose helper would chown the
  -- directory to its uid (the first's commands then die with "walls: chdir /workspace:
  -- Permission denied") and live on with no runner.
  walled_it("two requests of a new thread make one instance, whose uid owns the workspace", function()
    local root, spares = scratch, walls
    -- a claim takes the ready spare and starts building the next on the next loop turn: watch
    -- for that build at every turn, the claimed instance stopping beside it. (Stopped first and
    -- polled every 20 ms, a build quicker than the stop could end unseen; CI failed this file
    -- once with its output cut, and this is the race the case had.)
    if not spares.building then
      local taken = spares:claim(scratch .. "/w-take-" .. core.crypto.hex(core.crypto.random_bytes(4)), "spec")
      core.go(function() taken:stop() end)
      local t0 = core.now_ms()
      while not spares.building and core.now_ms() - t0 < 20000 do core.sleep(0) end
    end
    assert.truthy(spares.building, "no spare is being built")
    -- which helper reaches the directory first varies, so the claims are counted too (the real
    -- claim runs; the count is what a second instance would show every time)
    local r
    local seen = watching_claims(spares, function()
      r = two_requests(root, spares, "two-at-once")
    end)
    assert_one_instance(r, seen)
    r:stop()
  end)

  -- The path the case above once misread (at load ~30 in an integration run): the spare the
  -- thread waited for failed to build, and the thread built its own instance on its workspace —
  -- one instance, claimed once, which is right. Forced here with bwrap's transient failure
  -- (the real bwrap behind a wrapper that says RTM_NEWADDR and exits 1 once, after a pause that
  -- keeps the spare "being built" until both requests wait for it).
  walled_it("two requests of a new thread whose spare fails to build make one instance of their own", function()
    local wrap = bwrap_failing_once(2)
    assert.truthy(S.wait_for(function() return not walls.refilling end, 120000), "a spare is still being built")
    local real_path = walls.path
    walls.path = wrap .. ":" .. real_path
    -- the claim takes the ready spare; the replacement's build (next loop turn) meets the wrapper
    local taken = walls:claim(scratch .. "/w-fail-" .. core.crypto.hex(core.crypto.random_bytes(4)), "spec")
    local t0 = core.now_ms()
    while not walls.building and core.now_ms() - t0 < 20000 do core.sleep(0) end
    local building = walls.building
    local r
    local ok, err = pcall(function()
      assert.truthy(building, "no spare is being built")
      local seen = watching_claims(walls, function()
        r = two_requests(scratch, walls, "spare-failed")
      end)
      assert.truthy(seen.spare_failed, "the spare's build did not fail")
      local how = assert_one_instance(r, seen)
      assert.truthy(how:find("built for the thread", 1, true), how)
      assert.truthy(seen.claimed == r.ws.instance and not seen.from_spare, how)
      assert.are_not.equal(building, r.ws.instance)
    end)
    walls.path = real_path
    if r then r:stop() end
    taken:stop(); core.fs.remove_tree(taken.dir)
    S.rm(wrap)
    assert(ok, err)
  end)

  walled_it("an instance that cannot be built is logged with the helper's own words", function()
    local runner = require("switchboard.sandboxd.runner")
    -- a policy whose root file system has no shell, taken after the host proved itself: bwrap
    -- makes the namespaces, then cannot start the instance's init
    local bad = assert(policies.load(policies.dir{
      isolation = function(src) return src .. ('\nuid_base = %d\nuid_count = 8\nrootfs = "/tmp"\n'):format(UID_BASE) end,
    }))
    local real_policy = walls.snap_fn
    walls.snap_fn = function() return bad end
    local logged = {}
    local r = runner.new(scratch, "unbuildable", { walls = walls,
      log = function(level, event, fields) logged[#logged + 1] = { level, event, fields } end })
    local res, err = r:exec{ command = "true", deadline_ms = 60000 }
    walls.snap_fn = real_policy
    assert.is_nil(res)
    assert.truthy(tostring(err and err.message):find("could not be used", 1, true), tostring(err and err.message))
    local line
    for _, l in ipairs(logged) do if l[2] == "sandboxd.instance_failed" then line = l end end
    assert.truthy(line, "no sandboxd.instance_failed line")
    assert.equal("warn", line[1])
    assert.truthy(line[3].error:find("bwrap: execvp sh", 1, true), line[3].error) -- bwrap's own line
    assert.truthy(line[3].error:find("could not finish its view or start its init", 1, true), line[3].error)
    r:stop()
  end)

  walled_it("a start whose walls could not be built is retried once with a fresh instance, logged", function()
    local runner = require("switchboard.sandboxd.runner")
    -- the first build meets a root file system with no shell (bwrap made the namespaces, then
    -- could not start the instance's init); the log line of that failure restores the policy,
    -- so the retry's fresh instance is built on the real one
    local bad = assert(policies.load(policies.dir{
      isolation = function(src) return src .. ('\nuid_base = %d\nuid_count = 8\nrootfs = "/tmp"\n'):format(UID_BASE) end,
    }))
    local real_policy = walls.snap_fn
    -- One try of the scenario: the bad root's failure, then the retry on the real policy.
    local function try(n)
      walls.snap_fn = function() return bad end
      local failed = {}
      local r = runner.new(scratch, "retried-" .. n, { walls = walls, log = function(level, event, fields)
        if event == "sandboxd.instance_failed" then
          failed[#failed + 1] = { level = level, fields = fields }
          walls.snap_fn = real_policy
        end
      end })
      local res, err = r:exec{ command = "echo second attempt ran", deadline_ms = 60000 }
      walls.snap_fn = real_policy
      return r, res, err, failed
    end
    -- The retry itself can meet the host's own transient (bwrap's "Failed RTM_NEWADDR" under a
    -- burst of starts, as any start can, beside stress-ng at load 19): that try says nothing
    -- about the retry and the scenario is tried again (at most three times); any other second
    -- failure fails the case with both builds' words.
    local r, res, err, failed
    for n = 1, 3 do
      r, res, err, failed = try(n)
      local second = failed[2] and tostring(failed[2].fields.error) or ""
      if res or not second:find("RTM_NEWADDR", 1, true) then break end
      r:stop()
    end
    local said = {}
    for i, f in ipairs(failed) do said[i] = tostring(f.fields.error) end
    assert.truthy(res, "the retry did not run the command: " .. tostring(err and err.message)
      .. "; the builds said: " .. table.concat(said, " | "))
    assert.equal(0, res.exit, res.stderr)
    assert.equal("second attempt ran\n", res.stdout)
    assert.equal(1, #failed, "one failed build, logged once")
    assert.equal("warn", failed[1].level)
    assert.equal(1, failed[1].fields.retry)
    assert.truthy(failed[1].fields.error:find("bwrap: execvp sh", 1, true), failed[1].fields.error)
    r:stop()
  end)

  -- A spare's build that went wrong used to end the refill silently: no log line, no spare
  -- until the next claim (e2e/walls waited 120 s for a replacement that never came).
  walled_it("a spare whose walls could not be built is logged with bwrap's words and built once more", function()
    local bad = assert(policies.load(policies.dir{
      isolation = function(src) return src .. ('\nuid_base = %d\nuid_count = 8\nrootfs = "/tmp"\n'):format(UID_BASE) end,
    }))
    -- no refill under way: the next one starts from the claim below
    assert.truthy(S.wait_for(function() return not walls.refilling end, 120000), "a spare is still being built")
    local real_policy, real_log = walls.snap_fn, walls.log
    local failed = {}
    walls.log = function(level, event, fields)
      if event == "walls.spare_failed" then
        failed[#failed + 1] = { level = level, fields = fields }
        -- the retry is built on the real root file system (a loaded host may add a failure of
        -- its own first — bwrap's RTM_NEWADDR — which is retried on the bad one)
        if tostring(fields.error):find("bwrap: execvp sh", 1, true) then walls.snap_fn = real_policy end
      end
      return real_log(level, event, fields)
    end
    local taken = walls:claim(scratch .. "/w-spare-" .. core.crypto.hex(core.crypto.random_bytes(4)), "spec")
    -- the replacement's build runs on the next loop turn and reads the policy then: a root file
    -- system with no shell, where bwrap makes the namespaces and cannot start the init
    walls.snap_fn = function() return bad end
    local ok = S.wait_for(function() return #failed > 0 end, 120000)
    local rebuilt = ok and S.wait_for(function()
      return not walls.refilling and #walls.spares == 1 and walls.spares[1].state == "ready"
    end, 120000)
    walls.snap_fn, walls.log = real_policy, real_log
    taken:stop()
    core.fs.remove_tree(taken.dir)
    assert.truthy(ok, "no walls.spare_failed line")
    local ours = failed[#failed] -- the bad root's failure (a host's own may come before it)
    assert.equal("warn", ours.level)
    if #failed == 1 then assert.equal(1, ours.fields.retry) end -- (a second failure is not retried)
    assert.truthy(tostring(ours.fields.error):find("bwrap: execvp sh", 1, true), tostring(ours.fields.error))
    local said = {}
    for _, f in ipairs(failed) do said[#said + 1] = ("retry=%s: %s"):format(tostring(f.fields.retry), tostring(f.fields.error)) end
    assert.truthy(rebuilt, "no spare after the retry: " .. table.concat(said, "\n"))
    assert.equal(real_policy(), walls.spares[1].snap)
    -- the failed spare's workspace is gone: the only spare directory left is the new one's
    local left = {}
    for _, entry in ipairs(core.fs.list(scratch) or {}) do
      local name = type(entry) == "table" and entry.name or entry
      if name:match("^%.spare%-") then left[#left + 1] = scratch .. "/" .. name end
    end
    assert.same({ walls.spares[1].dir }, left)
  end)

  -- The thread that was waiting for a spare whose build failed builds its own instance: the
  -- spare's retry must not be built beside it (on a host's disk with room for one workspace the
  -- spare, nobody's, could take the thread's room), so it waits for that start to settle.
  walled_it("a failed spare that a thread was waiting for is built again only after that thread's own start", function()
    local bad = assert(policies.load(policies.dir{
      isolation = function(src) return src .. ('\nuid_base = %d\nuid_count = 8\nrootfs = "/tmp"\n'):format(UID_BASE) end,
    }))
    assert.truthy(S.wait_for(function() return not walls.refilling end, 120000), "a spare is still being built")
    local real_policy, real_log = walls.snap_fn, walls.log
    local failed = 0
    walls.log = function(level, event, fields)
      if event == "walls.spare_failed" then failed = failed + 1 end
      return real_log(level, event, fields)
    end
    local taken = walls:claim(scratch .. "/w-first-" .. core.crypto.hex(core.crypto.random_bytes(4)), "spec")
    walls.snap_fn = function() return bad end -- the replacement's build (next loop turn) fails
    local t0 = core.now_ms()
    while not walls.building and core.now_ms() - t0 < 20000 do core.sleep(0) end
    local building = walls.building
    assert.truthy(building, "no spare is being built")
    -- a new thread waits for it, and gets an instance of its own when it fails
    local own = walls:claim(scratch .. "/w-own-" .. core.crypto.hex(core.crypto.random_bytes(4)), "spec")
    walls.snap_fn = real_policy
    assert.are_not.equal(building, own)
    assert.is_true(failed >= 1, "no walls.spare_failed line")
    -- its own start has not begun: no spare is built meanwhile
    local early = S.wait_for(function() return walls.building ~= nil or #walls.spares > 0 end, 3000)
    -- it starts (on the failing policy it took at its claim: it fails too, and that settles it)
    local own_ok = own:start()
    local rebuilt = S.wait_for(function()
      return not walls.refilling and #walls.spares == 1 and walls.spares[1].state == "ready"
    end, 120000)
    walls.log = real_log
    own:stop(); taken:stop()
    core.fs.remove_tree(own.dir); core.fs.remove_tree(taken.dir)
    assert.is_false(early, "the spare was built again beside the waiting thread's own start")
    assert.is_nil(own_ok)
    assert.truthy(rebuilt, "no spare after the thread's start settled")
  end)

  -- bwrap says now and then, under a burst of starts, "loopback: Failed RTM_NEWADDR: No child
  -- processes" and exits. Here the real bwrap behind a wrapper first in the helper's PATH that
  -- says exactly that and exits 1 once (then execs the real one): a thread's start and a spare's
  -- build are each retried once, and logged with those words.
  walled_it("bwrap's 'Failed RTM_NEWADDR: No child processes' is retried once for a thread's start and for a spare's build, logged", function()
    local runner = require("switchboard.sandboxd.runner")
    local wrap = bwrap_failing_once(0)
    local nospare = assert(policies.load(policies.dir{
      isolation = function(src) return src .. ("\nuid_base = %d\nuid_count = 8\nspare_instances = 0\n"):format(UID_BASE) end,
    }))
    assert.truthy(S.wait_for(function() return not walls.refilling end, 120000), "a spare is still being built")
    local real_policy, real_log, real_path = walls.snap_fn, walls.log, walls.path
    local logged = {}
    local function log(level, event, fields)
      if event == "sandboxd.instance_failed" or event == "walls.spare_failed" then
        logged[#logged + 1] = { event = event, fields = fields }
      end
      return real_log(level, event, fields)
    end
    walls.log, walls.path = log, wrap .. ":" .. real_path
    -- The retry itself can meet the host's own transient (the real bwrap's RTM_NEWADDR, as any
    -- start can: a spare's retry did beside stress-ng --cpu 4 on the ASan build): that try
    -- says nothing about the retry and is made again (at most three times), as the retried-start
    -- case does; any other failure of the retry fails the case.
    local function retry_met_transient(from, event)
      for i = from + 1, #logged do
        local l = logged[i]
        if l.event == event and l.fields.attempt == 2
          and tostring(l.fields.error):find("RTM_NEWADDR", 1, true) then return true end
      end
      return false
    end
    -- a thread's own start (no spare fits another policy snapshot, and none is built)
    walls.snap_fn = function() return nospare end
    local res, err
    for n = 1, 3 do
      local from = #logged
      os.execute("rmdir '" .. wrap .. "/failed' 2>/dev/null") -- the wrapper fails once each try
      local r = runner.new(scratch, "rtm-newaddr-" .. n, { walls = walls, log = log })
      res, err = r:exec{ command = "echo ran", deadline_ms = 60000 }
      r:stop()
      if res or not retry_met_transient(from, "sandboxd.instance_failed") then break end
    end
    -- a spare's build: the wrapper fails once more
    walls.snap_fn = real_policy
    local function spare_ready()
      return not walls.refilling and #walls.spares == 1 and walls.spares[1].state == "ready"
    end
    local rebuilt
    for _ = 1, 3 do
      local from = #logged
      os.execute("rmdir '" .. wrap .. "/failed' 2>/dev/null")
      local taken = walls:claim(scratch .. "/w-rtm-" .. core.crypto.hex(core.crypto.random_bytes(4)), "spec")
      rebuilt = S.wait_for(function()
        return spare_ready() or retry_met_transient(from, "walls.spare_failed")
      end, 120000) and spare_ready()
      taken:stop(); core.fs.remove_tree(taken.dir)
      if rebuilt or not retry_met_transient(from, "walls.spare_failed") then break end
      S.wait_for(function() return not walls.refilling end, 120000)
    end
    walls.log, walls.path = real_log, real_path
    S.rm(wrap)
    assert.truthy(res, "the thread's retry did not run the command: " .. tostring(err and err.message))
    assert.equal("ran\n", res.stdout)
    -- the wrapper's two failures, each logged with bwrap's words and retried; a loaded host may
    -- log failures of its own beside them (they are listed when an assert fails)
    local ours, all = {}, {}
    for _, l in ipairs(logged) do
      local said = tostring(l.fields.error)
      all[#all + 1] = ("%s attempt=%s retry=%s: %s"):format(l.event, tostring(l.fields.attempt),
        tostring(l.fields.retry), said)
      if said:find("bwrap: loopback: Failed RTM_NEWADDR: No child processes", 1, true) and l.fields.attempt == 1 then
        ours[l.event] = l
      end
    end
    local seen = table.concat(all, "\n")
    assert.truthy(ours["sandboxd.instance_failed"], "the thread's start failure was not logged: " .. seen)
    assert.truthy(ours["walls.spare_failed"], "the spare's build failure was not logged: " .. seen)
    assert.equal(1, ours["sandboxd.instance_failed"].fields.retry, seen)
    assert.equal(1, ours["walls.spare_failed"].fields.retry, seen)
    assert.truthy(rebuilt, "no spare after the retry: " .. seen)
  end)

  walled_it("instance starts wait their turn at the gate, counted; a thread that sleeps while waiting leaves it", function()
    local runner = require("switchboard.sandboxd.runner")
    local walled = require("switchboard.shell.walled")
    local one = assert(policies.load(policies.dir{
      isolation = function(src) return src .. ('\nuid_base = %d\nuid_count = 8\nstarts_at_once = 1\nspare_instances = 0\n'):format(UID_BASE) end,
    }))
    local real_policy = walls.snap_fn
    walls.snap_fn = function() return one end
    local runners, results, finished = {}, {}, 0
    for i = 1, 4 do
      runners[i] = runner.new(scratch, "gate-" .. i, { walls = walls })
      core.go(function()
        results[i] = { runners[i]:exec{ command = "echo " .. i, deadline_ms = 60000 } }
        finished = finished + 1
      end)
    end
    -- the first starts, the three others wait: the gauge's figures while they do
    local most_waiting = 0
    while finished == 0 do
      most_waiting = math.max(most_waiting, (walled.start_queue()))
      if most_waiting >= 2 and results[3] == nil then break end
      core.sleep(1)
    end
    assert.truthy(most_waiting >= 2, "no start waited at a gate of one: " .. most_waiting)
    -- the last thread goes to sleep while it waits: it leaves the queue, the others go on
    runners[4]:stop()
    local deadline = core.now_ms() + 120000
    while finished < 4 and core.now_ms() < deadline do core.sleep(20) end
    walls.snap_fn = real_policy
    assert.equal(4, finished, "a thread's command did not end")
    for i = 1, 3 do
      assert.truthy(results[i][1], "thread " .. i .. ": " .. tostring(results[i][2] and results[i][2].message))
      assert.equal(i .. "\n", results[i][1].stdout)
    end
    assert.is_nil(results[4][1])
    local waiting, running = walled.start_queue()
    assert.equal(0, waiting)
    assert.equal(0, running)
    for i = 1, 3 do runners[i]:stop() end
  end)

  walled_it("the instance ending under a command: killed, said in words; a gone spawner is a spawn failure", function()
    local inst = start_instance()
    local proc = assert(core.spawn(args(inst, "exec sleep 1000")))
    core.go(function() core.sleep(200); inst:stop() end)
    local r = proc:wait()
    assert.equal(9, r.signal)
    assert.truthy(r.stderr:find("the sandbox instance ended while the command ran", 1, true), r.stderr)
    local p, err = core.spawn{ argv = { "/bin/true" }, walls = inst.socket }
    assert.is_nil(p)
    assert.equal("spawn", err.kind)
    assert.truthy(err.message:find("does not answer", 1, true), err.message)
  end)
end)

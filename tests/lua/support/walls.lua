-- Whether this kernel gives the walls, answered by one real sandboxd start, and a `describe`
-- that runs a block only where it does. The specs of the walls share it:
--
--   local describe_walls = require("support.walls").probe(policy_dir(),
--     { describe = describe, it = it, pending = pending })
--
-- (busted's describe, it and pending live in the spec's environment, not in a module's.)
-- A kernel lacking a feature makes the blocks pending, with sandboxd's own words for what is
-- missing; sandboxd failing for any other reason is a failure, never a skip.
local core = require("switchboard.core")
local S = require("support.sandbox")
local assert = require("luassert") -- busted's assert lives in the spec's environment, not here

local M = {}

-- Reasons the walls are missing that are this checkout's, not the kernel's: the build's own
-- helper binary, or a package scripts/bootstrap installs. A spec fails on these, never skips.
local OURS = { "switchboard-walls is not next to", "bwrap is not installed", "mkfs.ext4 is not installed",
  "are taken by another walled server" } -- a spec's uid base that met another's: the spec's bug

-- A spec's own uid base for its walled hosts, a multiple of `align`. Above the range servers on
-- the shipped policy take (uid_base 1,200,000, 16 blocks of 65,536: the other specs' sandboxd
-- run with it) and spread over two billion uids, so specs running at once do not meet. (A
-- random base inside the shipped range met a default server's block beside it: the host was
-- refused, "uids … are taken by another walled server", and the whole file went pending.)
function M.private_uid_base(align)
  local b = core.crypto.random_bytes(4)
  local n = ((b:byte(1) << 24) | (b:byte(2) << 16) | (b:byte(3) << 8) | b:byte(4)) % 2000000000
  return 3000000 + n - n % (align or 1)
end

-- Whether `why` (instance.host's error or sandboxd's words) names something the kernel lacks.
function M.kernel_lacks(why)
  if core.is_error(why) then why = why.message end
  if type(why) ~= "string" or why == "" then return false end
  for _, ours in ipairs(OURS) do
    if why:find(ours, 1, true) then return false end
  end
  return true
end

function M.probe(policies, bdd)
  local available, why, broken
  local ok, err = pcall(core.run, function()
    local h = S.start_sandboxd{ policies = policies, may_fail = true }
    if h.port then
      available = h.log():find('walls="cgroup v', 1, true) ~= nil
      h:stop("KILL"); h:wait()
    else
      h:wait()
      why = h.log():match("cannot build the walls[^\n]*")
      if not M.kernel_lacks(why) then broken = "sandboxd did not start: " .. h.log() end
    end
  end)
  if not ok then broken = tostring(err) end
  S.cleanup_servers()
  local describe_walls = available and bdd.describe or function(name)
    bdd.describe(name, function()
      if broken then
        bdd.it("starts", function() error(broken, 0) end)
      else
        bdd.pending("this kernel cannot give the walls: " .. tostring(why))
      end
    end)
  end
  return describe_walls, available
end

-- The attacks a hostile command tries from inside an instance, against any walled sandboxd: the
-- host's (tests/e2e/walls_spec.lua) or one in a container (deploy/tests/image_walls_spec.lua).
-- `exec(thread, command, extra)` runs a command over /exec and returns the decoded answer;
-- ctx: token (the server's bearer), pid (the server's pid as the instance would aim at it),
-- root (the server's --root as its own mount namespace names it), healthz() → status.
M.attacks = {}

function M.attacks.server(exec, ctx)
  local r = exec("A", table.concat({
    "echo ppid=$PPID",
    "cat /proc/$PPID/environ 2>&1 | tr '\\0' '\\n'",
    "for p in /proc/[0-9]*; do cat $p/environ $p/cmdline 2>/dev/null | tr '\\0' '\\n'; done",
    ("kill -TERM %d 2>&1; echo kill=$?"):format(ctx.pid),
    ("cat /proc/%d/mem 2>&1 | head -c 100; echo"):format(ctx.pid),
    "ls /proc | grep -c '^[0-9]'",
    "id -u",
  }, "\n"))
  assert.equal(0, r.exitCode, r.stderr)
  assert.is_nil((r.stdout .. r.stderr):find(ctx.token, 1, true))
  -- its parent is the instance's spawner, outside the PID namespace (and not dumpable):
  -- $PPID is 0, so neither the server nor the spawner is there to read or signal
  local ppid = tonumber(r.stdout:match("ppid=(%d+)\n"))
  assert.equal(0, ppid, r.stdout)
  assert.is_nil(r.stdout:find("--socket", 1, true), r.stdout)  -- nor its argv (host paths)
  assert.truthy(r.stdout:find("kill=1", 1, true), r.stdout)
  local nprocs = tonumber(r.stdout:match("\n(%d+)\n1000\n$"))
  assert.is_true(nprocs ~= nil and nprocs < 12, r.stdout)  -- init, this shell and its pipeline
  assert.equal(200, ctx.healthz()) -- the server is still there
end

function M.attacks.neighbours(exec, ctx)
  local marker = "secret-of-A-" .. core.crypto.hex(core.crypto.random_bytes(6))
  assert.equal(0, exec("A", "echo hush > " .. marker).exitCode)
  local r = exec("B", table.concat({
    "ls -a /workspace/.. | tr '\\n' ' '; echo",
    ("find / -xdev -name '%s*' 2>/dev/null | head -1"):format(marker),
    ("ls -A '%s' 2>/dev/null | grep -q . && echo ROOT-VISIBLE"):format(ctx.root),
    "cat /etc/shadow 2>/dev/null && echo SHADOW-READ",
    "ls /etc/ssh 2>/dev/null | head -1",
    "git init -q repo && cd repo && echo x > f && git add f && git -c user.email=a@b -c user.name=a commit -qm one && git log --format=%s",
    "head -c 4 /usr/bin/env | od -c | head -1 | grep -q E && echo usr-ok",
    "echo mine > /workspace/own && cat /workspace/own",
    "touch /usr/pwned 2>/dev/null || echo usr-readonly",
  }, "\n"))
  assert.equal(0, r.exitCode, r.stderr)
  assert.is_nil(r.stdout:find(marker, 1, true), r.stdout)
  assert.is_nil(r.stdout:find("ROOT-VISIBLE", 1, true))
  assert.is_nil(r.stdout:find("SHADOW-READ", 1, true))
  for _, want in ipairs({ "one\n", "usr-ok\n", "mine\n", "usr-readonly\n" }) do
    assert.truthy(r.stdout:find(want, 1, true), want .. " in " .. r.stdout)
  end
end

function M.attacks.gh_token(exec)
  local secret = "ghs_" .. core.crypto.hex(core.crypto.random_bytes(12))
  local done = false
  -- A runs until its server stops (a fixed length raced B's instance build under load); B
  -- scans once A's command is seen running on the host (its pid namespace shows every instance)
  local nap = ("sleep 600.%d"):format(core.crypto.random_bytes(1):byte() + 100)
  core.go(function()
    exec("A", nap, { env = { GH_TOKEN = secret } })
    done = true
  end)
  local t0 = core.now_ms()
  while os.execute("env -u LD_PRELOAD pgrep -f '^" .. nap .. "$' >/dev/null") ~= true do
    assert.truthy(core.now_ms() - t0 < 60000, "the first command never started")
    core.sleep(50)
  end
  local r = exec("B", "for p in /proc/[0-9]*; do cat $p/environ 2>/dev/null | tr '\\0' '\\n'; done; echo scanned")
  assert.truthy(r.stdout:find("scanned", 1, true))
  assert.is_nil(r.stdout:find(secret, 1, true))
  assert.is_false(done, "the first command should still have been running")
end

-- ctx.pids_max: the instance's process limit (policies/isolation.lua pids_max).
function M.attacks.fork_bomb(exec, ctx)
  local bomb
  core.go(function()
    -- a fork loop that does not retry (bash's own fork retries until children exit)
    bomb = exec("bomb", ("python3 -c 'import os, time\nn = 0\ntry:\n  while n < %d:\n"
      .. "    if os.fork() == 0:\n      time.sleep(20); os._exit(0)\n    n += 1\nexcept OSError as e:\n"
      .. "  print(\"stopped\", n, e.errno)'"):format(ctx.pids_max + 100), { timeoutMs = 120000 }) -- a loaded host forks slowly
  end)
  assert.equal("fine\n", exec("other", "echo fine").stdout)
  local t0 = core.now_ms()
  while not bomb and core.now_ms() - t0 < 150000 do core.sleep(20) end
  assert.truthy(bomb, "the fork bomb's command never answered")
  local n = tonumber(bomb.stdout:match("stopped (%d+) 11"))
  assert.is_true(n ~= nil and n < ctx.pids_max, ("exit %s: %s%s"):format(tostring(bomb.exitCode), bomb.stdout, bomb.stderr))
  assert.truthy(bomb.stderr:find(("this sandbox's process limit (%d processes) was reached, so fork failed — policies/isolation.lua pids_max")
    :format(ctx.pids_max), 1, true), bomb.stderr)
  assert.equal(200, ctx.healthz())
end

return M

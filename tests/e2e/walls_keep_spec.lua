-- Black-box: a thread's workspace outlives its instance (issue 37 items 1, 2, 5). Before, an
-- instance idle past sandbox.sleep_after was killed AND its workspace deleted, and so was every
-- workspace on shutdown: a file, a 300-file node_modules and a git commit written before a 3 s
-- sleep were all gone after it. Now sleep and shutdown end the instance's processes and keep its
-- workspace (the ext4 image, or the directory in measured mode); the thread's next request
-- remounts it in a fresh instance and is told so; slept workspaces live under a budget
-- (slept_max_bytes, oldest first) whose evicted thread is told "workspace expired (policy …)";
-- a slept image is root's alone (0600); `switchboard sandboxd --list-workspaces` lists them and
-- `--remove-workspace` removes one.
local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")
local policies = require("support.policies")
local workspace = require("switchboard.shell.workspace")

local UID_BASE = require("support.walls").private_uid_base(64)

-- sleep_after 2 s (S.FAST): the default 5 min would make every sleep here a five-minute wait.
-- workspace_max_bytes 64 MiB: small images, so that two slept ones pass slept_max_bytes 100 MiB.
local function policy_dir(extra_isolation)
  return policies.dir{
    timeouts = function(src) return src .. "\n" .. S.FAST .. "\n" end,
    isolation = function(src)
      return src .. ("\nuid_base = %d\nuid_count = 64\nworkspace_max_bytes = 64 * MiB\ndisk_reserve_bytes = 0\n%s\n")
        :format(UID_BASE, extra_isolation or "")
    end,
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

local function ok(h, thread, command)
  local r = exec(h, thread, command)
  assert.equal(0, r.exitCode, r.stderr)
  return r
end

-- The state the thread leaves: a file, a node_modules-like tree of 300 files, a git commit, an
-- untracked file, and a background process (which must not survive).
local WRITE = [[
set -e
echo kept > note.txt
mkdir -p node_modules && for i in $(seq 300); do mkdir -p node_modules/p$i && echo "module $i" > node_modules/p$i/index.js; done
git init -q repo && cd repo && git config user.email a@b && git config user.name t
echo one > tracked && git add tracked && git commit -qm first && echo loose > untracked.txt
cd .. && (setsid sleep 1000 >/dev/null 2>&1 &) && echo written
]]
local CHECK = [[
cat note.txt; ls node_modules | wc -l; cat node_modules/p300/index.js
git -C repo log --format=%s; git -C repo status --porcelain; pgrep -x sleep >/dev/null && echo still-running || echo no-background
]]
local EXPECTED = "kept\n300\nmodule 300\nfirst\n?? untracked.txt\nno-background\n"

local function slept(h, n)
  return S.wait_for(function()
    local _, count = h.log():gsub("sandboxd%.instance_slept", "")
    return count >= n
  end, 60000)
end

describe_walls("a slept thread's workspace", function()
  it("is kept through an idle sleep and a restart of sandboxd; the thread is told so; the image is root's alone", function()
    core.run(function()
      local pol = policy_dir()
      local h = S.start_sandboxd{ policies = pol }
      local root = core.fs.realpath(h.root)
      assert.equal("written\n", ok(h, "keep", WRITE).stdout)
      assert.truthy(slept(h, 1), h.log())
      -- asleep: the image stays on the host, root's, readable by no other uid
      local dir = workspace.path(root, "keep")
      local function sh(cmd)
        local p = io.popen(cmd)
        local out = p:read("l")
        p:close()
        return out
      end
      assert.equal("0 600", sh("stat -c '%u %a' " .. dir .. "/.workspace.img"))
      -- its free blocks given back to the host's disk: it holds about its files, not 64 MiB
      local held = function() return tonumber(sh("du -B1 " .. dir .. "/.workspace.img"):match("^(%d+)")) end
      assert.is_true(held() < 16 * 1024 * 1024, "a slept image holds " .. held())
      local r = ok(h, "keep", CHECK)
      assert.equal(EXPECTED, r.stdout)
      assert.equal("kept", r.workspace and r.workspace.state, cjson.encode(r))
      assert.truthy(r.workspace.text:find("background processes ended at sleep", 1, true), r.workspace.text)
      -- awake, the image is reserved whole again (docs/isolation.md "The host's disk")
      assert.is_true(held() >= 64 * 1024 * 1024, "an awake image holds " .. held())
      -- told once: the next command carries no note
      assert.is_nil(exec(h, "keep", "true").workspace)
      -- another thread's instance never sees the host's path of it
      r = exec(h, "other", "ls " .. dir .. " 2>&1; cat note.txt 2>&1")
      assert.is_nil(r.stdout:find("kept", 1, true), r.stdout)

      -- a restart: TERM, then a new server on the same --root
      h:stop(); h:wait()
      assert.is_true(core.fs.exists(dir .. "/.workspace.img"))
      local h2 = S.start_sandboxd{ policies = pol, root = h.root }
      assert.truthy(h2.log():find("sandboxd.workspaces_kept", 1, true), h2.log())
      r = ok(h2, "keep", CHECK)
      assert.equal(EXPECTED, r.stdout)
      assert.equal("kept", r.workspace and r.workspace.state)
      h2:stop(); h2:wait()
    end)
  end)

  it("is kept in measured mode too (the directory)", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = policy_dir('workspace_size = "measured"') }
      assert.equal("written\n", ok(h, "m", WRITE).stdout)
      assert.truthy(slept(h, 1), h.log())
      local r = ok(h, "m", CHECK)
      assert.equal(EXPECTED, r.stdout)
      assert.equal("kept", r.workspace and r.workspace.state)
      h:stop(); h:wait()
    end)
  end)

  it("lives under slept_max_bytes: the oldest is evicted first and its thread told why", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = policy_dir("slept_max_bytes = 64 * MiB") }
      -- 40 MiB each that no file system compresses: two slept ones hold more than 64 MiB
      ok(h, "first", "echo one > f && head -c 40M /dev/urandom > big")
      assert.truthy(slept(h, 1), h.log())
      ok(h, "second", "echo two > f && head -c 40M /dev/urandom > big")
      assert.truthy(slept(h, 2), h.log())
      assert.truthy(S.wait_for(function() return h.log():find("sandboxd.workspace_evicted", 1, true) end, 60000), h.log())
      local r = exec(h, "first", "cat f 2>&1; ls -A | grep -v lost+found | wc -l")
      assert.equal("expired", r.workspace and r.workspace.state, cjson.encode(r))
      assert.truthy(r.workspace.text:find("workspace expired (policy: slept workspaces past 64 MiB, "
        .. "policies/isolation.lua slept_max_bytes", 1, true), r.workspace.text)
      assert.truthy(r.stdout:find("No such file", 1, true), r.stdout)
      r = ok(h, "second", "cat f")
      assert.equal("two\n", r.stdout)
      assert.equal("kept", r.workspace and r.workspace.state)
      h:stop(); h:wait()
    end)
  end)

  it("are listed and removed by an operator (--list-workspaces, --remove-workspace)", function()
    core.run(function()
      local pol = policy_dir()
      local h = S.start_sandboxd{ policies = pol }
      ok(h, "listed", "echo x > f")
      assert.truthy(slept(h, 1), h.log())
      h:stop(); h:wait()
      local name = workspace.dir_name("listed")
      local function cli(...)
        local argv = { S.BIN, "--policies", pol, "sandboxd", "--root", h.root, ... }
        local p = assert(core.spawn{ argv = argv, env = { PATH = os.getenv("PATH") } })
        return p:wait()
      end
      local res = cli("--list-workspaces")
      assert.equal(0, res.exit, res.stderr)
      assert.truthy(res.stdout:find(name, 1, true), res.stdout)
      res = cli("--remove-workspace", name)
      assert.equal(0, res.exit, res.stderr)
      assert.is_false(core.fs.exists(workspace.path(h.root, "listed")))
      res = cli("--list-workspaces")
      assert.is_nil(res.stdout:find(name, 1, true), res.stdout)
      local h2 = S.start_sandboxd{ policies = pol, root = h.root }
      local r = exec(h2, "listed", "cat f 2>&1")
      assert.equal("expired", r.workspace and r.workspace.state)
      assert.truthy(r.workspace.text:find("removed by an operator", 1, true), r.workspace.text)
      h2:stop(); h2:wait()
    end)
  end)
end)

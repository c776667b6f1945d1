-- The suite leaves nothing behind in its TMPDIR (docs/testing.md "Temporary files"): a spec that
-- makes scratch through every support helper and leaves a walled sandboxd running (its root
-- holding a thread's workspace image, mounted in the instance's namespace) is run by a busted
-- of its own with a TMPDIR of its own, which is empty once that busted has ended; and the
-- removal refuses a directory with a mount point under it.
local core = require("switchboard.core")
local tmp = require("support.tmp")
local S = require("support.sandbox")

local read, write = S.read, require("support.policies").write

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- Every entry under dir, one per line ("" when empty).
local function listing(dir)
  local p = assert(io.popen("cd " .. q(dir) .. " && find . -mindepth 1 | sort"))
  local s = p:read("a")
  p:close()
  return s
end

-- The leaking spec: scratch through tmp.dir, tmp.name, files.tmpdir, policies.dir, S.tmpdir (a
-- sandboxd's --root), and a walled server with a thread's workspace, never stopped or cleaned.
local LEAKER = [=[
local core = require("switchboard.core")
local tmp = require("support.tmp")
local S = require("support.sandbox")
local out = assert(os.getenv("SB_HYGIENE_OUT"))
describe("a spec that cleans nothing", function()
  it("makes scratch everywhere and leaves its walled server running", function()
    local f = assert(io.open(tmp.name("file"), "w")); f:write("x"); f:close()
    require("support.files").tmpdir()
    require("support.policies").dir()
    tmp.dir("kept")
    local policies = S.walled_policy_dir(require("support.walls").private_uid_base(64))
    local iso = assert(io.open(policies .. "/isolation.lua", "a"))
    iso:write("\nworkspace_max_bytes = 16 * MiB\n")
    iso:close()
    core.run(function()
      local h = S.start_sandboxd{ policies = policies }
      local status, _, body = S.call(h.url, "/exec", { thread = "leak", body = { command = "echo hi > kept.txt" } })
      assert(status == 200, tostring(status) .. " " .. tostring(body))
      local f2 = assert(io.open(out, "w"))
      f2:write(("pid=%d\nroot=%s\nscratch=%s\nlog=%s\n"):format(h.pid, h.root, tmp.root(),
        h.log():find('walls="cgroup v', 1, true) and "walled" or "unwalled"))
      f2:close()
    end)
  end)
end)
]=]

-- The product's own names for scratch honour TMPDIR (docs/testing.md "Temporary files"): each
-- below is run with TMPDIR pointing into a spec's scratch and seen there, never in /tmp.
local function bin_env(extra)
  -- no HOME, no XDG_STATE_HOME, no SWITCHBOARD_STATE_DIR: the state directory's last fallback
  local env = { PATH = os.getenv("PATH"), LANG = "C.UTF-8", ASAN_OPTIONS = os.getenv("ASAN_OPTIONS"),
    UBSAN_OPTIONS = os.getenv("UBSAN_OPTIONS"), SWITCHBOARD_LUA_DIR = os.getenv("SWITCHBOARD_LUA_DIR") }
  for k, v in pairs(extra) do env[k] = v end
  return env
end

local function exists(path) return core.fs.exists(path) end

describe("the product's scratch under TMPDIR", function()
  after_each(function() tmp.remove_all() end)

  it("the state directory without a HOME is $TMPDIR/switchboard-$USER, not /tmp's", function()
    local run_tmp = tmp.dir("state-tmp")
    -- a user name of this spec's own: /tmp/switchboard-<it> is nobody else's
    local user = "hygiene-" .. core.crypto.hex(core.crypto.random_bytes(6))
    local r
    core.run(function()
      r = assert(core.spawn{ argv = { require("support.bin").path, "exec", "--", "pwd" },
        env = bin_env{ TMPDIR = run_tmp, USER = user }, max_output = 1 << 20 }):wait()
    end)
    local leaked = exists("/tmp/switchboard-" .. user)
    if leaked then tmp.remove("/tmp/switchboard-" .. user) end -- ours (the name is this spec's)
    assert.equal(0, r.exit, (r.stdout or "") .. (r.stderr or ""))
    assert.is_false(leaked, "the state directory was made in /tmp: " .. (r.stdout or ""))
    local state = run_tmp .. "/switchboard-" .. user
    assert.equal(state .. "/workspaces/", (r.stdout or ""):sub(1, #state + 12), r.stdout)
  end)

  it("doctor's walls proof makes its scratch under $TMPDIR and removes it", function()
    local run_tmp = tmp.dir("doctor-tmp")
    local not_a_dir = run_tmp .. "/file"
    write(not_a_dir, "x")
    local function doctor(tmpdir)
      local r
      core.run(function()
        r = assert(core.spawn{ argv = { require("support.bin").path, "doctor" },
          env = bin_env{ TMPDIR = tmpdir, HOME = os.getenv("HOME"), SWITCHBOARD_CONFIG_DIR = run_tmp .. "/no-install" },
          max_output = 1 << 20 }):wait()
      end)
      return (r.stdout or "") .. (r.stderr or "")
    end
    -- a TMPDIR that cannot hold a directory: the proof's scratch is named under it
    local out = doctor(not_a_dir)
    assert.truthy(out:find("FAIL  walls     cannot make a scratch directory " .. not_a_dir .. "/switchboard-doctor-", 1, true), out)
    assert.truthy(out:find("fix: make " .. not_a_dir .. " writable", 1, true), out)
    -- a usable one: the proof runs there (this host walls, as the suite's walls specs need) and
    -- leaves nothing behind
    assert(os.remove(not_a_dir))
    out = doctor(run_tmp)
    assert.truthy(out:find("ok    walls ", 1, true), out)
    assert.equal("", listing(run_tmp), out)
  end)

  it("the agent's toolchain probe (the run's facts) leaves nothing in /tmp: no JVM perf data", function()
    if not os.execute("command -v java >/dev/null 2>&1") then return pending("no java on this host") end
    local snap = require("support.policies").shipped()
    local script = require("switchboard.agent.facts").script(snap, ".scratch")
    -- the probe as the local backend runs it, over a /tmp of its own (a tmpfs in a mount
    -- namespace the spec makes: the host's /tmp is shared with other runs), in a workspace
    -- there; then what else it left in that /tmp
    local shell = ("mount -t tmpfs none /tmp && mkdir /tmp/ws && cd /tmp/ws && { %s\n} >/dev/null 2>&1; "
      .. "grep -qE '^@@tool (openjdk|java) version' .scratch/.workspace-facts-* && echo java-probed; ls -A /tmp")
      :format(script)
    local p = assert(io.popen("unshare -m --propagation private sh -c " .. q(shell) .. " 2>&1"))
    local text = p:read("a")
    p:close()
    if text:find("unshare: ", 1, true) then return pending("no mount namespace here: " .. text) end
    -- the probe ran java, and left only the workspace
    assert.equal("java-probed\nws\n", text)
  end)

  it("the e2b wrapper keeps its marks in $TMPDIR, and a stop by the mark finds them there", function()
    local envd = require("switchboard.exec.e2b_envd")
    local run_tmp = tmp.dir("e2b-tmp")
    local mark = core.crypto.hex(core.crypto.random_bytes(8))
    local pid_file = run_tmp .. "/.switchboard-" .. mark .. ".pid"
    local env = { PATH = os.getenv("PATH"), TMPDIR = run_tmp }
    local r, stopped
    core.run(function()
      -- a command that looks for its wrapper's mark where the wrapper should keep it
      local looks = ('test -s "$TMPDIR/.switchboard-%s.pid" && ! test -e /tmp/.switchboard-%s.pid && echo marked-in-tmpdir')
        :format(mark, mark)
      r = assert(core.spawn{ argv = { "/bin/bash", "-c", envd.WRAPPER, "switchboard", "1", "60", looks, mark },
        env = env }):wait()
      -- a command stopped by its mark (M.STOP_MARKED, as before envd named its pid)
      local long = assert(core.spawn{ argv = { "/bin/bash", "-c", envd.WRAPPER, "switchboard", "1", "600", "sleep 600", mark },
        env = env, deadline_ms = 120000 })
      local marked = S.wait_for(function() return exists(pid_file) end, 60000)
      local stop = assert(core.spawn{ argv = { "/bin/bash", "-c", envd.STOP_MARKED, "switchboard", mark }, env = env }):wait()
      stopped = { marked = marked, stop = stop, long = long:wait() }
    end)
    assert.equal(0, r.exit, (r.stdout or "") .. (r.stderr or ""))
    assert.equal("marked-in-tmpdir\n", r.stdout)
    assert.is_true(stopped.marked, "no " .. pid_file .. " while the wrapper ran")
    assert.equal(0, stopped.stop.exit, stopped.stop.stderr)
    assert.equal(143, stopped.long.exit) -- the wrapper's trap: the stop, not its 600 s limit
    assert.equal("", listing(run_tmp))
  end)
end)

describe("the suite's temporary files", function()
  after_each(function() tmp.remove_all() end)

  it("a spec's scratch, its server's root included, is gone from its TMPDIR when its busted ends", function()
    local here = tmp.dir("hygiene")
    local run_tmp = tmp.dir("run-tmp")
    write(here .. "/leaker_spec.lua", LEAKER)
    local out = here .. "/out"
    local r
    core.run(function()
      local env = S.base_env{ TMPDIR = run_tmp, SB_HYGIENE_OUT = out,
        SB_BUILD_DIR = os.getenv("SB_BUILD_DIR"), SWITCHBOARD_BIN = os.getenv("SWITCHBOARD_BIN"),
        LD_PRELOAD = require("support.preload").ld_preload, ASAN_OPTIONS = os.getenv("ASAN_OPTIONS") }
      -- a walled server's start and a thread's first command on a loaded machine: the exit ends it
      r = assert(core.spawn{ argv = { "busted", "--output=plainTerminal", here .. "/leaker_spec.lua" },
        env = env, max_output = 4 << 20 }):wait()
    end)
    local got = read(out) or ""
    io.stderr:write("[hygiene] ", got:gsub("\n", " "), "\n")
    assert.equal(0, r.exit, (r.stdout or "") .. (r.stderr or ""))
    -- its scratch was under the TMPDIR it was given, not /tmp's own names
    local scratch = assert(got:match("scratch=([^\n]+)"), got)
    assert.equal(run_tmp .. "/sb.", scratch:sub(1, #run_tmp + 4), got)
    assert.truthy(got:match("root=" .. run_tmp:gsub("%p", "%%%0") .. "/"), got)
    -- its server is gone (killed by the helper, then reaped by init once busted ended)
    -- (a zombie counts as gone: its parent may be a subreaper that has not reaped it yet)
    local pid = assert(tonumber(got:match("pid=(%d+)")), got)
    local function running()
      local stat = read("/proc/" .. pid .. "/stat")
      return stat ~= nil and stat:match("^%d+ %b() (%a)") ~= "Z"
    end
    local t0 = os.time()
    while running() and os.time() - t0 < 60 do os.execute("sleep 0.1") end
    assert.is_false(running(), "the left server " .. pid .. " still runs")
    assert.equal("", listing(run_tmp), "left in TMPDIR by the spec (" .. got .. ")")
  end)

  it("tmp.remove refuses a directory with a mount point under it, and leaves it whole", function()
    local dir = tmp.dir("mounted")
    assert(core.fs.mkdir_p(dir .. "/sub/held", tonumber("755", 8)))
    -- the mount lives in a mount namespace of the child's own: the host's mount table is not touched
    local script = ([[
mount -t tmpfs none %s/sub/held && echo kept > %s/sub/held/f && echo outside > %s/sub/g &&
lua5.4 -e 'package.path = "./tests/lua/?.lua;" .. package.path
  local tmp = require("support.tmp")
  local ok, why = tmp.remove(%q)
  print(tostring(ok) .. " " .. tostring(why))
  print(io.open(%q) and "kept" or "gone")
  print(io.open(%q) and "kept" or "gone")']]):format(q(dir), q(dir), q(dir), dir, dir .. "/sub/held/f", dir .. "/sub/g")
    local p = assert(io.popen("unshare -m --propagation private sh -c " .. q(script) .. " 2>&1"))
    local text = p:read("a")
    p:close()
    if text:find("unshare: ", 1, true) then return pending("no mount namespace here: " .. text) end
    assert.truthy(text:find("^false mount points under " .. dir:gsub("%p", "%%%0") .. ": " ..
      (dir .. "/sub/held"):gsub("%p", "%%%0")), text)
    assert.truthy(text:find("\nkept\nkept\n", 1, true), text)
    -- and without the mount, it removes
    assert.is_true((tmp.remove(dir)))
    assert.is_nil(io.open(dir .. "/sub/g"))
  end)
end)

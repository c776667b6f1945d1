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

-- The host's registry of walled servers' uid blocks (shell/uids.lua), in a registry directory
-- of this run's own: claim:roots() — asked at every instance start — reads the registry again
-- only when its directory changed (issue 43 item 4: no per-start work that grows with the
-- servers on the host), and a server that joins or leaves is seen by the next start. The work
-- is counted through the registry's own reads (core.fs.list, core.fs.read_file), never timed.
local core = require("switchboard.core")
local S = require("support.sandbox")
local uids = require("switchboard.shell.uids")

local function sh(cmd) assert(os.execute(cmd), "failed: " .. cmd) end

-- Calls of the registry's reads while fn runs (the functions uids.lua calls through core.fs).
local function reads_during(fn)
  local n = 0
  local list, read_file = core.fs.list, core.fs.read_file
  core.fs.list = function(...) n = n + 1; return list(...) end
  core.fs.read_file = function(...) n = n + 1; return read_file(...) end
  local ok, a = pcall(fn)
  core.fs.list, core.fs.read_file = list, read_file
  assert(ok, a)
  return n, a
end

local function has(list, x)
  for _, v in ipairs(list) do if v == x then return true end end
  return false
end

-- The registry's mtime set `s` seconds from now (negative: in the past), as a quiet registry's is.
local function mtime_in(dir, s) sh(("touch -m -d @%d '%s'"):format(os.time() + s, dir)) end

local function claim(dir, base, root)
  return assert(uids.claim{ dir = dir, base = base, count = 10, owner = { kind = "sandboxd", root = root } })
end

describe("the uid registry (shell/uids.lua)", function()
  it("roots() reads a settled registry once, not at every start; a server that joins or leaves is seen at the next start", function()
    core.run(function()
      local top = S.tmpdir()
      local dir = top .. "/walls"
      local a = claim(dir, 1000, "/srv/a")
      local b = claim(dir, 1010, "/srv/b")
      mtime_in(dir, -5)
      local first, roots = reads_during(function() return a:roots() end)
      assert.is_true(first > 0)
      assert.same({ "/srv/b" }, roots)
      local later = reads_during(function()
        for _ = 1, 20 do assert.same({ "/srv/b" }, a:roots()) end
      end)
      assert.equal(0, later) -- before: a listing and two reads per server, per start

      local c = claim(dir, 1020, "/srv/c") -- joins
      assert.is_true(has(a:roots(), "/srv/c"))
      mtime_in(dir, -5)
      assert.is_true(has(a:roots(), "/srv/c"))
      c:release() -- leaves
      roots = a:roots()
      assert.is_false(has(roots, "/srv/c"))
      assert.is_true(has(roots, "/srv/b"))
      b:release()
      assert.same({}, a:roots())
      a:release()
      S.rm(top)
    end)
  end)

  it("never trusts an mtime too fresh to have settled: each start reads the registry then", function()
    core.run(function()
      local top = S.tmpdir()
      local dir = top .. "/walls"
      local a = claim(dir, 1000, "/srv/a")
      local b = claim(dir, 1010, "/srv/b")
      -- a change in the same tick of the file system's clock leaves the mtime as it was: an
      -- mtime not yet a second old (here ahead of the clock) is re-read at every start
      mtime_in(dir, 30)
      for _ = 1, 3 do
        local n, roots = reads_during(function() return a:roots() end)
        assert.is_true(n > 0)
        assert.same({ "/srv/b" }, roots)
      end
      b:release()
      a:release()
      S.rm(top)
    end)
  end)

  it("a dead server's claim is removed at the next read of the registry, as before", function()
    core.run(function()
      local top = S.tmpdir()
      local dir = top .. "/walls"
      local a = claim(dir, 1000, "/srv/a")
      -- a claim of a process that is gone (its start time is not the one the claim names)
      local f = assert(io.open(dir .. "/999999-1.claim", "w"))
      f:write("pid=999999\nstarted=1\nbase=2000\ncount=10\nkind=sandboxd\nroot=/srv/dead\nlisten=?\n")
      f:close()
      assert.same({}, a:roots())
      assert.is_false(core.fs.exists(dir .. "/999999-1.claim"))
      a:release()
      S.rm(top)
    end)
  end)
end)

-- core.fs: the confined root (every escape refused, nothing created outside) and the
-- unconfined helpers (remove_tree never follows a symlink out).
package.cpath = (os.getenv("SB_BUILD_DIR") or "./build") .. "/lua/?.so;" .. package.cpath
local core = require("switchboard.core")
local fs = core.fs

local function sh(cmd)
  local ok, _, code = os.execute(cmd)
  assert(ok, ("`%s` failed with %s"):format(cmd, tostring(code)))
end

local function slurp(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

local function spit(path, bytes)
  local f = assert(io.open(path, "wb"))
  f:write(bytes)
  f:close()
end

local function exists(path) -- lstat-like: a dangling symlink exists
  return os.execute("test -e '" .. path .. "' -o -L '" .. path .. "'") == true
end

local all_bytes = (function()
  local t = {}
  for i = 0, 255 do t[#t + 1] = string.char(i) end
  return "\0\0" .. table.concat(t) .. "\0"
end)()

describe("core.fs.root", function()
  local base, ws, outside, root

  -- A snapshot of everything under `dir` (names, types and contents), to prove nothing changed.
  local function snapshot(dir)
    local p = assert(io.popen("cd '" .. dir .. "' && find . -printf '%p %y %s\\n' | sort"))
    local s = p:read("a")
    p:close()
    return s
  end

  before_each(function()
    base = require("support.tmp").dir("fs")
    ws, outside = base .. "/ws", base .. "/outside"
    sh(("mkdir -p '%s' '%s'"):format(ws, outside))
    spit(outside .. "/secret.txt", "outside secret")
    root = assert(fs.root(ws))
  end)

  after_each(function()
    root:close()
    sh("rm -rf '" .. base .. "'")
  end)

  -- `given`: the path the caller passed, when it is itself a host path (the message names it).
  local function assert_fails_given(given, kind, ok, err)
    assert.is_nil(ok)
    assert.is_table(err)
    assert.are.equal(kind, err.kind, err.message)
    assert.is_string(err.message)
    -- never the host path of the root, unless the caller gave it
    if not (given and given:find(base, 1, true)) then
      assert.is_nil(err.message:find(base, 1, true), err.message)
    end
    return err
  end
  local function assert_fails(kind, ok, err)
    return assert_fails_given(nil, kind, ok, err)
  end

  describe("read and write", function()
    it("round-trips binary bytes with NULs", function()
      assert.is_true(root:write("bin.dat", all_bytes))
      assert.are.equal(all_bytes, root:read("bin.dat"))
      assert.are.equal(all_bytes, slurp(ws .. "/bin.dat"))
      assert.is_true(root:write("empty", ""))
      assert.are.equal("", root:read("empty"))
    end)

    it("creates missing parent directories beneath the root", function()
      assert.is_true(root:write("a/b/c/d.txt", "deep"))
      assert.are.equal("deep", slurp(ws .. "/a/b/c/d.txt"))
      assert.are.equal("dir", root:stat("a/b/c").type)
      assert.is_true(root:write("a/./b/../e.txt", "dots inside"))
      assert.are.equal("dots inside", slurp(ws .. "/a/e.txt"))
      assert.is_true(root:write("x//y.txt", "double slash"))
      assert.are.equal("double slash", slurp(ws .. "/x/y.txt"))
    end)

    it("replaces atomically and leaves no temp file behind", function()
      assert.is_true(root:write("f.txt", "one"))
      assert.is_true(root:write("f.txt", "two, longer"))
      assert.are.equal("two, longer", root:read("f.txt"))
      assert.are.same({"f.txt"}, root:list("."))
    end)

    it("sets the mode, and keeps an existing file's mode when none is given", function()
      assert.is_true(root:write("run.sh", "#!/bin/sh\n", {mode = tonumber("755", 8)}))
      assert.are.equal(tonumber("755", 8), root:stat("run.sh").mode)
      assert.is_true(root:write("run.sh", "#!/bin/sh\necho hi\n"))
      assert.are.equal(tonumber("755", 8), root:stat("run.sh").mode)
      assert.is_true(root:write("plain.txt", "x"))
      assert.are.equal(tonumber("644", 8), root:stat("plain.txt").mode)
      assert.has_error(function() root:write("bad", "x", {mode = tonumber("4755", 8)}) end)
    end)

    it("enforces max_bytes (64 MiB by default)", function()
      root:write("k.bin", string.rep("k", 1000))
      local err = assert_fails("too_large", root:read("k.bin", 999))
      assert.matches("1000 bytes", err.message)
      assert.matches("max_bytes", err.message)
      assert.are.equal(1000, #root:read("k.bin", 1000))
      assert_fails("too_large", root:read("k.bin", 0))
      assert.are.equal("", (root:write("z", "") and root:read("z", 0)))
    end)

    it("reports not_found and not_a_file", function()
      local err = assert_fails("not_found", root:read("nope.txt"))
      assert.matches('"nope.txt"', err.message)
      assert_fails("not_found", root:read("nodir/nope.txt"))
      root:write("d/f", "x")
      assert_fails("not_a_file", root:read("d"))
      assert_fails("not_a_file", root:write("d", "x"))
      assert_fails("not_a_file", root:write("d/", "x"))
      assert_fails("not_found", root:read("d/f/g"))
      assert_fails("not_found", root:read(""))
    end)

    it("does not hang on a fifo in the workspace", function()
      sh("mkfifo '" .. ws .. "/pipe'")
      assert_fails("not_a_file", root:read("pipe"))
      assert_fails("not_a_file", root:write("pipe", "x"))
      assert.are.equal("fifo", root:stat("pipe").type)
    end)
  end)

  describe("escapes", function()
    -- Reads only: for paths that reach real system files. These specs may run as root, so a
    -- regression must never turn them into a write or a remove of /etc/passwd.
    local function assert_read_escape(path)
      local err = assert_fails_given(path, "escape", root:read(path))
      assert.matches("leaves the workspace", err.message)
      assert_fails_given(path, "escape", root:stat(path))
      assert_fails_given(path, "escape", root:list(path))
    end

    -- Every operation, for paths whose target lies in this test's own `outside` directory.
    local function assert_escape_everywhere(path)
      local before = snapshot(base)
      assert_read_escape(path)
      assert_fails_given(path, "escape", root:write(path, "pwned"))
      assert_fails_given(path, "escape", root:remove(path))
      assert_fails_given(path, "escape", root:remove(path, {recursive = true}))
      assert.are.equal(before, snapshot(base), "something changed for " .. path)
    end

    it("refuses .. above the root, whatever its shape", function()
      for _, p in ipairs({"../x", "a/../../x", "../outside/secret.txt", "..", "../outside/new/f",
                          "./../x", "a/b/../../../x"}) do
        assert_escape_everywhere(p)
      end
      -- even after the first part exists
      sh("mkdir -p '" .. ws .. "/a/b'")
      assert_escape_everywhere("a/../../x")
      assert_escape_everywhere("a/b/../../../outside/secret.txt")
    end)

    it("refuses absolute paths, even ones that point inside the root", function()
      assert_read_escape("/etc/passwd")
      assert_read_escape("/")
      assert_escape_everywhere(outside .. "/secret.txt")
      assert_escape_everywhere(outside .. "/new.txt")
      assert_escape_everywhere(ws .. "/inside.txt")
    end)

    it("refuses a symlink inside that points to /etc", function()
      sh("ln -s /etc '" .. ws .. "/etc'")
      sh("ln -s /etc/passwd '" .. ws .. "/passwd'")
      assert_read_escape("etc/passwd")
      assert_fails("escape", root:read("etc"))
      assert_fails("escape", root:list("etc"))
      local err = assert_fails("escape", root:read("passwd"))
      assert.is_nil(err.message:find("root:", 1, true)) -- no /etc/passwd content
      -- stat does not follow a final link: it reports the link itself
      assert.are.equal("link", root:stat("passwd").type)
    end)

    it("refuses a symlinked directory pointing out, and writing through it", function()
      sh("ln -s '" .. outside .. "' '" .. ws .. "/out'")
      sh("ln -s ../outside '" .. ws .. "/rel'")
      for _, p in ipairs({"out/secret.txt", "out/new.txt", "out/sub/new.txt",
                          "rel/secret.txt", "rel/new.txt", "rel/sub/deeper/new.txt"}) do
        assert_escape_everywhere(p)
      end
      assert.are.equal("outside secret", slurp(outside .. "/secret.txt"))
      assert.is_false(exists(outside .. "/new.txt"))
      assert.is_false(exists(outside .. "/sub"))
    end)

    it("refuses writing to a file symlink that points out, and leaves its target alone", function()
      sh("ln -s '" .. outside .. "/secret.txt' '" .. ws .. "/abs'")
      sh("ln -s ../outside/secret.txt '" .. ws .. "/rel'")
      sh("ln -s ../outside/not-yet.txt '" .. ws .. "/dangling'")
      for _, p in ipairs({"abs", "rel", "dangling"}) do
        assert_escape_everywhere(p .. "/x")
        local before = snapshot(base)
        assert_fails("escape", root:write(p, "pwned"))
        assert_fails("escape", root:read(p))
        assert.are.equal(before, snapshot(base))
      end
      assert.are.equal("outside secret", slurp(outside .. "/secret.txt"))
      assert.is_false(exists(outside .. "/not-yet.txt"))
    end)

    it("refuses a link that escapes through a chain of inside links", function()
      sh("ln -s hop2 '" .. ws .. "/hop1'")
      sh("ln -s ../outside '" .. ws .. "/hop2'")
      assert_escape_everywhere("hop1/secret.txt")
      assert_escape_everywhere("hop1/new.txt")
      assert_fails("escape", root:write("hop1", "x"))
    end)

    it("refuses magic links such as /proc/self/root reached through a link", function()
      sh("ln -s /proc/self/root '" .. ws .. "/magic'")
      assert_read_escape("magic/etc/passwd")
      assert_escape_everywhere("magic" .. outside .. "/secret.txt")
      assert_escape_everywhere("magic" .. outside .. "/new.txt")
    end)

    it("refuses a NUL byte in a path rather than cutting the path short", function()
      local before = snapshot(base)
      local err = assert_fails("escape", root:write("ok.txt\0/../../x", "x"))
      assert.matches("NUL", err.message)
      assert_fails("escape", root:read("a\0b"))
      assert_fails("escape", root:stat("a\0b"))
      assert.are.equal(before, snapshot(base))
    end)

    it("refuses a symlink loop", function()
      sh("ln -s loop2 '" .. ws .. "/loop1'")
      sh("ln -s loop1 '" .. ws .. "/loop2'")
      assert_fails("escape", root:read("loop1"))
      assert_fails("escape", root:write("loop1", "x"))
    end)
  end)

  describe("symlinks that stay inside", function()
    it("are followed for reads, writes and lists", function()
      root:write("real/f.txt", "inside")
      sh("ln -s real '" .. ws .. "/alias'")
      sh("ln -s real/f.txt '" .. ws .. "/flink'")
      assert.are.equal("inside", root:read("alias/f.txt"))
      assert.are.equal("inside", root:read("flink"))
      assert.are.same({"f.txt"}, root:list("alias"))
      -- writing through a file link updates the target and keeps the link
      assert.is_true(root:write("flink", "updated"))
      assert.are.equal("updated", slurp(ws .. "/real/f.txt"))
      assert.are.equal("link", root:stat("flink").type)
      -- writing through a directory link creates inside the target
      assert.is_true(root:write("alias/sub/new.txt", "new"))
      assert.are.equal("new", slurp(ws .. "/real/sub/new.txt"))
      -- a dangling link that points inside gets its target created
      sh("ln -s later/file.txt '" .. ws .. "/future'")
      assert.is_true(root:write("future", "made"))
      assert.are.equal("made", slurp(ws .. "/later/file.txt"))
      -- a link that climbs with .. but stays inside
      sh("ln -s ../f.txt '" .. ws .. "/real/sub/back'")
      assert.are.equal("updated", root:read("real/sub/back"))
    end)
  end)

  describe("stat, list and remove", function()
    it("stat reports type, size, mode and mtime_ms", function()
      root:write("f.txt", "12345")
      local st = assert(root:stat("f.txt"))
      assert.are.equal("file", st.type)
      assert.are.equal(5, st.size)
      assert.is_true(math.abs(st.mtime_ms - core.wall_ms()) < 60000)
      assert.are.equal("dir", root:stat(".").type)
      assert_fails("not_found", root:stat("missing"))
    end)

    it("list returns sorted names, defaulting to the root", function()
      for _, n in ipairs({"b", "a", "c", ".hidden"}) do root:write(n, n) end
      root:write("d/inner", "x")
      assert.are.same({".hidden", "a", "b", "c", "d"}, root:list())
      assert.are.same({"inner"}, root:list("d"))
      assert_fails("not_found", root:list("missing"))
    end)

    it("remove deletes files, links and (recursively) directories without following links", function()
      root:write("f.txt", "x")
      assert.is_true(root:remove("f.txt"))
      assert_fails("not_found", root:read("f.txt"))
      assert_fails("not_found", root:remove("f.txt"))
      root:write("d/e/f", "x")
      local err = assert_fails("io", root:remove("d"))
      assert.matches("recursive", err.message)
      assert.is_true(root:remove("d", {recursive = true}))
      assert_fails("not_found", root:stat("d"))
      -- a link to a directory outside: the link goes, the directory stays
      sh("ln -s '" .. outside .. "' '" .. ws .. "/out'")
      assert.is_true(root:remove("out", {recursive = true}))
      assert.is_false(exists(ws .. "/out"))
      assert.are.equal("outside secret", slurp(outside .. "/secret.txt"))
      -- a tree holding a link out
      root:write("t/x", "x")
      sh("ln -s '" .. outside .. "' '" .. ws .. "/t/out'")
      assert.is_true(root:remove("t/", {recursive = true}))
      assert.are.equal("outside secret", slurp(outside .. "/secret.txt"))
      assert_fails("io", root:remove("."))
    end)
  end)

  describe("the handle", function()
    it("opens only existing directories", function()
      assert_fails_given(base .. "/missing", "not_found", fs.root(base .. "/missing"))
      spit(base .. "/file", "x")
      local ok, err = fs.root(base .. "/file")
      assert.is_nil(ok)
      assert.are.equal("not_a_file", err.kind)
    end)

    it("raises once closed, and closes on __close", function()
      local r = assert(fs.root(ws))
      r:close()
      r:close() -- idempotent
      assert.has_error(function() r:read("x") end)
      assert.are.equal("fs.root (closed)", tostring(r))
      do
        local scoped <close> = assert(fs.root(ws))
        assert.is_true(scoped:write("scoped.txt", "x"))
      end
    end)

    it("does not leak its descriptor", function()
      local function count_fds()
        collectgarbage()
        return #fs.list("/proc/self/fd")
      end
      local before = count_fds()
      for _ = 1, 50 do
        local r = fs.root(ws)
        r:write("a/b/c", "x")
        r:read("a/b/c")
        r:close()
      end
      for _ = 1, 50 do
        fs.root(ws):write("gc", "x") -- closed by __gc
      end
      assert.are.equal(before, count_fds())
    end)

    -- In a task the descriptor is closed on libuv's thread pool (its close can unmount a walled
    -- workspace's file system: src/fs/root.c close_off_loop). Every pool thread is held first in
    -- an open(2) of a FIFO (core.file_refs reads its "procs file" there), so the closes wait
    -- behind them: still open while the pool is held — made on the pool, not here — and all
    -- closed once it is let go.
    it("closes its descriptor on the thread pool in a task, and never leaks it", function()
      local function count_fds() return #fs.list("/proc/self/fd") end
      local pool = tonumber(os.getenv("UV_THREADPOOL_SIZE")) or 4
      local fifos = {}
      for i = 1, pool do
        fifos[i] = ws .. "/pool" .. i
        sh("mkfifo " .. fifos[i])
      end
      core.run(function()
        collectgarbage()
        local before = count_fds()
        for i = 1, pool do core.go(function() core.file_refs({ fifos[i] }) end) end
        core.sleep(50) -- the pool's threads take their jobs (a late one only weakens the check)
        local held = count_fds()
        local roots = {}
        for i = 1, 20 do roots[i] = assert(fs.root(ws)) end
        for _, r in ipairs(roots) do r:close() end
        local while_held = count_fds()
        for i = 1, pool do local w = assert(io.open(fifos[i], "w")); w:close() end
        local deadline = core.now_ms() + 30000 -- a busy machine's thread pool: a bound, not a goal
        while count_fds() > before and core.now_ms() < deadline do core.sleep(10) end
        assert.are.equal(held + 20, while_held, "the closes were made on the loop thread")
        assert.are.equal(before, count_fds())
      end)
    end)
  end)
end)

describe("core.fs unconfined helpers", function()
  local base
  before_each(function()
    base = require("support.tmp").dir("fs")
  end)
  after_each(function()
    sh("rm -rf '" .. base .. "'")
  end)

  it("write_file and read_file round-trip binary bytes atomically", function()
    assert.is_true(fs.write_file(base .. "/f.bin", all_bytes))
    assert.are.equal(all_bytes, fs.read_file(base .. "/f.bin"))
    assert.is_true(fs.write_file(base .. "/f.bin", "second"))
    assert.are.equal("second", fs.read_file(base .. "/f.bin"))
    assert.are.same({"f.bin"}, fs.list(base))
    local ok, err = fs.read_file(base .. "/missing")
    assert.is_nil(ok)
    assert.are.equal("not_found", err.kind)
    ok, err = fs.read_file(base .. "/f.bin", 3)
    assert.are.equal("too_large", err.kind)
    ok, err = fs.write_file(base .. "/no/such/dir/f", "x")
    assert.are.equal("not_found", err.kind)
  end)

  it("mkdir_p, list, exists and realpath", function()
    assert.is_true(fs.mkdir_p(base .. "/a/b/c"))
    assert.is_true(fs.mkdir_p(base .. "/a/b/c")) -- again: fine
    fs.write_file(base .. "/a/z", "z")
    fs.write_file(base .. "/a/m", "m")
    assert.are.same({"b", "m", "z"}, fs.list(base .. "/a"))
    assert.is_true(fs.exists(base .. "/a/b/c"))
    assert.is_false(fs.exists(base .. "/a/nope"))
    local ok, err = fs.mkdir_p(base .. "/a/z/sub")
    assert.is_nil(ok)
    assert.is_table(err)
    assert.are.equal(fs.realpath(base) .. "/a/b", fs.realpath(base .. "/a/b/c/.."))
  end)

  it("remove_tree deletes a tree but does not follow a symlink to a directory outside", function()
    local outside, tree = base .. "/outside", base .. "/tree"
    fs.mkdir_p(outside .. "/keep")
    fs.write_file(outside .. "/keep/precious.txt", "precious")
    fs.mkdir_p(tree .. "/a/b")
    fs.write_file(tree .. "/a/b/f", "x")
    sh(("ln -s '%s' '%s/a/link-to-outside'"):format(outside, tree))
    sh(("ln -s '%s/keep/precious.txt' '%s/a/b/file-link'"):format(outside, tree))
    assert.is_true(fs.remove_tree(tree))
    assert.is_false(exists(tree))
    assert.are.equal("precious", fs.read_file(outside .. "/keep/precious.txt"))
    assert.is_true(fs.remove_tree(tree)) -- missing: nothing to do
  end)

  it("remove_tree on a symlink removes the link, not its target, even with a trailing slash", function()
    local outside = base .. "/outside"
    fs.mkdir_p(outside)
    fs.write_file(outside .. "/f", "kept")
    sh(("ln -s '%s' '%s/link'"):format(outside, base))
    assert.is_true(fs.remove_tree(base .. "/link/"))
    assert.is_false(exists(base .. "/link"))
    assert.are.equal("kept", fs.read_file(outside .. "/f"))
    assert.has_error(function() fs.remove_tree("/") end)
    assert.has_error(function() fs.remove_tree(base .. "/..") end)
  end)

  it("mkdir_p_off_loop makes the directories off the loop: in a task it yields and the loop runs others meanwhile", function()
    local dir = base .. "/made/a/b"
    local other_ran, ran_meanwhile, result, err, outside_ok
    core.run(function()
      local maker = core.go(function()
        result, err = fs.mkdir_p_off_loop(dir, tonumber("700", 8))
        -- the other task was started after this one, in the same turn: it ran only if this
        -- one yielded (a mkdir in place would have finished first)
        ran_meanwhile = other_ran == true
      end)
      core.go(function() other_ran = true end)
      core.join(maker)
    end)
    assert.is_true(result, err and err.message)
    assert.is_true(ran_meanwhile)
    assert.is_true(fs.exists(dir))
    local mode = io.popen("stat -c %a '" .. dir .. "'"):read("l")
    assert.equal("700", mode)
    -- a prefix that is a file: refused, named, in a task as in place
    fs.write_file(base .. "/plain", "x")
    core.run(function() result, err = fs.mkdir_p_off_loop(base .. "/plain/sub") end)
    assert.is_nil(result)
    assert.matches("mkdir_p .*plain/sub", err.message)
    -- outside a task (the main chunk): in place
    outside_ok = fs.mkdir_p_off_loop(base .. "/made/c")
    assert.is_true(outside_ok)
    assert.is_true(fs.exists(base .. "/made/c"))
  end)

  it("remove_tree handles a deep tree", function()
    local path = base .. "/deep"
    for _ = 1, 60 do path = path .. "/d" end
    fs.mkdir_p(path)
    fs.write_file(path .. "/leaf", "x")
    assert.is_true(fs.remove_tree(base .. "/deep"))
    assert.is_false(exists(base .. "/deep"))
  end)

  it("reread gives a held file's whole text from its start each time, past one read's 4 KiB", function()
    local path = base .. "/held"
    spit(path, "oom_kill 0\n")
    local f = assert(io.open(path, "r"))
    assert.equal("oom_kill 0\n", fs.reread(f))
    assert.equal("oom_kill 0\n", fs.reread(f)) -- not from where the last read ended
    spit(path, "oom_kill 3\n")
    assert.equal("oom_kill 3\n", fs.reread(f))
    local big = ("0123456789abcdef"):rep(1024) .. "tail" -- 16 KiB and 4 bytes: five reads
    spit(path, big)
    assert.equal(big, fs.reread(f))
    spit(path, ("x"):rep(4096)) -- exactly one read's worth: the next read says the end
    assert.equal(("x"):rep(4096), fs.reread(f))
    spit(path, "")
    assert.equal("", fs.reread(f))
    f:close()
    assert.has_error(function() fs.reread(f) end)
    assert.has_error(function() fs.reread(path) end)
  end)

  it("reread of a held /proc stat sees the process's state now; once it ends, a zombie or nil", function()
    local p = io.popen("exec sleep 30 & echo $!")
    local pid = p:read("l")
    local f = assert(io.open("/proc/" .. pid .. "/stat", "r"))
    local first = fs.reread(f)
    assert.matches("^" .. pid .. " %b() [RSD] ", first)
    os.execute("kill -STOP " .. pid)
    local stopped
    for _ = 1, 200 do -- the state changes once the signal is taken (a busy machine: a bound)
      stopped = fs.reread(f)
      if stopped:match("^%d+ %b() [Tt] ") then break end
      os.execute("sleep 0.05")
    end
    assert.matches("^" .. pid .. " %b() [Tt] ", stopped)
    os.execute("kill -KILL " .. pid)
    p:close()
    local gone
    for _ = 1, 200 do
      gone = fs.reread(f)
      if gone == nil or gone:match("^%d+ %b() [ZX] ") then break end
      os.execute("sleep 0.05")
    end
    assert.is_true(gone == nil or gone:match("^%d+ %b() [ZX] ") ~= nil, tostring(gone))
    f:close()
  end)
end)

-- core.store: SQLite through the engine, its queries off the loop (src/store/store.c).
package.cpath = (os.getenv("SB_BUILD_DIR") or "./build") .. "/lua/?.so;" .. package.cpath
local core = require("switchboard.core")
local async = require("tests.lua.support.async")

local function tmpdir() return require("support.tmp").dir("store") end

describe("core.store", function()
  local dir
  before_each(function() dir = tmpdir() end)
  after_each(function() os.execute("rm -rf '" .. dir .. "'") end)

  it("runs statements with parameters and gives rows keyed by column", async(function()
    local db = assert(core.store.open(dir .. "/t.db"))
    assert(db:run("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, n REAL, b INTEGER, z TEXT)"))
    local _, info = assert(db:run("INSERT INTO t (name, n, b, z) VALUES (?, ?, ?, ?)", "a\0b", 1.5, true, nil))
    assert.equal(1, info.changes)
    assert.equal(1, info.last_id)
    local rows = assert(db:run("SELECT * FROM t WHERE id = ?", 1))
    assert.equal(1, #rows)
    assert.equal("a\0b", rows[1].name)
    assert.equal(1.5, rows[1].n)
    assert.equal(1, rows[1].b)
    assert.is_nil(rows[1].z)
    assert.equal(math.type(rows[1].id), "integer")
    local mode = assert(db:run("PRAGMA journal_mode"))
    assert.equal("wal", mode[1].journal_mode)
    db:close()
  end))

  it("fails as a value with sqlite's words, and a failed batch changes nothing", async(function()
    local db = assert(core.store.open(dir .. "/t.db"))
    assert(db:run("CREATE TABLE t (k TEXT PRIMARY KEY)"))
    local rows, err = db:run("SELEKT 1")
    assert.is_nil(rows)
    assert.equal("store", err.kind)
    assert.matches("syntax error", err.message)
    local ok, berr = db:batch{ { "INSERT INTO t VALUES (?)", "x" }, { "INSERT INTO t VALUES (?)", "x" } }
    assert.is_nil(ok)
    assert.matches("UNIQUE", berr.message)
    assert.equal(0, #assert(db:run("SELECT * FROM t")))
    local res = assert(db:batch{ { "INSERT INTO t VALUES (?)", "y" }, { "SELECT count(*) AS c FROM t" } })
    assert.equal(1, res[2][1].c)
    db:close()
  end))

  it("keeps the order of queries from many tasks (one at a time, FIFO) and never blocks the loop", async(function()
    local db = assert(core.store.open(dir .. "/t.db"))
    assert(db:run("CREATE TABLE t (i INTEGER)"))
    local done, ticks = 0, 0
    local stop = core.signal()
    core.go(function() while core.sleep(1, stop) do ticks = ticks + 1 end end)
    for i = 1, 200 do
      core.go(function()
        assert(db:batch{ { "INSERT INTO t VALUES (?)", i } })
        done = done + 1
      end)
    end
    while done < 200 do core.sleep(5) end
    stop:abort("done")
    local rows = assert(db:run("SELECT i FROM t ORDER BY rowid"))
    assert.equal(200, #rows)
    for i = 1, 200 do assert.equal(i, rows[i].i) end
    assert.is_true(ticks > 0) -- the loop's timers ran while the pool worked
    db:close()
  end))

  it("a committed row survives SIGKILL of the process that wrote it", async(function()
    local path = dir .. "/k.db"
    local script = dir .. "/w.lua"
    local f = assert(io.open(script, "w"))
    f:write(([[
package.cpath = %q .. "/lua/?.so;" .. package.cpath
local core = require("switchboard.core")
core.run(function()
  local db = assert(core.store.open(%q))
  assert(db:run("CREATE TABLE IF NOT EXISTS t (v TEXT)"))
  assert(db:batch{ { "INSERT INTO t VALUES (?)", "acknowledged" } })
  io.open(%q, "w"):close()
  core.sleep(600000)
end)
]]):format(os.getenv("SB_BUILD_DIR") or "./build", path, dir .. "/committed"))
    f:close()
    -- the writer is the same interpreter busted runs in (under the sanitized build, with the
    -- runtimes preloaded)
    local env = require("support.preload").env{ PATH = os.getenv("PATH") }
    local proc = core.spawn{ argv = { "lua5.4", script }, env = env, max_output = 4096 }
    -- wait for the writer to say the batch committed, then SIGKILL it
    local deadline = core.now_ms() + 60000
    local seen = false
    while core.now_ms() < deadline and not seen do
      local m = io.open(dir .. "/committed", "r")
      if m then m:close(); seen = true else core.sleep(20) end
    end
    assert.is_true(seen, "the writer did not commit: " .. tostring(proc.stderr or ""))
    proc:kill("KILL")
    local res = proc:wait()
    assert.equal(9, res.signal)
    local db = assert(core.store.open(path))
    local rows = assert(db:run("SELECT v FROM t"))
    assert.equal("acknowledged", rows[1].v)
    db:close()
  end))

  -- record.db outside the systemd unit (whose UMask is 0077): under the usual umask 022 the
  -- database and its -wal and -shm are still the owner's alone, and an older, wider file is
  -- narrowed when it is opened. A child process, for the umask is the process's.
  it("keeps the database and its side files 0600 whatever the umask", function()
    local build = os.getenv("SB_BUILD_DIR") or "./build"
    local script = dir .. "/open.lua"
    local f = assert(io.open(script, "w"))
    f:write(([[
package.cpath = %q .. "/lua/?.so;" .. package.cpath
local core = require("switchboard.core")
core.run(function()
  local db = assert(core.store.open(arg[1]))
  assert(db:run("CREATE TABLE IF NOT EXISTS t (x)"))
  assert(db:run("INSERT INTO t VALUES (1)"))
  local p = io.popen("cd " .. arg[1]:match("^(.*)/") .. " && stat -c '%%n %%a' t.db*")
  io.write(p:read("a"))
  p:close()
  db:close()
end)
]]):format(build))
    f:close()
    local function modes()
      local p = assert(io.popen(("umask 022 && %slua5.4 %s %s/t.db 2>&1")
        :format(require("support.preload").shell_prefix(), script, dir)))
      local out = p:read("a")
      p:close()
      return out
    end
    local out = modes()
    assert.equal("t.db 600\nt.db-shm 600\nt.db-wal 600\n", out)
    -- an older run's files, wide open: narrowed at the next open
    os.execute(("cd %s && rm -f t.db-wal t.db-shm && chmod 644 t.db && printf x > t.db-wal && chmod 644 t.db-wal"):format(dir))
    out = modes()
    assert.equal("t.db 600\nt.db-shm 600\nt.db-wal 600\n", out)
  end)
end)

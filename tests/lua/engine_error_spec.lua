-- The engine's one error type (core.error / core.is_error), that every engine failure is one,
-- the one message handler's wording, and TERM without a handler ending core.run from outside
-- the libuv callback. Real processes, real loopback sockets.
local core = require("switchboard.core")
local async = require("support.async")
local procs = require("support.procs")

local PATH = "/usr/local/bin:/usr/bin:/bin"
local BUILD = os.getenv("SB_BUILD_DIR") or "./build"

-- A plain `lua5.4` running `code` with the engine module of the build under test.
local function lua_child(code, opts)
  opts = opts or {}
  opts.argv = { "lua5.4", "-e", code }
  opts.env = {
    PATH = PATH,
    LUA_CPATH = BUILD .. "/lua/?.so;;",
    LUA_PATH = "./lua/?.lua;./lua/?/init.lua;;",
  }
  require("support.preload").env(opts.env) -- the sanitized build's module needs its runtimes
  opts.deadline_ms = opts.deadline_ms or 30000
  return assert(core.spawn(opts))
end

describe("core.error", function()
  it("makes an error with kind, message, code, cause and extra fields", function()
    local cause = core.error("io", "disk gone")
    local err = core.error("config", "bad file", { code = 78, cause = cause, path = "/x" })
    assert.is_true(core.is_error(err))
    assert.are.equal("config", err.kind)
    assert.are.equal("bad file", err.message)
    assert.are.equal(78, err.code)
    assert.are.equal(cause, err.cause)
    assert.are.equal("/x", err.path)
    assert.are.equal("bad file", tostring(err))
    assert.are.equal("bad file", string.format("%s", err))
  end)

  it("never has an empty message", function()
    assert.are.equal("(timeout error without a message)", core.error("timeout").message)
    assert.are.equal("(timeout error without a message)", tostring(core.error("timeout", "")))
  end)

  it("takes kind and message from its arguments, not from fields", function()
    local err = core.error("a", "m", { kind = "b", message = "n" })
    assert.are.equal("a", err.kind)
    assert.are.equal("m", err.message)
  end)

  it("tells its errors from other values", function()
    assert.is_false(core.is_error({ kind = "x", message = "y" }))
    assert.is_false(core.is_error("x"))
    assert.is_false(core.is_error(nil))
  end)

  it("raises on a missing kind or a non-table fields", function()
    assert.has_error(function() core.error() end)
    assert.has_error(function() core.error("k", "m", 3) end)
  end)
end)

describe("engine failures", function()
  local function check(err, kind)
    assert.is_true(core.is_error(err), "not an engine error: " .. tostring(err))
    assert.are.equal(kind, err.kind)
    assert.is_true(#err.message > 0)
    assert.are.equal(err.message, tostring(err))
  end

  it("are engine errors: spawn, abort, http, listen, fs", async(function()
    local p, err = core.spawn({ argv = { "/nonexistent/program" }, env = { PATH = PATH } })
    assert.is_nil(p)
    check(err, "spawn")

    local sig = core.signal()
    sig:abort("enough")
    local ok, aerr = core.sleep(10, sig)
    assert.is_nil(ok)
    check(aerr, "aborted")
    assert.are.equal("enough", aerr.reason)

    -- a port nobody listens on: bind one, close it, then ask it
    local srv = assert(core.http.serve({ port = 0, handler = function() end }))
    local port = srv.port
    srv:close()
    local taken = assert(core.http.serve({ port = 0, handler = function() end }))
    local _, lerr = core.http.serve({ port = taken.port, handler = function() end })
    check(lerr, "listen")
    taken:close()
    core.sleep(20)
    local status, herr = core.http.request({ url = "http://127.0.0.1:" .. port .. "/", deadline_ms = 5000 })
    assert.is_nil(status)
    check(herr, "transport")

    local data, ferr = core.fs.read_file("/nonexistent/dir/file")
    assert.is_nil(data)
    assert.is_true(core.is_error(ferr))
    assert.is_true(#ferr.message > 0)
  end))
end)

describe("the message handler", function()
  it("logs a task's error object by its message, never as a table address", async(function()
    local r = lua_child([[
      local core = require("switchboard.core")
      core.run(function()
        core.go(function() error(core.error("policy", "the hook said no")) end)
        core.go(function() error({ message = "a plain table with a message" }) end)
        core.go(function() error({}) end)
        core.sleep(50)
      end)
    ]]):wait()
    assert.are.equal(0, r.exit, r.stderr)
    assert.matches("the hook said no", r.stderr, 1, true)
    assert.matches("a plain table with a message", r.stderr, 1, true)
    assert.matches("(error object is a table value)", r.stderr, 1, true)
    assert.matches("stack traceback", r.stderr, 1, true)
    assert.is_nil(r.stderr:find("table: 0x", 1, true))
  end))
end)

describe("TERM without a handler", function()
  it("stops core.run, then shuts down: the children die and the process exits 0", async(function()
    local out = ""
    local p = lua_child([[
      local core = require("switchboard.core")
      core.on_signal("TERM", function() end)
      core.on_signal("TERM", nil) -- watched, no handler: the default
      core.run(function()
        local child = assert(core.spawn({ argv = { "sleep", "60" }, env = { PATH = "/usr/bin:/bin" } }))
        io.stdout:write(child.pid, "\n")
        io.stdout:flush()
        child:wait()
        io.stdout:write("waited\n")
      end)
      io.stdout:write("after run\n")
    ]], { on_output = function(stream, chunk) if stream == "stdout" then out = out .. chunk end end })
    -- the pid line comes once posix_spawn returned, so the child is in its own session by then
    local pid
    local t0 = core.now_ms()
    while core.now_ms() - t0 < 20000 do
      pid = tonumber(out:match("^(%d+)\n"))
      if pid then break end
      core.sleep(10)
    end
    assert.is_not_nil(pid, "the engine under test never started its child")
    -- the process alone, as an operator's kill does
    assert(core.spawn({ argv = { "kill", "-TERM", tostring(p.pid) }, env = { PATH = PATH } })):wait()
    local r = p:wait()
    assert.are.equal(0, r.exit, r.stderr)
    assert.matches("after run", r.stdout, 1, true)
    assert.is_nil(r.stdout:find("waited", 1, true))
    assert.is_false(procs.alive(pid))
  end))
end)

-- core.spawn in a task starts the child from the engine's spawning thread, not the loop's
-- (src/proc/spawn_thread.c, issue 43's loop-lag row): posix_spawn's vfork suspends the thread
-- that calls it until the child has exec'd, tens of ms on a loaded host at every instance start.
local core = require("switchboard.core")
local async = require("support.async")
local procs = require("support.procs")
local tmp = require("support.tmp")

local PATH = "/usr/local/bin:/usr/bin:/bin"
local BUILD = os.getenv("SB_BUILD_DIR") or "./build"

local function read_all(path)
  local f = assert(io.open(path))
  local text = f:read("a")
  f:close()
  return text
end

describe("core.spawn off the loop's thread", function()
  it("vforks the child from another thread than the loop's (strace of a real engine)", async(function()
    local dir = tmp.dir()
    local trace = dir .. "/trace"
    -- a plain lua5.4 on the engine: one task spawns `true` and waits for it
    local code = [[
      local core = require("switchboard.core")
      core.run(function()
        local p = assert(core.spawn{ argv = { "true" }, env = { PATH = "/usr/bin:/bin" } })
        assert(p:wait().exit == 0)
        io.stdout:write("ran\n")
      end)]]
    local env = { PATH = PATH, LUA_CPATH = BUILD .. "/lua/?.so;;", LUA_PATH = "./lua/?.lua;./lua/?/init.lua;;" }
    require("support.preload").env(env)
    -- -f: every thread; each line starts with the id of the thread that made the call
    local proc = assert(core.spawn{
      argv = { "strace", "-f", "-qq", "-e", "trace=clone,clone3", "-e", "signal=none", "-o", trace,
               "lua5.4", "-e", code },
      env = env, deadline_ms = 60000,
    })
    local r = proc:wait()
    assert.are.equal(0, r.exit, r.stderr)
    assert.are.equal("ran\n", r.stdout)
    local main, vforks = nil, {}
    for line in read_all(trace):gmatch("[^\n]+") do
      local tid = line:match("^(%d+)%s")
      main = main or tid -- the first line is the interpreter's own (main) thread
      if line:find("CLONE_VFORK", 1, true) and line:find("CLONE_VM", 1, true) then vforks[#vforks + 1] = tid end
    end
    assert.is_truthy(main, "strace recorded nothing")
    assert.are.equal(1, #vforks, "one vfork expected (the `true`):\n" .. read_all(trace))
    assert.are_not.equal(main, vforks[1], "the loop's thread vforked the child:\n" .. read_all(trace))
  end))

  it("a group killed while its child is still being started is killed once it has started", async(function()
    -- both tasks run in one turn: the first hands its spawn to the thread and waits, the second
    -- kills every group before the answer can arrive (it comes through the loop's poll)
    local result
    local starter = core.go(function()
      local p = assert(core.spawn{ argv = { "sleep", "30" }, env = { PATH = PATH } })
      result = p:wait()
    end)
    core.go(function() core.kill_all() end)
    local t0 = core.now_ms()
    core.join(starter)
    assert.are.equal(9, result.signal)
    assert.is_true(core.now_ms() - t0 < 20000, "the started child was not killed")
    assert.are.same({}, procs.zombie_children(procs.self_pid()))
    assert.are.equal(0, core.proc_count())
  end))

  it("an engine shut down while a child is being started leaves no process of it", async(function()
    local marker = "spawn-thread-shutdown-" .. core.crypto.hex(core.crypto.random_bytes(4))
    -- the spawning task hands its child to the thread and waits; the next task ends the engine
    -- in the same turn: the child the thread starts meanwhile is killed and reaped by the
    -- shutdown (or, not yet taken by the thread, never started), never left running
    local code = ([[
      local core = require("switchboard.core")
      core.run(function()
        core.go(function()
          core.spawn{ argv = { "sh", "-c", "exec sleep 60", "%s" }, env = { PATH = "/usr/bin:/bin" } }
        end)
        core.go(function() core.stop() end) -- the same turn, before the loop polls for the answer
        core.sleep(60000)
      end)
      io.stdout:write("ended\n")]]):format(marker)
    local env = { PATH = PATH, LUA_CPATH = BUILD .. "/lua/?.so;;", LUA_PATH = "./lua/?.lua;./lua/?/init.lua;;" }
    require("support.preload").env(env)
    local r = assert(core.spawn{ argv = { "lua5.4", "-e", code }, env = env, deadline_ms = 60000 }):wait()
    assert.are.equal(0, r.exit, r.stderr)
    assert.are.equal("ended\n", r.stdout)
    for pid, cmd in pairs(procs.cmdlines()) do
      assert.is_nil(cmd:find(marker, 1, true), "left running: " .. pid .. " " .. cmd)
    end
  end))

  it("answers many spawns at once, each with its own child, in the order asked", async(function()
    local tasks, got = {}, {}
    for i = 1, 40 do
      tasks[i] = core.go(function()
        local p = assert(core.spawn{ argv = { "sh", "-c", "echo " .. i }, env = { PATH = PATH } })
        got[i] = p:wait().stdout
      end)
    end
    for i = 1, 40 do core.join(tasks[i]) end
    for i = 1, 40 do assert.are.equal(i .. "\n", got[i]) end
    assert.are.same({}, procs.zombie_children(procs.self_pid()))
    assert.are.equal(0, core.proc_count())
  end))
end)

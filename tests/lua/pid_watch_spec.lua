-- core.pid_watch: whether a process has ended, through a pidfd (src/proc/pidwatch.c) — what a
-- walled instance's liveness look uses (shell/instance.lua dead()): running is not ended, a
-- zombie is (as the init's stat line's state Z was), reaped is, and a watch survives its pid
-- being gone. Real processes of this spec's own, signalled by the pids it recorded.
package.cpath = (os.getenv("SB_BUILD_DIR") or "./build") .. "/lua/?.so;" .. package.cpath
local core = require("switchboard.core")

local function state_of(pid)
  local f = io.open("/proc/" .. pid .. "/stat")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s:match("^%d+ %b() (%S)")
end

local function comm_of(pid)
  local f = io.open("/proc/" .. pid .. "/comm")
  if not f then return nil end
  local s = f:read("l")
  f:close()
  return s
end

local function wait_until(pred, what)
  for _ = 1, 3000 do -- up to 30 s: a bound for a busy machine, left as soon as it holds
    if pred() then return end
    os.execute("sleep 0.01")
  end
  error("timed out waiting for " .. what)
end

describe("core.pid_watch", function()
  local parent, child, pipe

  -- parent: a shell that starts `sleep 300` and then becomes `sleep 300` itself, so it never
  -- reaps its child: the child, once killed, stays a zombie until the parent goes
  before_each(function()
    pipe = assert(io.popen("exec sh -c 'echo $$; sleep 300 & echo $!; exec sleep 300'", "r"))
    parent = tonumber(pipe:read("l"))
    child = tonumber(pipe:read("l"))
    assert.is_number(parent)
    assert.is_number(child)
    -- until the shell has become `sleep`, it may still reap a child that ends (dash does, as it
    -- runs its last command): a child killed before then is gone, never a zombie
    wait_until(function() return comm_of(parent) == "sleep" end, "the parent to become sleep")
  end)

  after_each(function()
    os.execute("kill -KILL " .. child .. " " .. parent .. " 2>/dev/null")
    if pipe then pipe:close() end
  end)

  it("is not ended while the process runs, and is once it is a zombie and once it is reaped", function()
    local w = assert(core.pid_watch(child))
    assert.is_false(w:exited())
    assert.is_not_nil(state_of(child))
    os.execute("kill -TERM " .. child)
    wait_until(function() return state_of(child) == "Z" end, "the child to be a zombie")
    assert.is_true(w:exited()) -- a zombie: ended, as the stat line's Z said
    os.execute("kill -KILL " .. parent) -- the zombie is reparented and reaped (by init)
    wait_until(function() return state_of(child) == nil end, "the child to be reaped")
    assert.is_true(w:exited())
    w:close()
    assert.is_true(w:exited()) -- a closed watch cannot say: ended
    w:close() -- twice is harmless
  end)

  it("watches the parent while its child ends: another process's end is not its own", function()
    local w <close> = assert(core.pid_watch(parent))
    os.execute("kill -TERM " .. child)
    wait_until(function() return state_of(child) == "Z" end, "the child to be a zombie")
    assert.is_false(w:exited())
  end)

  it("refuses a process that is not there, in words", function()
    os.execute("kill -KILL " .. child .. " " .. parent)
    pipe:close() -- (the parent is this process's child: reaped here)
    pipe = nil
    assert.is_nil(state_of(parent))
    local w, err = core.pid_watch(parent)
    assert.is_nil(w)
    assert.matches("pidfd_open " .. parent .. ": No such process", err, 1, true)
  end)

  it("takes only a process id", function()
    assert.has_error(function() core.pid_watch(0) end)
    assert.has_error(function() core.pid_watch("x") end)
  end)
end)

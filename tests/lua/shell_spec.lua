-- shell/: the one spawn point (run.bash, its instance hook) and the workspace object the
-- local executor and sandboxd's runner share, on the real engine.
local core = require("switchboard.core")
local async = require("support.async")
local tmp = require("support.tmp")
local run = require("switchboard.shell.run")
local workspace = require("switchboard.shell.workspace")

local function env() return { PATH = os.getenv("PATH") } end

describe("shell.run.bash", function()
  after_each(function() tmp.remove_all() end)

  it("runs bash -c in cwd with exactly the environment given", async(function()
    local dir = tmp.dir("run")
    local r = assert(run.bash{ command = 'pwd; echo "[$SECRETISH][$HOME]"', cwd = dir,
                               env = { PATH = os.getenv("PATH"), SECRETISH = "x" } })
    assert.equal(0, r.exit)
    assert.equal(dir .. "\n[x][]\n", r.stdout)
  end))

  it("enforces the deadline on the process group", async(function()
    local t0 = core.now_ms()
    local r = assert(run.bash{ command = "sleep 30 & sleep 30", env = env(), deadline_ms = 300,
                               kill_grace_ms = 200 })
    assert.is_true(r.timed_out)
    assert.is_true(core.now_ms() - t0 < 10000)
  end))

  it("passes every command through the instance it is given", async(function()
    local seen = {}
    local instance = {}
    function instance:spawn_args(args)
      seen[#seen + 1] = args.argv[3]
      local out = {}
      for k, v in pairs(args) do out[k] = v end
      out.argv = { "env", "WALLED=yes", table.unpack(args.argv) }
      return out
    end
    local r = assert(run.bash{ command = "echo $WALLED", env = env(), instance = instance })
    assert.equal("yes\n", r.stdout)
    assert.same({ "echo $WALLED" }, seen)
  end))

  it("an instance that refuses stops the command before anything starts", async(function()
    local instance = { spawn_args = function() return nil, { kind = "instance", message = "gone" } end }
    local r, err = run.bash{ command = "touch /tmp/never", env = env(), instance = instance }
    assert.is_nil(r)
    assert.equal("gone", err.message)
  end))

  it("a shell that cannot start is nil, err", async(function()
    local r, err = run.bash{ command = "true", cwd = "/nonexistent/dir", env = env() }
    assert.is_nil(r)
    assert.equal("string", type(err.message))
  end))
end)

describe("shell.run.tool", function()
  after_each(function() tmp.remove_all() end)

  it("runs the argv as given, with PATH alone unless an environment is given", async(function()
    local dir = tmp.dir("tool")
    local r = assert(run.tool{ argv = { "pwd" }, cwd = dir, deadline_ms = 60000 })
    assert.equal(0, r.exit)
    assert.equal(dir .. "\n", r.stdout)
    r = assert(run.tool{ argv = { "/usr/bin/env" }, deadline_ms = 60000 })
    assert.equal("PATH=" .. os.getenv("PATH") .. "\n", r.stdout)
    r = assert(run.tool{ argv = { "/usr/bin/env" }, env = { X = "y" }, deadline_ms = 60000 })
    assert.equal("X=y\n", r.stdout)
  end))

  it("always has a deadline, and keeps it on the tool's process group", async(function()
    assert.has_error(function() run.tool{ argv = { "true" } } end, "run.tool: spec.deadline_ms (from policy) is required")
    local r = assert(run.tool{ argv = { "sh", "-c", "sleep 30 & sleep 30" }, deadline_ms = 300, kill_grace_ms = 200 })
    assert.is_true(r.timed_out)
  end))

  it("a tool that cannot start is nil, err", async(function()
    local r, err = run.tool{ argv = { "/nonexistent/tool" }, deadline_ms = 60000 }
    assert.is_nil(r)
    assert.equal("string", type(err.message))
  end))
end)

describe("shell.workspace", function()
  after_each(function() tmp.remove_all() end)

  it("stop kills every command of the workspace at once and keeps its files", async(function()
    local root = tmp.dir("ws")
    local ws = workspace.open(root, "stopped")
    assert.is_true(ws:write("kept.txt", "still here"))
    local r
    core.go(function() r = ws:run{ command = "echo started > started; sleep 60", env = env(), deadline_ms = 120000 } end)
    local f
    for _ = 1, 600 do
      f = io.open(ws.dir .. "/started")
      if f then break end
      core.sleep(100)
    end
    assert.truthy(f, "the command never started")
    f:close()
    ws:stop("test stop")
    for _ = 1, 600 do
      if r then break end
      core.sleep(100)
    end
    assert.truthy(r, "the command outlived the stop")
    assert.is_true(r.aborted)
    assert.equal("still here", workspace.open(root, "stopped"):read("kept.txt"))
  end))

  it("runs in the thread's directory, made 0700 on first use and again after a command removed it", async(function()
    local root = tmp.dir("ws")
    local ws = workspace.open(root, "C1:17.1")
    assert.equal(workspace.path(root, "C1:17.1"), ws.dir)
    assert.is_false(core.fs.exists(ws.dir))
    local r = assert(ws:run{ command = "pwd; stat -c %a .", env = env() })
    assert.equal(ws.dir .. "\n700\n", r.stdout)
    assert(ws:run{ command = "rm -rf \"$PWD\"", env = env() })
    r = assert(ws:run{ command = "pwd", env = env() })
    assert.equal(ws.dir .. "\n", r.stdout)
  end))

  it("reads and writes inside the workspace and refuses paths that leave it", async(function()
    local root = tmp.dir("ws")
    local ws = workspace.open(root, "t")
    assert.is_true(ws:write("sub/a.txt", "hello"))
    assert.equal("hello", ws:read("sub/a.txt"))
    local _, err = ws:read("../outside")
    assert.equal("escape", err.kind)
    _, err = ws:write("/etc/x", "no")
    assert.equal("escape", err.kind)
    _, err = ws:read("missing")
    assert.equal("not_found", err.kind)
  end))

  it("a workspace that cannot be made is kind workspace", async(function()
    local ws = workspace.open("/proc/self/nope", "t")
    local r, err = ws:run{ command = "true", env = env() }
    assert.is_nil(r)
    assert.equal("workspace", err.kind)
    assert.truthy(err.message:find("could not be created", 1, true))
  end))
end)

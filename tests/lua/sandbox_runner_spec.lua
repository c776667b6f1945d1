-- How an instance runs and goes to sleep (sandboxd/runner.lua): commands in the workspace,
-- sleep that kills and deletes without stalling the loop, and the start-up sweep.
local core = require("switchboard.core")
local S = require("support.sandbox")
local runner = require("switchboard.sandboxd.runner")
local workspace = require("switchboard.shell.workspace")

local function env() return { PATH = os.getenv("PATH") } end

describe("sandboxd runner", function()
  it("runs a command in the thread's workspace, made on first use", function()
    core.run(function()
      local root = S.tmpdir()
      local r = runner.new(root, "T1")
      local res = assert(r:exec{ command = "pwd", env = env() })
      assert.equal(workspace.path(root, "T1") .. "\n", res.stdout)
      S.rm(root)
    end)
  end)

  -- sandboxd's fleet forgets a sleeping instance as it calls stop, and the thread's next request
  -- may wake a new runner at once on the same path while the old stop still yields — behind
  -- walls it waits for the holder's exit and the cgroups' reap, seconds under load; here the
  -- workspace's stop is made to wait the same way (on a signal, not for a time). The old stop
  -- must not touch what the new runner made at the path: before, it renamed the new workspace
  -- away and deleted it under the new instance.
  it("a stop leaves the path before it yields: the thread's next runner keeps what it made there", function()
    core.run(function()
      local root = S.tmpdir()
      local old = runner.new(root, "again")
      assert(old:exec{ command = "echo old > mine", env = env() })
      local stop_ws, holder_gone = old.ws.stop, core.signal()
      old.ws.stop = function(ws, reason)
        core.sleep(60000, holder_gone)
        return stop_ws(ws, reason)
      end
      local stopped = false
      core.go(function() old:stop("idle"); stopped = true end)
      core.sleep(0) -- the stop runs up to its wait
      local new = runner.new(root, "again")
      local res = assert(new:exec{ command = "ls -A; echo new > mine", env = env() })
      assert.equal("", res.stdout) -- nothing of the old instance's
      holder_gone:abort("the old instance's holder exited")
      assert.truthy(S.wait_for(function() return stopped end, 60000), "the old stop never ended")
      assert.truthy(S.wait_for(function()
        for _, name in ipairs(core.fs.list(root) or {}) do
          if name:find("^%.trash%-") then return false end
        end
        return true
      end, 60000), "the old workspace was never removed")
      res = assert(new:exec{ command = "cat mine", env = env() })
      assert.equal(0, res.exit, res.stderr)
      assert.equal("new\n", res.stdout)
      S.rm(root)
    end)
  end)

  it("a workspace an earlier instance's sleep failed to remove is never handed to the new one", function()
    core.run(function()
      local root = S.tmpdir()
      local dir = workspace.path(root, "T1")
      -- what a failed removal leaves: the old instance's files where the new one will live
      os.execute(("mkdir -p '%s/repo' && echo secret > '%s/repo/old'"):format(dir, dir))
      local r = runner.new(root, "T1")
      local res = assert(r:exec{ command = "ls -A", env = env() })
      assert.equal("", res.stdout)
      assert.equal(0, res.exit)
      -- later operations of the same instance keep their own files
      assert(r:exec{ command = "touch mine", env = env() })
      assert.equal("mine\n", assert(r:exec{ command = "ls -A", env = env() }).stdout)
      S.rm(root)
    end)
  end)

  it("errors name the thread by a hash, never the host path", function()
    core.run(function()
      local root = S.tmpdir()
      local r = runner.new(root .. "/file/below", "T1")
      local f = assert(io.open(root .. "/file", "w"))
      f:close()
      local res, err = r:exec{ command = "true", env = env() }
      assert.is_nil(res)
      assert.is_nil(err.message:find(root, 1, true), err.message)
      assert.truthy(err.message:find(runner.label("T1"), 1, true), err.message)
      assert.is_nil(runner.label("T1"):find("T1", 1, true))
      S.rm(root)
    end)
  end)

  it("bash starts whatever PATH the request's env sets", function()
    core.run(function()
      local root = S.tmpdir()
      local r = runner.new(root, "T1")
      local res = assert(r:exec{ command = "echo $PATH; ls", env = { PATH = "" } })
      assert.equal("\n", res.stdout)
      assert.equal(127, res.exit)
      S.rm(root)
    end)
  end)

  it("sleep kills what still runs", function()
    core.run(function()
      local root = S.tmpdir()
      local r = runner.new(root, "T1")
      local res
      core.go(function() res = r:exec{ command = "sleep 30", env = env() } end)
      core.sleep(200)
      r:stop("idle")
      assert.truthy(S.wait_for(function() return res end, 3000))
      assert.is_true(res.aborted)
      S.rm(root)
    end)
  end)

  it("sleep moves a large workspace away at once and deletes it without stalling the loop", function()
    core.run(function()
      local root = S.tmpdir()
      local r = runner.new(root, "big")
      assert(r:exec{ command = "for d in $(seq 1 100); do mkdir d$d; (cd d$d && touch $(seq 1 200)); done", env = env() })
      local ticks, ticking = 0, true
      core.go(function() while ticking do core.sleep(5); ticks = ticks + 1 end end)
      r:stop("idle")
      -- the workspace is gone from its place at once: a new instance starts clean
      assert.is_false(core.fs.exists(workspace.path(root, "big")))
      local trash = core.fs.list(root)
      assert.equal(1, #trash)
      assert.truthy(trash[1]:find("^%.trash%-big%-"))
      -- removed by a child while the loop keeps turning
      assert.truthy(S.wait_for(function() return #core.fs.list(root) == 0 end, 20000))
      ticking = false
      assert.is_true(ticks >= 3, "ticks " .. ticks)
      S.rm(root)
    end)
  end)

  it("on shutdown the workspace is deleted before stop returns", function()
    core.run(function()
      local root = S.tmpdir()
      local r = runner.new(root, "T1")
      assert(r:exec{ command = "echo x > f", env = env() })
      r:stop("shutdown")
      assert.same({}, core.fs.list(root))
      S.rm(root)
    end)
  end)

  it("the start-up sweep removes leftover workspaces and trash, and nothing else", function()
    core.run(function()
      local root = S.tmpdir()
      assert(runner.new(root, "left"):exec{ command = "echo x > f", env = env() })
      core.fs.mkdir_p(root .. "/.trash-old-0011aabb/x")
      core.fs.mkdir_p(root .. "/operator-notes")
      core.fs.write_file(root .. "/README", "mine")
      assert.equal(2, runner.sweep(root))
      assert.same({ "README", "operator-notes" }, core.fs.list(root))
      S.rm(root)
    end)
  end)
end)

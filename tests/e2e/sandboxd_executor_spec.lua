-- Black-box: the sandbox executor against the real `switchboard sandboxd` on loopback — the
-- rules of docs/contract.md (#workspaces, #timeouts, #wire-protocol, #credentials, #failure,
-- #capacity) that a real server can show,
-- with the numbers scaled down through a temporary policy directory (support.sandbox FAST:
-- heartbeat 100 ms, sleepAfter 2 s, call margin 1 s, fleet-busy waits 1 s, 1 s, then 1 s up to 3 s).
local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")
local sandbox = require("switchboard.exec.sandbox")
local errors = require("switchboard.exec.errors")
local health = require("switchboard.exec.health")
local workspace = require("switchboard.shell.workspace")
local policies = require("support.policies")
local procs = require("support.procs")
local runner = require("switchboard.sandboxd.runner")

after_each(S.cleanup_servers)

local dir = S.policy_dir()
local snap = assert(policies.load(dir))

local function executor(h, thread, opts)
  opts = opts or {}
  return sandbox.new{ url = h.url, token = opts.token or S.TOKEN, thread_key = thread or "T1",
    policy = function() return opts.snap or snap end, resolve_envs = opts.resolve_envs }
end

-- One walled server for the cases that share nothing but it (each its own thread): a walled
-- start proves the walls with a throwaway instance (seconds, ~13 s on a loaded machine), and
-- a stop sleeps every instance; the cases that need their own flags, policy or death start theirs.
describe("sandbox executor → sandboxd", function()
  describe("on one walled server", function()
    local shared
    setup(function() core.run(function()
      shared = S.start_sandboxd{ policies = dir }
      -- kept out of after_each's cleanup: it serves every case here; stopped in teardown
      for i, h in ipairs(S.servers) do if h == shared then table.remove(S.servers, i) end end
    end) end)
    teardown(function() core.run(function()
      shared:stop(); assert.equal(0, shared:wait().exit)
      S.rm(shared.root)
      -- no case's credential reached the server's log
      assert.is_nil(shared.log():find("ghs_", 1, true))
    end) end)

    it("runs a command; follow-ups in the thread reuse its workspace; another thread has its own", function()
      core.run(function()
        local h = shared
        local a, b = executor(h, "C1:1"), executor(h, "C1:2")
        assert.equal("(no output)", assert(a:exec("echo content > marker.txt")).text)
        assert.equal("content", assert(a:exec("cat marker.txt")).text)
        local other = assert(b:exec("cat marker.txt"))
        assert.equal(1, other.exit_code)
        assert.truthy(other.text:find("^exit 1: "))
      end)
    end)

    it("an ordinary nonzero exit is a result; a silent exit 127 is `exit 127:`; exit 0 without output is (no output)", function()
      core.run(function()
        local h = shared
        local ex = executor(h, "exit-codes")
        assert.equal("exit 3: out", ex:exec("echo out; exit 3").text)
        local r = assert(ex:exec("no_such_command_xyz 2>/dev/null"))
        assert.equal(127, r.exit_code)
        assert.equal("exit 127:", r.text)
        assert.equal("(no output)", ex:exec("true").text)
      end)
    end)

    it("the credential rides in the body and reaches the command's environment, resolved per command", function()
      core.run(function()
        local h = shared
        local n = 0
        local ex = executor(h, "credential", { resolve_envs = function() n = n + 1; return { gh_token = "ghs_" .. n } end })
        assert.equal("ghs_1", ex:exec("printf %s \"$GH_TOKEN\"").text)
        assert.equal("ghs_2", ex:exec("printf %s \"$GH_TOKEN\"").text)
        -- the server's own token never reaches a command
        assert.equal("(no output)", ex:exec("printf %s \"$SANDBOX_TOKEN\"").text)
        -- the log never shows the credential: checked over the whole log at teardown
      end)
    end)

    it("≤ budget succeeds; > budget is exit 124 naming the limit and the timeoutMs knob (the server's clamp)", function()
      core.run(function()
        local h = shared
        local ex = executor(h, "budget")
        assert.equal("OK", ex:exec("sleep 0.2 && echo OK", { timeout_ms = 20000 }).text)
        local r = assert(ex:exec("sleep 5 && echo NO", { timeout_ms = 500 }))
        assert.equal(124, r.exit_code)
        assert.truthy(r.text:find("^exit 124: command timed out in the sandbox after 1s %(the command's limit, 500 ms%); if it needs longer, pass a larger timeoutMs %(up to 1200000%)"), r.text)
      end)
    end)

    it("a command longer than sleepAfter completes and its workspace survives it (idle means idle)", function()
      core.run(function()
        local h = shared
        local ex = executor(h, "long")
        local r = assert(ex:exec("mkdir -p probe && sleep 3 && echo OK", { timeout_ms = 10000 }))
        assert.equal("OK", r.text)
        assert.equal("probe", ex:exec("ls").text)
      end)
    end)

    it("an idle thread sleeps after sleepAfter; its next request finds its workspace kept, its background process gone", function()
      core.run(function()
        local h = shared
        local ex = executor(h, "sleepy")
        ex:exec("echo hi > marker.txt; sleep 60 & disown; true")
        local ws = workspace.path(h.root, "sleepy")
        assert.is_true(core.fs.exists(ws))
        -- this thread's line: other threads of the shared server sleep too
        local line = "sandboxd.instance_slept[^\n]*instance=" .. runner.label("sleepy"):gsub("%-", "%%-") .. "[^\n]*reason=idle"
        assert.truthy(S.wait_for(function() return h.log():find(line) end, 6000))
        assert.is_true(core.fs.exists(ws)) -- kept (issue 37)
        local r = assert(ex:exec("cat marker.txt; pgrep -x sleep || echo no-background"))
        assert.equal(0, r.exit_code, r.text)
        assert.equal("hi\nno-background", r.text)
      end)
    end)

    it("a wrong token is ExecInfraError (HTTP 401) after one send", function()
      core.run(function()
        local h = shared
        local _, err = executor(h, "T1", { token = "wrong" }):exec("true")
        assert.is_true(errors.is_infra(err))
        assert.equal("http 401", err.code)
      end)
    end)

    it("files: binary-safe round trip; an escape is a tool error the model reads", function()
      core.run(function()
        local h = shared
        local ex = executor(h, "files")
        local bytes = {}
        for i = 0, 255 do bytes[#bytes + 1] = string.char(i) end
        bytes = table.concat(bytes)
        assert.is_true(ex:write_file("d/bin", bytes))
        assert.equal(bytes, ex:read_file("d/bin"))
        assert.equal("256", ex:exec("wc -c < d/bin").text)
        local _, err = ex:read_file("../../etc/passwd")
        assert.is_true(errors.is_tool(err))
        _, err = ex:write_file("/etc/evil", "x")
        assert.is_true(errors.is_tool(err))
      end)
    end)

    it("`switchboard exec --backend sandbox --sandbox-url URL` runs a command through it (token from SANDBOX_TOKEN)", function()
      core.run(function()
        local h = shared
        local function cli(args, env)
          local argv = { S.BIN, "--policies", dir, "exec", "--backend", "sandbox", "--sandbox-url", h.url }
          for _, a in ipairs(args) do argv[#argv + 1] = a end
          return assert(core.spawn{ argv = argv, env = S.base_env(env) }):wait()
        end
        local r = cli({ "--thread", "cli-1", "--", "echo", "hello; exit 4" }, { SANDBOX_TOKEN = S.TOKEN })
        assert.equal(4, r.exit)
        assert.equal("exit 4: hello\n", r.stdout)
        -- cli-1 may have gone to sleep (2 s here) while a sanitized CLI starts on a busy machine,
        -- and a cold instance's start (pasta's: seconds under load) counts against the budget: 20 s
        -- holds that start and still ends the 60 s command at its own limit, 124, not 125
        r = cli({ "--thread", "cli-1", "--timeout-ms", "20000", "--", "sleep 60" }, { SANDBOX_TOKEN = S.TOKEN })
        assert.equal(124, r.exit)
        r = cli({ "--", "true" }, {})
        assert.equal(78, r.exit)
        assert.truthy(r.stderr:find("SANDBOX_TOKEN", 1, true))
        r = cli({ "--", "true" }, { SANDBOX_TOKEN = "wrong" })
        assert.equal(125, r.exit)
      end)
    end)
  end)

  it("a full fleet: the waits, then ExecCapacityError, with the health tracker's count untouched; nothing ran", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = dir, args = { "--max-instances", "1" } }
      core.go(function() executor(h, "busy"):exec("touch started; sleep 60") end)
      -- the event: the busy thread's command runs (its instance holds the one slot)
      assert.truthy(S.wait_for(function()
        local files = S.files(h, "busy") -- (walled: the instance's own file system)
        return files and core.fs.exists(files .. "/started")
      end, 30000), "the busy command never started")
      local tracker = health.new(executor(h, "late"), snap)
      local sentinel = errors.infra("an earlier failure")
      tracker.count, tracker.last_error = 1, sentinel
      local t0 = core.now_ms()
      local r, err = tracker:exec("touch ran")
      local took = core.now_ms() - t0
      assert.is_nil(r)
      assert.is_true(errors.is_capacity(err))
      assert.equal("sandbox fleet busy — no free per-thread sandbox after waiting 3s (the fleet's max_instances is reached); try again in a few minutes", err.message)
      assert.is_true(took >= 2900 and took < 30000, "took " .. took)
      assert.equal(1, tracker.count)
      assert.equal(sentinel, tracker.last_error)
      assert.is_false(core.fs.exists(workspace.path(h.root, "late")))
      -- /read and /write wait the same way (HTTP 503 fleet-busy)
      local _, ferr = executor(h, "late"):read_file("x")
      assert.is_true(errors.is_capacity(ferr))
      h:stop(); h:wait()
    end)
  end)

  it("a full fleet that frees a slot during the wait: the re-sent request runs and its result comes back", function()
    core.run(function()
      local patient = S.policy_dir(S.FAST .. "\nfleet_busy.max_wait_ms = 20 * second\n")
      local h = S.start_sandboxd{ policies = patient, args = { "--max-instances", "1" } }
      executor(h, "first"):exec("true") -- awake, then idle: it sleeps after 2 s
      local r = assert(executor(h, "second", { snap = assert(policies.load(patient)) }):exec("echo got-a-slot"))
      assert.equal("got-a-slot", r.text)
      h:stop(); h:wait()
    end)
  end)

  it("kill -9 of the server mid-command → ExecInfraError as soon as the connection drops, never a hang", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = dir }
      core.go(function()
        -- the event: the command runs on the server; then the server dies under it
        S.wait_for(function()
          local files = S.files(h, "T1") -- (walled: the instance's own file system)
          return files and core.fs.exists(files .. "/started")
        end, 30000)
        h:stop("KILL")
      end)
      local t0 = core.now_ms()
      local r, err = executor(h, "T1"):exec("touch started; sleep 30", { timeout_ms = 300000 })
      local took = core.now_ms() - t0
      assert.is_nil(r)
      assert.is_true(errors.is_infra(err))
      assert.truthy(err.message:find("sandboxd /exec request failed", 1, true), err.message)
      assert.is_true(took < 25000, "took " .. took) -- before the command (30 s) or the deadline ends
      h:wait()
    end)
  end)

  it("the hard stop drops the send at once, and sandboxd then kills the command it was running", function()
    core.run(function()
      -- --no-walls: the spec reads the command's pid from the host (no pid namespace between)
      local h = S.start_sandboxd{ policies = dir, args = { "--no-walls" } }
      local stop = core.signal()
      local ws = workspace.path(h.root, "stopped")
      -- The shell creates the file before echo writes to it: wait for the whole line.
      local function command_pid()
        local f = io.open(ws .. "/pid", "r")
        if not f then return nil end
        local line = f:read("a")
        f:close()
        return tonumber(line:match("^(%d+)\n"))
      end
      core.go(function()
        S.wait_for(command_pid, 30000)
        stop:abort("operator stop")
      end)
      local t0 = core.now_ms()
      local r = assert(executor(h, "stopped"):exec("echo $$ > pid; sleep 120; touch marker",
        { timeout_ms = 300000, signal = stop }))
      assert.is_true(core.now_ms() - t0 < 60000) -- at once, not after the command's 120 s
      assert.is_true(r.aborted)
      assert.truthy(r.text:find("[stopped: operator stop", 1, true), r.text)
      -- sandboxd kills the command's group: wait for that event, generously
      local pid = assert(command_pid(), "the command never wrote its pid")
      assert.truthy(S.wait_for(function() return not procs.alive(pid) end, 30000), "the command survived the stop")
      assert.is_false(core.fs.exists(ws .. "/marker"))
      h:stop(); h:wait()
    end)
  end)

  it("a restarted server (a replaced instance, docs/contract.md#failure-recycle): the thread's follow-up works on its kept workspace", function()
    core.run(function()
      local root = S.tmpdir()
      local h = S.start_sandboxd{ policies = dir, root = root }
      assert.equal("(no output)", executor(h, "T"):exec("echo x > marker.txt").text)
      h:stop(); h:wait()
      local h2 = S.start_sandboxd{ policies = dir, root = root }
      local r = assert(executor(h2, "T"):exec("cat marker.txt; echo follow-up"))
      assert.equal("x\nfollow-up", r.text)
      h2:stop(); h2:wait()
    end)
  end)

  it("a server that is gone is infra at once", function()
    core.run(function()
      -- --no-walls: a killed server has no walls to show; the walled start's proof is seconds
      local h = S.start_sandboxd{ policies = dir, args = { "--no-walls" } }
      h:stop("KILL"); h:wait()
      local _, err = executor(h):exec("true")
      assert.is_true(errors.is_infra(err))
    end)
  end)

  it("200 threads in parallel, nothing lost", function()
    core.run(function()
      -- on a busy machine 200 commands take longer than FAST's 2 s sleepAfter: the first
      -- workspaces must not sleep before the count at the end
      -- 200 instances must fit the host's file table (isolation fleet_files_percent): small walls
      local dir = require("support.policies").dir{
        timeouts = function(src) return src .. "\n" .. S.FAST .. 'sandbox.sleep_after = "60s"\n' end,
        -- network "none": no pasta per instance, so 200 starts measure the executor, not pasta's
        -- start-up (on a loaded host ~1-2 s each; walls_net_spec covers the network)
        -- and small workspaces: each image is reserved on the host's disk whole (200 × 2 GiB would not fit)
        isolation = function(src) return src .. "\npids_max = 32\nopen_files = 128\nnetwork = \"none\"\n"
          .. "workspace_max_bytes = 16 * MiB\n" end,
      }
      local h = S.start_sandboxd{ policies = dir, args = { "--max-instances", "200" } }
      local results, done = {}, 0
      local me = core.current()
      for i = 1, 200 do
        core.go(function()
          local key = "thread-" .. i
          local r, err = executor(h, key):exec("echo " .. i .. "; printf x >> f; cat f")
          results[i] = r and r.text or tostring(err)
          done = done + 1
          if done == 200 then core.wake(me) end
        end)
      end
      core.suspend()
      -- each thread ran in a workspace of its own: a shared one would show "xx" to a later
      -- thread (walled, every workspace is /workspace to its commands, so pwd cannot tell)
      for i = 1, 200 do assert.equal(i .. "\nx", results[i]) end
      h:stop(); h:wait()
    end)
  end)
end)

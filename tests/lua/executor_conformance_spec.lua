-- The executor conformance suite (docs/executors.md): the same cases against every backend —
-- null, local, sandbox (a real sandboxd on loopback), resident, e2b (the E2B stand-in, a real process
-- speaking E2B's protocols) and kubernetes (the Kubernetes API stand-in, pods of sandboxd --pod). A backend is one entry in BACKENDS:
--
--   name        the backend's name (ex.backend must say it, null says "local")
--   start()     brings up what it needs (inside core.run); stop() takes it down
--   make(key)   an executor for thread `key`
--   null        true: every tool call must be a legible tool error (an agent without a repo)
--   symlinks    the backend refuses a symlink that points out of the workspace
--   infra(t)    provokes a transport failure for thread key t → must be ExecInfraError
--   capacity(t) provokes a full fleet/account for thread key t → must be ExecCapacityError
--   processes   true: background processes and exposed ports (docs/sandboxd.md) — the backends
--               that can have them: start_process, processes, process_logs, kill_process,
--               expose_port, unexpose_port
--
-- resident: a real `switchboard resident` (--no-walls) with a local repository onboarded.
local core = require("switchboard.core")
local async = require("support.async")
local S = require("support.sandbox")
local E = require("support.e2b")
local errors = require("switchboard.exec.errors")

local FAST = S.FAST .. [[
e2b.sandbox_timeout_ms = 30 * second
e2b.api_timeout_ms = 30 * second -- a bound for a loaded machine: no case here waits it out
e2b.keepalive_ping_ms = 1 * second
e2b.stop_timeout_ms = 5 * second
call.margin_ms = 30 * second -- a cold instance's start (pasta: seconds on a loaded host) is inside budget + margin; no case here waits the margin out
]]
local snap, policy_dir = S.snapshot(FAST)
local function policy() return snap end

local BG = "sleep 30 & echo $! > bg.pid; "
local seq = 0
local function key(prefix)
  seq = seq + 1
  return ("%s-%d-%s"):format(prefix, seq, core.crypto.hex(core.crypto.random_bytes(3)))
end

-- Whether the background child is gone, asked inside the thread's own workspace (a walled
-- sandbox instance has a PID namespace of its own: its pids mean nothing on the host). A zombie
-- counts as gone.
local ALIVE = [[s=$(cat "/proc/$(cat bg.pid)/stat" 2>/dev/null); case "$s" in ""|*") Z "*) echo gone;; *) echo alive;; esac]]
local function bg_dead(ex)
  local raw = E.wait_for(function() return (ex:read_file("bg.pid") or ""):match("%d+\n") end, 30000)
  assert(raw, "bg.pid was never written")
  return E.wait_for(function()
    local r = ex:exec(ALIVE)
    return r and r.text == "gone"
  end, 20000)
end

---------------------------------------------------------------------------------------------
-- The backends

local BACKENDS = {}

BACKENDS[#BACKENDS + 1] = {
  name = "null", null = true,
  start = function() end, stop = function() end,
  make = function() return require("switchboard.exec.null").new{ agent = "general", policy = policy } end,
}

do
  local root
  BACKENDS[#BACKENDS + 1] = {
    name = "local", symlinks = true,
    start = function() root = S.tmpdir() end,
    stop = function() S.rm(root) end,
    make = function(k, resolve_envs)
      return require("switchboard.exec.local").new{ root = root, thread_key = k, policy = policy,
        resolve_envs = resolve_envs }
    end,
    -- a workspace root that cannot be created (a file stands where the directory would go)
    infra = function(k)
      local file = root .. "/not-a-dir"
      assert(io.open(file, "w")):close()
      return require("switchboard.exec.local").new{ root = file, thread_key = k, policy = policy }
    end,
  }
end

do
  local server
  local sandbox = require("switchboard.exec.sandbox")
  local function make_on(url, k, resolve_envs)
    return sandbox.new{ url = url, token = S.TOKEN, thread_key = k, policy = policy, resolve_envs = resolve_envs }
  end
  BACKENDS[#BACKENDS + 1] = {
    name = "sandbox", symlinks = true, processes = true,
    start = function()
      server = S.start_sandboxd{ policies = policy_dir }
    end,
    stop = function() server:stop(); server:wait() end,
    make = function(k, resolve_envs) return make_on(server.url, k, resolve_envs) end,
    -- nothing listens there any more
    infra = function(k)
      local gone = S.start_sandboxd{ policies = policy_dir }
      gone:stop(); gone:wait()
      return make_on(gone.url, k)
    end,
    -- a fleet of two instances (a sandboxd of its own) is full while two other threads run a
    -- command
    capacity = function(k)
      local small = S.start_sandboxd{ policies = policy_dir, args = { "--max-instances", "2" } }
      local stop = core.signal()
      local mark = "busy-" .. k
      for i = 1, 2 do
        local busy = make_on(small.url, k .. "-busy-" .. i)
        core.go(function() busy:exec("touch " .. mark .. "; sleep 30", { signal = stop }) end)
      end
      -- both commands run (each holds an instance) before the third thread asks; a walled
      -- workspace is a file system of the instance's own, reached through it (S.files)
      local running = E.wait_for(function()
        for i = 1, 2 do
          local files = S.files(small, k .. "-busy-" .. i)
          if not (files and core.fs.exists(files .. "/" .. mark)) then return false end
        end
        return true
      end, 60000) -- two cold instance starts (an image made, pasta) on a loaded machine
      assert(running, "the two busy commands did not start")
      return make_on(small.url, k), function()
        stop:abort("done")
        small:stop(); small:wait(); S.rm(small.root)
      end
    end,
  }
end

do
  local h, state
  BACKENDS[#BACKENDS + 1] = {
    name = "e2b",
    start = function() h, state = E.start(), S.tmpdir() end,
    stop = function() h:stop(); S.rm(state) end,
    -- the state directory is where a thread's sandbox id is remembered between executors
    make = function(k, resolve_envs)
      return E.executor(h, { policy = policy, thread_key = k, state_dir = state, resolve_envs = resolve_envs })
    end,
    -- the sandbox disappears under the thread
    infra = function(k)
      local ex = E.executor(h, { policy = policy, thread_key = k })
      assert(ex:exec("true"))
      h:vanish(ex:sandbox_id())
      return ex
    end,
    -- the account's sandbox limit (429 on create) for longer than the wait
    capacity = function(k)
      local f = {}
      for i = 1, 8 do f[i] = { on = "create", status = 429, body = { code = 429, message = "limit" } } end
      h:faults(f)
      return E.executor(h, { policy = policy, thread_key = k }), function()
        -- spend what the wait left over, so later creates are not refused
        for _ = 1, 8 do
          local ex = E.executor(h, { policy = policy, thread_key = k .. "-drain" })
          if ex:exec("true") then break end
        end
      end
    end,
  }
end

do
  -- kubernetes: the Kubernetes API stand-in (HTTPS, agent-sandbox's SandboxClaim status),
  -- whose pods are real `switchboard sandboxd --pod` processes
  local K = require("support.kube")
  local h
  BACKENDS[#BACKENDS + 1] = {
    name = "kubernetes", symlinks = true, processes = true,
    start = function() h = K.start{ policies = policy_dir, pool_size = 2 } end,
    stop = function() h.stop() end,
    make = function(k, resolve_envs)
      return K.executor(h, { policy = policy, thread_key = k, resolve_envs = resolve_envs })
    end,
    -- the thread's pod dies under it
    infra = function(k)
      local ex = K.executor(h, { policy = policy, thread_key = k })
      assert(ex:exec("true"))
      h:kill(require("switchboard.exec.kubernetes").claim_name(k))
      return ex
    end,
    -- the warm pool has no pod for longer than the wait
    capacity = function(k)
      h:pool(0)
      return K.executor(h, { policy = policy, thread_key = k }), function() h:pool(2) end
    end,
  }
end

do
  -- the resident: a real `switchboard resident` on loopback with a local repository onboarded
  local R = require("support.resident")
  local resident = require("switchboard.exec.resident")
  local base, server
  local function make_on(url, k, resolve_envs)
    return resident.new{ url = url, token = R.TOKEN, thread_key = k, repo = "acme/api", policy = policy,
      resolve_envs = resolve_envs }
  end
  BACKENDS[#BACKENDS + 1] = {
    name = "resident", symlinks = true,
    start = function()
      base = R.make_base()
      server = R.start(base, { policies = R.policy_dir() })
      assert(R.onboard(server, "acme/api") == "warm", "the resident did not onboard acme/api")
    end,
    stop = function() server.stop(); server.wait(); S.rm(server.root); S.rm(base) end,
    make = function(k, resolve_envs) return make_on(server.url, k, resolve_envs) end,
    -- nothing listens there any more: the attach before the first command fails
    infra = function(k)
      local gone = R.start(base, { policies = R.policy_dir() })
      gone.stop(); gone.wait(); S.rm(gone.root)
      return make_on(gone.url, k)
    end,
  }
end

---------------------------------------------------------------------------------------------
-- The cases

for _, b in ipairs(BACKENDS) do
  describe("executor conformance: " .. b.name, function()
    setup(function() core.run(b.start) end)
    teardown(function() core.run(b.stop) end)

    if b.null then
      it("every tool call is a legible tool error naming the wiring bug, never a crash", async(function()
        local ex = b.make(key("n"))
        for _, call in ipairs({
          function() return ex:exec("echo hi") end,
          function() return ex:read_file("a.txt") end,
          function() return ex:write_file("a.txt", "x") end,
        }) do
          local r, err = call()
          assert.is_nil(r)
          assert.is_true(errors.is_tool(err))
          assert.matches("declares no repository", tostring(err))
        end
      end))
      return
    end

    it("names its backend", function() assert.equal(b.name, b.make(key("b")).backend) end)

    it("exec: output, a nonzero exit as a result, (no output)", async(function()
      local ex = b.make(key("x"))
      local r = assert(ex:exec("echo hello"))
      assert.equal(0, r.exit_code)
      assert.equal("hello", r.text)
      r = assert(ex:exec("echo out; echo err >&2; exit 7"))
      assert.equal(7, r.exit_code)
      assert.equal("exit 7: out\nerr", r.text)
      r = assert(ex:exec("true"))
      assert.equal("(no output)", r.text)
    end))

    it("follow-ups in a thread share its workspace; other threads do not", async(function()
      local k = key("w")
      assert(b.make(k):exec("echo kept > marker"))
      -- a fresh executor object on the same thread (as a later process would make)
      assert.equal("kept", assert(b.make(k):exec("cat marker")).text)
      local other = assert(b.make(key("w2")):exec("cat marker"))
      assert.equal(1, other.exit_code)
    end))

    -- One behaviour in every backend (exec/preflight.lua): the resolver's failure is infra with
    -- its span code and itself as the cause, and the command does not start.
    it("credentials that cannot be resolved: infra keeping the resolver's code and cause; nothing runs", async(function()
      local k = key("cred")
      local _, cause = require("switchboard.github.app").fail("http 502", "GitHub answered HTTP 502 minting a token")
      local ex = b.make(k, function() return nil, cause end)
      local r, err = ex:exec("touch ran")
      assert.is_nil(r)
      assert.is_true(errors.is_infra(err), tostring(err))
      assert.equal("http 502", err.code)
      assert.equal(cause, err.cause)
      assert.equal("credentials for this command could not be resolved: GitHub answered HTTP 502 minting a token",
        tostring(err))
      assert.equal(1, assert(b.make(k):exec("test -e ran")).exit_code)
    end))

    if b.processes then
      it("background processes outlive the request that started them, are listed, logged and killed; ports are exposed", async(function()
        local ex = b.make(key("p"))
        local p = assert(ex:start_process("echo started; exec sleep 300"))
        assert.equal("running", p.status)
        assert.truthy(E.wait_for(function()
          local logs = ex:process_logs(p.id)
          return logs and logs.stdout == "started\n"
        end, 30000), "the process's output never showed")
        -- it runs on after the request (and after another command of the thread)
        assert.equal(0, assert(ex:exec("true")).exit_code)
        local list = assert(ex:processes())
        assert.equal(1, #list)
        assert.equal(p.id, list[1].id)
        assert.equal("running", list[1].status)
        -- the card's line at the ask's end, once (exec/process_notes.lua, exec/stack.lua take_notes)
        local function said()
          local out = {}
          for _, n in ipairs(ex:take_notes()) do if n:find("background", 1, true) then out[#out + 1] = n end end
          return out
        end
        assert.same({ ("▶ running in the background: `echo started; exec sleep 300` (%s) — it ends when the "
          .. "thread's sandbox sleeps"):format(p.id) }, said())
        assert.same({}, said())
        local url = assert(ex:expose_port(8799))
        assert.truthy(url:find("/ports/%x+/$"), url)
        assert.is_true(assert(ex:unexpose_port(8799)))
        local killed = assert(ex:kill_process(p.id))
        assert.equal("killed", killed.status)
        assert.same({}, said()) -- killed by process_kill: its call is on the card already
        local _, err = ex:kill_process("p0123456789ab")
        assert.is_true(errors.is_tool(err), tostring(err))
        _, err = ex:process_logs("../etc")
        assert.is_true(errors.is_tool(err))
      end))
    end

    it("files: write, read back, seen by commands; a missing file is a tool error", async(function()
      local ex = b.make(key("f"))
      local bytes = "two\nlines\0and a NUL\255"
      assert.is_true(ex:write_file("d/e/f.bin", bytes))
      assert.equal(bytes, ex:read_file("d/e/f.bin"))
      assert.equal(tostring(#bytes), assert(ex:exec("wc -c < d/e/f.bin")).text)
      assert(ex:exec("printf made-by-bash > g.txt"))
      assert.equal("made-by-bash", ex:read_file("g.txt"))
      local got, err = ex:read_file("missing.txt")
      assert.is_nil(got)
      assert.is_true(errors.is_tool(err))
    end))

    it("files: escapes are refused as tool errors", async(function()
      local ex = b.make(key("c"))
      assert(ex:exec("true"))
      for _, p in ipairs({ "../outside.txt", "/etc/passwd", "a/../../outside.txt" }) do
        local got, err = ex:read_file(p)
        assert.is_nil(got, p)
        assert.is_true(errors.is_tool(err), p)
        local ok, werr = ex:write_file(p, "x")
        assert.is_nil(ok, p)
        assert.is_true(errors.is_tool(werr), p)
      end
      if b.symlinks then
        assert(ex:exec("ln -s /etc/hostname out-link"))
        local got, err = ex:read_file("out-link")
        assert.is_nil(got)
        assert.is_true(errors.is_tool(err))
      end
    end))

    it("nothing the command leaves behind outlives its normal end", async(function()
      local ex = b.make(key("e"))
      local r = assert(ex:exec(BG .. "echo done"))
      assert.equal("done", r.text)
      assert.is_true(bg_dead(ex), "a background child outlived the command")
    end))

    it("a deadline kill is exit 124 with the line naming the limit, and the group is gone", async(function()
      local ex = b.make(key("d"))
      local t0 = core.now_ms()
      -- the limit only has to outlast bash writing bg.pid (seconds to spare on a loaded machine)
      local r = assert(ex:exec(BG .. "sleep 30", { timeout_ms = 5000 }))
      assert.is_true(core.now_ms() - t0 < 25000, "the deadline did not end the 30 s command")
      assert.equal(124, r.exit_code)
      assert.matches("^exit 124: ", r.text)
      assert.matches("5000 ms", r.text)
      assert.matches("timeoutMs", r.text)
      assert.is_true(bg_dead(ex), "a background child outlived the deadline")
    end))

    it("a hard stop kills the group at once and is never 124", async(function()
      local ex = b.make(key("s"))
      assert(ex:exec("true"))
      local stop, t_abort = core.signal(), nil
      -- the stop comes once the command has started its background child
      core.go(function()
        E.wait_for(function() return (ex:read_file("bg.pid") or ""):match("%d+\n") end, 60000)
        t_abort = core.now_ms()
        stop:abort("stopped by the conformance suite")
      end)
      local r = assert(ex:exec(BG .. "sleep 30", { signal = stop }))
      assert.truthy(t_abort, "the command ended before the stop")
      assert.is_true(core.now_ms() - t_abort < 15000, "the stop waited for the 30 s command")
      assert.is_true(r.aborted)
      assert.are_not.equal(124, r.exit_code)
      assert.matches("stopped by the conformance suite", r.text)
      assert.is_nil(r.text:find("timed out", 1, true))
      assert.is_true(bg_dead(ex), "a background child outlived the stop")
    end))

    if b.infra then
      it("a transport failure is ExecInfraError (not a result, not capacity)", async(function()
        local ex = b.infra(key("i"))
        local r, err = ex:exec("echo hi")
        assert.is_nil(r)
        assert.is_true(errors.is_infra(err), tostring(err))
        assert.is_false(errors.is_capacity(err))
        assert.is_true(errors.valid_code(err.code))
        assert.truthy(tostring(err):find("%S"))
      end))
    end

    if b.capacity then
      it("a full fleet after the bounded wait is ExecCapacityError, not infra", async(function()
        local ex, done = b.capacity(key("q"))
        local r, err = ex:exec("echo hi", { timeout_ms = 3000 })
        if done then done() end
        assert.is_nil(r)
        assert.is_true(errors.is_capacity(err), tostring(err))
        assert.is_false(errors.is_infra(err))
      end))
    end
  end)
end

teardown(function() S.cleanup() end)

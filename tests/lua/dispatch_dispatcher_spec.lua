-- The dispatcher (lua/switchboard/dispatch/dispatcher.lua) driving the real engine and the
-- real local executor: per-thread reuse, concurrency, hard stop, answers that list what is
-- possible, the card's elapsed refresh, the cut card's file, drain. Failure shapes a local
-- shell cannot produce (capacity, infra, a factory note) come from stand-in backends
-- through the factory's `backends` hook.
local core = require("switchboard.core")
local policy = require("switchboard.policy")
local dispatcher = require("switchboard.dispatch.dispatcher")
local errors = require("switchboard.exec.errors")
local local_executor = require("switchboard.exec.local")
local tracing = require("switchboard.exec.tracing")
local P = require("support.policies")

local function append(text)
  return function(src) return src .. "\n" .. text .. "\n" end
end

local files = require("support.files")
local procs = require("support.procs")
local tmpdir, read_file, alive = files.tmpdir, files.read, procs.alive

-- Runs fn as a task on the real engine; a test that would hang fails instead.
local function run(fn, limit_ms)
  local timed_out = false
  core.run(function()
    local done = core.signal()
    core.go(function()
      if core.sleep(limit_ms or 60000, done) then
        timed_out = true
        core.kill_all()
        core.stop()
      end
    end)
    local ok, err = pcall(fn)
    done:abort("done")
    if not ok then error(err, 0) end
  end)
  assert.is_false(timed_out, "the test ran out of time")
end

-- run(fn) with every core.log line recorded: → ok, err (run's), and the error field of the
-- last `event` logged (nil if none).
local function run_logging(event, fn)
  local logged, log = {}, core.log
  core.log = function(level, ev, fields)
    logged[#logged + 1] = { event = ev, fields = fields }
    return log(level, ev, fields)
  end
  local ok, err = pcall(run, fn)
  core.log = log
  local report
  for _, l in ipairs(logged) do
    if l.event == event then report = l.fields.error end
  end
  return ok, err, report
end

-- Waits on the loop until pred() holds (or fails after limit_ms).
local function eventually(pred, what, limit_ms)
  local t0 = core.now_ms()
  while not pred() do
    assert(core.now_ms() - t0 < (limit_ms or 10000), "timed out waiting for " .. what)
    core.sleep(20)
  end
end

-- A front that records every message.
local function recording_front()
  local f = { handles = {}, answers = {} }
  function f:post(thread, msg)
    local h = { thread = thread, msgs = { msg } }
    self.handles[#self.handles + 1] = h
    if msg.final then self.answers[#self.answers + 1] = { thread = thread, text = msg.text } end
    return h
  end
  function f:update(h, msg)
    assert(not h.final, "a final card was updated again")
    h.msgs[#h.msgs + 1] = msg
    if msg.final then h.final = msg.text end
  end
  -- The cards (handles that got a final update), in the order they were posted.
  function f:cards()
    local out = {}
    for _, h in ipairs(self.handles) do
      if #h.msgs > 1 or h.msgs[1].summary then out[#out + 1] = h end
    end
    return out
  end
  return f
end

local function last_answer(front) return front.answers[#front.answers].text end

describe("dispatcher", function()
  local root, outputs, front, d, snap

  local function make(opts)
    opts = opts or {}
    front = recording_front()
    d = dispatcher.new{
      front = front,
      policy = opts.policy or function() return snap end,
      -- the console's front: the dispatcher is exercised here, not the walls (unwalled by policy)
      stack = { workspace_root = root, backends = opts.backends, sink = opts.sink,
                credentials = opts.credentials, front = "console" },
      outputs_dir = outputs,
      model_client = opts.model_client or function() return nil, "no model credential (spec)" end,
      record = opts.record,
    }
    return d
  end

  local function ask(thread, text)
    return d:handle{ thread = thread, user = "ana", text = text }
  end

  before_each(function()
    core.log_format("text", "warn")
    policy.reset()
    policy.configure{ hash = P.hash, log = function() end }
    snap = assert(policy.load_initial("policies"))
    root, outputs = tmpdir(), tmpdir()
  end)

  after_each(function()
    os.execute("rm -rf '" .. root .. "' '" .. outputs .. "'")
    policy.reset()
    P.cleanup()
  end)

  it("reuses a thread's executor and workspace for follow-ups; threads are independent", function()
    make()
    run(function()
      local first = ask("main", "run `echo hi > marker.txt`")
      local second = ask("main", "run `cat marker.txt`")
      local other = ask("other", "run `cat marker.txt`")
      d:wait_idle()
      assert.equal("done", first.card.state)
      assert.equal(0, first.card.exit_code)
      assert.equal("hi", second.card.body)
      assert.equal(0, second.card.exit_code)
      assert.equal(1, other.card.exit_code)
      assert.matches("No such file", other.card.body)
      -- provisioned once per thread: the second ask found the first one's executor
      local built = d.threads.main.executors.coding
      assert.truthy(built)
      ask("main", "run `true`")
      d:wait_idle()
      assert.equal(built, d.threads.main.executors.coding)
      assert.not_equal(built, d.threads.other.executors.coding)
      -- another agent in the thread: the same workspace, an executor of its own (its own
      -- credential scope)
      local review = ask("main", "agent:review run `cat marker.txt`")
      d:wait_idle()
      assert.equal("hi", review.card.body)
      assert.truthy(d.threads.main.executors.review)
      assert.not_equal(built, d.threads.main.executors.review)
    end)
    local cards = front:cards()
    assert.matches("^%[main%] agent:coding · local\nnote: local executor: unwalled — commands run as this host's user %(policies/isolation.lua local_walls%)\n%$ cat marker.txt\n✓ exit 0 after [%d.]+s\nhi$", cards[2].final)
  end)

  it("runs two threads at the same time", function()
    make()
    local dir = tmpdir()
    run(function()
      -- a waits (up to 10 s) for b to have run: it can only succeed if b runs meanwhile
      local a = ask("a", ("run `for i in $(seq 200); do [ -f %s/b ] && echo saw-b && exit 0; sleep 0.05; done; exit 7`"):format(dir))
      local b = ask("b", ("run `touch %s/b`"):format(dir))
      d:wait_idle()
      assert.equal(0, b.card.exit_code)
      assert.equal(0, a.card.exit_code)
      assert.equal("saw-b", a.card.body)
    end)
    os.execute("rm -rf '" .. dir .. "'")
  end)

  it("stop kills the running command's process group at once, drops the queue, releases with always", function()
    local releases, built_count = {}, 0
    local backends = {
      ["local"] = function(opts, ctx)
        built_count = built_count + 1
        local ex = local_executor.new{ root = opts.workspace_root, thread_key = ctx.thread_key, policy = opts.policy }
        local release = ex.release
        ex.release = function(self, mode)
          releases[#releases + 1] = mode
          return release(self, mode)
        end
        return ex
      end,
    }
    make{ backends = backends }
    local ws
    run(function()
      local long = ask("main", "run `sleep 60 & echo $! > bg; echo $$ > pid; wait`")
      local queued = ask("main", "run `echo never`")
      eventually(function()
        for _, name in ipairs(core.fs.list(root) or {}) do
          local bg = read_file(root .. "/" .. name .. "/bg")
          if bg and bg:find("%d\n") then ws = root .. "/" .. name; return true end
        end
      end, "the command to start")
      -- a file the shell is still writing can be read empty: wait for the whole number
      eventually(function() return (read_file(ws .. "/pid") or ""):find("%d\n") end, "the pid file")
      local t0 = core.now_ms()
      ask("main", "stop")
      d:wait_idle()
      -- at once: well under the command's 60 s, with room for a loaded machine
      assert.is_true(core.now_ms() - t0 < 30000, "stop took " .. (core.now_ms() - t0) .. " ms")
      assert.equal("stopped", long.card.state)
      assert.matches("■ stopped after [%d.]+s — the command's process group was killed; the executor was released",
        front:cards()[1].final)
      assert.matches("stop asked in this thread by ana", long.card.body)
      assert.equal("cancelled", queued.card.state)
      assert.matches("■ not run — stop asked in this thread by ana", front:cards()[2].final)
      assert.same({ "always" }, releases)
      assert.is_nil(d.threads.main.executors.coding)
      -- the follow-up provisions again, in the same workspace
      local after = ask("main", "run `cat pid`")
      d:wait_idle()
      assert.equal(2, built_count)
      assert.equal(0, after.card.exit_code)
      -- the group was sent KILL and its leader reaped; the background job ends when it next
      -- runs, which on a loaded machine is a while later: waited for
      eventually(function()
        return not alive(tonumber(read_file(ws .. "/pid"))) and not alive(tonumber(read_file(ws .. "/bg")))
      end, "the stopped group to be gone", 30000)
    end)
    local leader = tonumber(read_file(ws .. "/pid"))
    local background = tonumber(read_file(ws .. "/bg"))
    assert.is_false(alive(leader), "the shell survived the stop")
    assert.is_false(alive(background), "the background job survived the stop")
  end)

  -- A stop that arrives while the thread's executor is being provisioned: the one lifecycle
  -- re-checks it after provisioning for every kind of run. The backend is a stand-in through
  -- the factory's hook because a local workspace is provisioned at once: this one waits until
  -- the spec has sent the stop, as a sandbox's provisioning waits on its fleet. The model is
  -- the loopback stand-in speaking the Messages API (tests/lua/support/model.lua).
  for _, case in ipairs({ { "an agent run", "agent:coding look at the tests" }, { "a command", "run `ls`" } }) do
    it("a stop during provisioning of " .. case[1] .. ": no command runs, the executor is released", function()
      local model = require("support.model")
      local client = require("switchboard.agent.client")
      local provisioning, provisioned = core.signal(), core.signal()
      local commands, releases = {}, {}
      local backends = {
        ["local"] = function()
          provisioning:abort("provisioning")
          core.sleep(60000, provisioned) -- until the spec has stopped the thread
          local ex = { backend = "sandbox" }
          function ex.exec(_, cmd) commands[#commands + 1] = cmd; return { exit_code = 0, text = "ran" } end
          function ex.read_file() commands[#commands + 1] = "read_file"; return nil, errors.tool("no file") end
          function ex.write_file() commands[#commands + 1] = "write_file"; return true end
          function ex.release(_, mode) releases[#releases + 1] = mode; return true end
          return ex, "sandbox"
        end,
      }
      local m, a, requests
      run(function()
        m = model.start()
        m:script{ { content = { { type = "tool_use", name = "bash", input = { command = "echo ran" } } } },
                  { content = { { type = "text", text = "done" } } } }
        make{ backends = backends,
              model_client = function(s) return client.new{ api_key = m.key, base_url = m.url, settings = s.agents.model_api } end }
        a = ask("main", case[2])
        core.sleep(60000, provisioning)
        assert.equal(1, d:stop("main", "stop asked in this thread by ana"))
        provisioned:abort("go on")
        d:wait_idle()
        requests = #m:requests()
        m.stop()
      end)
      assert.same({}, commands)
      assert.equal(0, requests, "the model was asked")
      assert.same({ "always" }, releases)
      assert.equal("cancelled", a.card.state)
      assert.equal("stop asked in this thread by ana", a.card.reason)
    end)
  end

  -- A bug under an agent's tool call (here a backend that raises) is caught once, by the
  -- dispatcher's run lifecycle: not turned into a tool result on the way, its traceback kept
  -- in the log down to where it was raised; the card says internal error and the thread goes on.
  it("a raise in an agent's tool call reaches the run's one catch with its traceback", function()
    local model = require("support.model")
    local client = require("switchboard.agent.client")
    local backends = {
      ["local"] = function()
        local ex = { backend = "sandbox" }
        function ex.exec(_, cmd)
          if cmd == "planted" then error("the planted tool bug") end
          return { exit_code = 0, text = "ran " .. cmd }
        end
        function ex.read_file() return nil, errors.tool("no file") end
        function ex.write_file() return true end
        return ex, "sandbox"
      end,
    }
    local m, a, b, requests
    local ok, err, report = run_logging("dispatch.internal_error", function()
      m = model.start()
      m:script{ { content = { { type = "tool_use", name = "bash", input = { command = "planted" } } } },
                { content = { { type = "text", text = "the model went on" } } } }
      make{ backends = backends,
            model_client = function(s) return client.new{ api_key = m.key, base_url = m.url, settings = s.agents.model_api } end }
      a = ask("main", "agent:coding try the planted thing")
      b = ask("main", "run `echo after`")
      d:wait_idle()
      requests = #m:requests()
      m.stop()
    end)
    assert.is_true(ok, tostring(err))
    assert.equal(1, requests, "the bug went back to the model as a tool result; the run ended " .. tostring(a.card.state))
    assert.equal("model_error", a.card.state)
    assert.matches("^internal error in the agent run: .*the planted tool bug", a.card.problem)
    assert(report, "no dispatch.internal_error in the log")
    assert.matches("dispatch_dispatcher_spec.lua:%d+: the planted tool bug", report)
    assert.matches("stack traceback:", report, 1, true)
    assert.matches("switchboard/agent/tools.lua:%d+", report)
    assert.equal("done", b.card.state)
    assert.equal("ran echo after", b.card.body)
  end)

  -- Two reads in one answer run at the same time, each in a task of its own (agent/run.lua
  -- run_together, core.join): a raise in one still reaches the run's one catch with the
  -- traceback of the task it was raised in, once both reads have ended.
  it("a raise in one of two reads run at once reaches the run's one catch with its task's traceback", function()
    local model = require("support.model")
    local client = require("switchboard.agent.client")
    local reads = 0
    local backends = {
      ["local"] = function()
        local ex = { backend = "sandbox" }
        function ex.exec(_, cmd) return { exit_code = 0, text = "ran " .. cmd } end
        function ex.read_file(_, path)
          reads = reads + 1
          if path == "planted.txt" then error("the planted read bug") end
          return "text of " .. path
        end
        function ex.write_file() return true end
        return ex, "sandbox"
      end,
    }
    local m, a, requests
    local ok, err, report = run_logging("dispatch.internal_error", function()
      m = model.start()
      m:script{ { content = { { type = "tool_use", name = "read_file", input = { path = "planted.txt" } },
                              { type = "tool_use", name = "read_file", input = { path = "fine.txt" } } } },
                { content = { { type = "text", text = "the model went on" } } } }
      make{ backends = backends,
            model_client = function(s) return client.new{ api_key = m.key, base_url = m.url, settings = s.agents.model_api } end }
      a = ask("main", "agent:coding read both")
      d:wait_idle()
      requests = #m:requests()
      m.stop()
    end)
    assert.is_true(ok, tostring(err))
    assert.equal(2, reads, "both reads ran")
    assert.equal(1, requests, "the bug went back to the model as a tool result")
    assert.equal("model_error", a.card.state)
    assert.matches("the planted read bug", a.card.problem)
    assert(report, "no dispatch.internal_error in the log")
    assert.matches("dispatch_dispatcher_spec.lua:%d+: the planted read bug", report)
    assert.matches("stack traceback:", report, 1, true)
    assert.matches("switchboard/agent/tools.lua:%d+", report)
  end)

  -- A release is not a run's part, so its raise is caught where it is called; the log keeps
  -- where it was raised, as for every other bug (an operator's report must carry a location).
  it("a release that raises is logged with its traceback; the thread goes on", function()
    local provisioning, provisioned = core.signal(), core.signal()
    local backends = {
      ["local"] = function()
        provisioning:abort("provisioning")
        core.sleep(60000, provisioned) -- until the spec has stopped the thread
        local ex = { backend = "sandbox" }
        function ex.exec(_, cmd) return { exit_code = 0, text = "ran " .. cmd } end
        function ex.release() error("the planted release bug") end
        return ex, "sandbox"
      end,
    }
    local a, b
    local ok, err, report = run_logging("dispatch.release_failed", function()
      make{ backends = backends }
      a = ask("main", "run `ls`")
      core.sleep(60000, provisioning)
      assert.equal(1, d:stop("main", "stop asked in this thread by ana"))
      provisioned:abort("go on")
      d:wait_idle()
      b = ask("main", "run `echo after`")
      d:wait_idle()
    end)
    assert.is_true(ok, tostring(err))
    assert.equal("cancelled", a.card.state)
    assert(report, "no dispatch.release_failed in the log")
    assert.matches("dispatch_dispatcher_spec.lua:%d+: the planted release bug", report)
    assert.matches("stack traceback:", report, 1, true)
    assert.equal("done", b.card.state)
    assert.equal("ran echo after", b.card.body)
  end)

  it("answers a stop with nothing running", function()
    make()
    run(function() ask("main", "stop") end)
    assert.equal("Nothing is running in this thread; there is nothing to stop.", last_answer(front))
  end)

  it("answers an unknown agent with the agents and their descriptions, and the grammar", function()
    make()
    run(function() assert.is_nil(ask("main", "agent:nobody run `ls`")) end)
    local text = last_answer(front)
    assert.matches('^There is no agent "nobody"%.\nAsk like this:\n', text)
    assert.matches("agent:NAME run `COMMAND` in OWNER/REPO", text)
    for _, name in ipairs(policy.agent_names(snap)) do
      assert.truthy(text:find("\n  " .. name .. " ", 1, true), "missing agent " .. name)
      assert.truthy(text:find(policy.agent(snap, name).description, 1, true))
    end
    assert.matches("coding +[^\n]*%(default, works in a repository%)", text)
    assert.matches("general +[^\n]*%(no repository%)", text)
    assert.same({}, front:cards())
  end)

  -- The spend caps' totals live in the thread's record: a restarted bot (a new dispatcher on
  -- the same file) still knows what the thread and the workspace's day have spent.
  it("keeps the per-thread and per-day spend across a restart through the thread's record", function()
    local record = require("switchboard.store.record")
    local client = require("switchboard.agent.client")
    local spend = require("switchboard.agent.spend")
    local model = require("support.model")
    -- 100,000 fresh input tokens: $0.30 at the shipped price of claude-sonnet-4-5
    local BIG = { input_tokens = 100000, output_tokens = 0, cache_read_input_tokens = 0, cache_creation_input_tokens = 0 }
    snap = assert(P.load(P.dir{ agents = append("spend.per_thread_usd = 0.5\nspend.per_day_usd = 100") }))
    local path, m = root .. "/record.db", nil
    local function with_model() return client.new{ api_key = m.key, base_url = m.url, settings = snap.agents.model_api } end
    local first, second, other, sent_before, sent_after, restored
    run(function()
      m = model.start()
      m:script{ { content = { { type = "tool_use", name = "bash", input = { command = "echo 1" } } }, usage = BIG },
                { content = { { type = "text", text = "done" } }, usage = BIG },
                { content = { { type = "text", text = "other thread" } } } }
      local rec = assert(record.open(path))
      make{ record = rec, model_client = with_model }
      assert(d:restore())
      first = ask("T1/C1/1.0", "agent:coding spend some")
      d:wait_idle()
      rec:close()
      sent_before = #m:requests()
      -- the restart: a new dispatcher on the same file
      local again = assert(record.open(path))
      make{ record = again, model_client = with_model }
      assert(d:restore())
      restored = { thread = d.accounts:spent("thread", "T1/C1/1.0"),
                   day = d.accounts:spent("day", spend.day_key("T1", os.time())) }
      second = ask("T1/C1/1.0", "agent:coding spend more")
      other = ask("T1/C2/2.0", "agent:coding another thread of the workspace")
      d:wait_idle()
      sent_after = #m:requests()
      again:close()
      m.stop()
    end, 120000)
    assert.equal("done", first.card.state)
    assert.equal(2, sent_before)
    assert.near(0.6, restored.thread, 1e-9)
    assert.near(0.6, restored.day, 1e-9)
    -- the thread's cap holds after the restart: refused before any request
    assert.equal("spend", second.card.state)
    assert.matches("the spend cap of $0.50 per thread is reached", second.card.problem, 1, true)
    assert.matches("this thread has spent $0.60", second.card.problem, 1, true)
    -- another thread of the same workspace is under its caps
    assert.equal("done", other.card.state)
    assert.equal(3, sent_after)
  end)

  it("answers a malformed ask with what is possible; free text is an agent run", function()
    make()
    local run_ask
    run(function()
      ask("main", "run ls")
      run_ask = ask("main", "what is going on?")
      ask("main", "help")
      d:wait_idle()
    end)
    assert.matches("^I could not read that ask: put the command in backticks: run `ls`%.\nAsk like this:", front.answers[1].text)
    assert.matches("^Ask like this:\n", front.answers[2].text)
    assert.matches("\nAgents:\n", front.answers[2].text)
    assert.equal("agent", run_ask.kind)
    assert.equal("no_key", run_ask.card.state)
    assert.matches("^%[main%] agent:coding\n> what is going on%?\n✗ not run — no model credential\nno model credential %(spec%)$",
      front:cards()[1].final)
  end)

  it("answers a repository an agent cannot use, and a second repository in one thread", function()
    make()
    run(function()
      assert.is_nil(ask("main", "agent:general run `ls` in acme/api"))
      assert.matches("^agent:general works without a repository, so it cannot run in acme/api; "
        .. "agents that work in a repository: coding, review%.\nAsk like this:", last_answer(front))
      local first = ask("main", "run `true` in acme/api")
      assert.equal("acme/api", first.card.repo)
      assert.is_nil(ask("main", "run `true` in acme/web")) -- refused while the first is queued
      assert.matches("^This thread works in acme/api; start another thread for acme/web%.", last_answer(front))
      d:wait_idle()
      assert.is_nil(ask("main", "run `true` in acme/web"))
      assert.matches("^This thread works in acme/api; start another thread for acme/web%.", last_answer(front))
      local follow = ask("main", "agent:review run `true`")
      assert.equal("acme/api", follow.card.repo) -- the thread's repository carries over
      d:wait_idle()
    end)
  end)

  it("gives an agent without a repository the null executor's legible error, provisioning nothing", function()
    make()
    run(function()
      local a = ask("main", "agent:general run `ls`")
      d:wait_idle()
      assert.equal("refused", a.card.state)
    end)
    local text = front:cards()[1].final
    assert.matches("^%[main%] agent:general · local\n%$ ls\n✗ not run\ntool bash needs a workspace, "
      .. "but agent general declares no repository — a wiring bug", text)
    assert.same({}, core.fs.list(root) or {}) -- no workspace was created
  end)

  it("says once, on the card, that an agent with a token scope gets no credential", function()
    local asked = 0
    local creds = {
      resolve_envs = function() return {} end,
      notice = function(self)
        asked = asked + 1
        if self.said then return nil end
        self.said = true
        return "no GitHub credential: commands get no token"
      end,
    }
    make{ credentials = creds }
    run(function()
      ask("main", "run `true`")
      ask("main", "agent:general run `true`")
      ask("other", "run `true`")
      d:wait_idle()
    end)
    local cards = front:cards()
    assert.matches("note: no GitHub credential: commands get no token", cards[1].final, 1, true)
    for i = 2, #cards do
      assert.is_nil(cards[i].final:find("no GitHub credential", 1, true), cards[i].final)
    end
    assert.are.equal(2, asked, "asked for the coding asks only (general has no token scope)")
  end)

  it("shows the factory's note, reads capacity as ⏳ fleet busy and infra as a sandbox failure", function()
    local answers = {
      function() return nil, errors.capacity("sandbox fleet busy — no free per-thread sandbox after waiting 300s (the fleet's max_instances is reached); try again in a few minutes", 300000) end,
      function() return nil, errors.infra("sandbox worker /exec gave no answer within 330s") end,
      function() return nil, errors.infra("sandbox unreachable: connection refused") end,
      function(cmd) return { exit_code = 0, text = "ran " .. cmd } end,
    }
    local calls, builds, releases = 0, 0, {}
    local backends = {
      ["local"] = function()
        builds = builds + 1
        local ex = { backend = "sandbox" }
        function ex.exec(_, cmd, o)
          calls = calls + 1
          return answers[calls](cmd, o)
        end
        function ex.read_file() end
        function ex.write_file() end
        function ex.release(_, mode) releases[#releases + 1] = mode; return true end
        return ex, "sandbox", "resident unavailable (not provided by this build) — using fresh sandbox"
      end,
    }
    make{ backends = backends }
    run(function()
      local busy = ask("main", "run `make`")
      local infra1 = ask("main", "run `make`")
      local infra2 = ask("main", "run `make`")
      local ok = ask("main", "run `make`")
      d:wait_idle()
      assert.equal("busy", busy.card.state)
      assert.equal("infra", infra1.card.state)
      assert.equal("infra", infra2.card.state)
      assert.equal("done", ok.card.state)
    end)
    local cards = front:cards()
    assert.matches("^%[main%] agent:coding · sandbox\nnote: resident unavailable %(not provided by this build%) — using fresh sandbox\n", cards[1].final)
    assert.matches("\n⏳ Sandbox fleet busy — no free per%-thread sandbox after waiting 300s %(the fleet's max_instances is reached%); try again in a few minutes$", cards[1].final)
    assert.matches("\n✗ sandbox failure after [%d.]+s — infrastructure, not the command's exit status\nsandbox worker /exec gave no answer within 330s$", cards[2].final)
    -- the second infra failure in a row (capacity does not count) trips the tracker: the
    -- executor is released and the next ask provisions a fresh one
    assert.matches("\nnote: the executor failed 2 times in a row; the next ask provisions a fresh one\n", cards[3].final)
    assert.same({ "always" }, releases)
    assert.equal(2, builds)
    assert.matches("\n✓ exit 0", cards[4].final)
  end)

  it("hands the command the run's remaining wall clock from the agent's max_run_minutes", function()
    snap = assert(P.load(P.dir{ agents = append("agents.coding.max_run_minutes = 2") }))
    make()
    run(function()
      local a = ask("main", "run `echo clipped`")
      d:wait_idle()
      assert.equal(0, a.card.exit_code)
      assert.matches("^clipped\n%[timeout clipped to %d+s: the run has %d+s left and keeps 60s in reserve%]$", a.card.body)
    end)
    -- 2 min with a 119.5 s reserve: less than the 1 s floor is left, so nothing may start
    snap = assert(P.load(P.dir{ agents = append("agents.coding.max_run_minutes = 2"),
                                timeouts = append("run.reserve_ms = 119500") }))
    run(function()
      local a = ask("main", "run `echo never`")
      d:wait_idle()
      assert.equal("refused", a.card.state)
      assert.matches("^exit 124: run budget exhausted", a.card.body)
    end)
  end)

  it("refreshes the elapsed time while running, at most once a second even when asked more often", function()
    snap = assert(P.load(P.dir{ timeouts = append("console.refresh_ms = 100") }))
    make()
    local a
    run(function()
      a = ask("main", "run `sleep 2.5`")
      d:wait_idle()
    end)
    local running = {}
    for _, m in ipairs(front:cards()[1].msgs) do
      local s = m.text:match("\n… running (%d+)s$")
      if s then running[#running + 1] = tonumber(s) end
    end
    -- 0, 1, 2 (each shown once): 25 ticks, at most one change a second
    assert.same({ 0, 1, 2 }, running)
    assert.equal("done", a.card.state)
  end)

  it("keeps the whole output of a cut card in a file under the outputs directory", function()
    make()
    run(function()
      ask("main", "run `seq 1 20000`")
      d:wait_idle()
    end)
    local text = front:cards()[1].final
    assert.is_true(#text <= snap.timeouts.card.max_chars, "card is " .. #text .. " bytes")
    local path = text:match("the whole output is in (%S+)%] …")
    assert.truthy(path, "no file named on the card")
    assert.equal(outputs, path:sub(1, #outputs))
    local whole = assert(read_file(path))
    local lines = {}
    for i = 1, 20000 do lines[i] = tostring(i) end
    assert.equal("$ seq 1 20000\n" .. table.concat(lines, "\n") .. "\n", whole)
  end)

  it("new asks see a reloaded policy; an ask in flight keeps the snapshot it captured", function()
    local old = snap
    local new = assert(P.load(P.dir{ agents = append('default_agent = "general"') }))
    make{ policy = function() return snap end }
    run(function()
      local before = ask("main", "run `sleep 0.3; echo old`")
      snap = new -- what a SIGHUP reload does: swap the reference
      local after = ask("other", "run `echo new`")
      d:wait_idle()
      assert.equal("coding", before.card.agent)
      assert.equal(old, before.snap)
      assert.equal("old", before.card.body)
      assert.equal("general", after.card.agent)
      assert.equal("refused", after.card.state)
    end)
  end)

  it("reads the policy once per ask: provisioning and the executor keep the snapshot the ask arrived with", function()
    local old = snap
    local new = assert(P.load(P.dir{ errors = function(src)
      return (src:gsub('no_output = "%(no output%)"', 'no_output = "(nothing, new policy)"'))
    end }))
    local reads = 0
    make{ policy = function() reads = reads + 1; return snap end }
    run(function()
      local first = ask("main", "run `sleep 0.3`")
      local queued = ask("main", "run `true`") -- arrives under the old policy, starts under the new
      snap = new
      d:wait_idle()
      assert.equal("(no output)", first.card.body)
      assert.equal(old, queued.snap)
      assert.equal("(no output)", queued.card.body)
      local later = ask("main", "run `true`")
      d:wait_idle()
      assert.equal("(nothing, new policy)", later.card.body)
    end)
    assert.equal(3, reads) -- one read per message, none at provisioning or command start
  end)

  it("drain lets a running ask finish inside the grace and takes nothing new", function()
    make()
    run(function()
      local a = ask("main", "run `sleep 0.5; echo finished`")
      local queued = ask("main", "run `echo never`")
      eventually(function() return a.card.state == "running" end, "the command to run")
      assert.is_true(d:drain(10000))
      assert.equal("finished", a.card.body)
      assert.equal("cancelled", queued.card.state)
      assert.is_nil(ask("main", "run `echo late`"))
      assert.matches("shutting down", last_answer(front))
    end)
  end)

  it("drain kills what outlives the grace, and the card says stopped", function()
    make()
    run(function()
      local a = ask("main", "run `sleep 60`")
      eventually(function() return a.card.state == "running" end, "the command to run")
      local t0 = core.now_ms()
      assert.is_false(d:drain(300))
      assert.is_true(core.now_ms() - t0 < 30000) -- well under the command's 60 s
      assert.equal("stopped", a.card.state)
      assert.matches("drain time ran out", a.card.body)
    end)
  end)

  it("an executor that raises is an infra failure on the card, and the thread goes on", function()
    local n = 0
    local backends = {
      ["local"] = function()
        local ex = { backend = "local" }
        function ex.exec()
          n = n + 1
          if n == 1 then error("boom") end
          return { exit_code = 0, text = "fine" }
        end
        function ex.read_file() end
        function ex.write_file() end
        return ex
      end,
    }
    local sink = tracing.memory_sink()
    make{ backends = backends, sink = sink }
    run(function()
      local a = ask("main", "run `x`")
      local b = ask("main", "run `y`")
      d:wait_idle()
      assert.equal("infra", a.card.state)
      assert.matches("the executor raised: .*boom", a.card.body)
      assert.equal("fine", b.card.body)
    end)
    -- the executor is the traced one: one exec.exec span per command
    local names = {}
    for _, r in ipairs(sink.records) do names[#names + 1] = r.name end
    assert.same({ "exec.exec", "exec.exec" }, names)
  end)
end)

-- The e2b backend under the dispatcher (docs/contract.md#hard-stop, #e2b): a thread's asks
-- share one E2B sandbox; a hard stop kills the command's group at once, and the dispatcher's
-- release("always") deletes the sandbox, so the next ask starts a fresh one. Against the E2B
-- stand-in.
local core = require("switchboard.core")
local policy = require("switchboard.policy")
local dispatcher = require("switchboard.dispatch.dispatcher")
local async = require("support.async")
local E = require("support.e2b")
local S = require("support.sandbox")
local procs = require("support.procs")

local function front()
  local f = { handles = {} }
  function f:post(thread, msg) local h = { msgs = { msg } }; self.handles[#self.handles + 1] = h; return h end
  function f:update(h, msg) h.msgs[#h.msgs + 1] = msg; if msg.final then h.final = msg.text end end
  return f
end

describe("the dispatcher on the e2b backend", function()
  local h, dir

  setup(function()
    core.run(function() h = E.start() end)
    dir = S.policy_dir(S.FAST)
  end)
  teardown(function()
    core.run(function() h:stop() end)
    S.cleanup()
  end)

  it("shares the thread's sandbox between asks; stop kills the group and deletes the sandbox", async(function()
    core.log_format("text", "warn")
    policy.reset()
    assert(policy.load_initial(dir))
    local f = front()
    local d = dispatcher.new{
      front = f, policy = policy.current, outputs_dir = S.tmpdir(),
      stack = { force_backend = "e2b", getenv = h:getenv(), workspace_root = "/nonexistent" },
    }
    local function ask(text) return d:handle{ thread = "main", user = "ana", text = text } end
    local first = ask("run `echo kept > marker`")
    local second = ask("run `cat marker`")
    d:wait_idle()
    assert.equal(0, first.card.exit_code)
    assert.equal("kept", second.card.body)
    local ex = d.threads.main.executors.coding
    assert.truthy(ex)
    assert.equal("e2b", ex.backend)
    local sandboxes = h.sandboxes()
    local id = sandboxes[#sandboxes].id

    local long = ask("run `sleep 60 & echo $! > bg; wait`")
    local bgfile = h:sandbox(id).root .. "/home/user/bg"
    local bg = E.wait_for(function()
      local fh = io.open(bgfile); if not fh then return nil end
      local s = fh:read("a"); fh:close(); return tonumber(s:match("%d+"))
    end, 60000) -- a bound for a loaded machine: the file ends the wait
    assert.truthy(bg, "the command did not start")
    local t0 = core.now_ms()
    ask("stop")
    d:wait_idle()
    assert.is_true(core.now_ms() - t0 < 30000, "the stop waited for the command (60 s)")
    assert.equal("stopped", long.card.state)
    local said
    for _, note in ipairs(long.card.notes) do said = said or note:find("workspace not kept: the thread's E2B sandbox", 1, true) end
    assert.truthy(said, "the stopped card did not say the workspace went: " .. table.concat(long.card.notes, " | "))
    assert.is_true(E.wait_for(function() return not procs.alive(bg) end, 30000), "the background job survived the stop")
    assert.is_false(h:sandbox(id).alive, "release(\"always\") did not delete the sandbox")
    local after = ask("run `cat marker`")
    d:wait_idle()
    assert.equal(1, after.card.exit_code)
    policy.reset()
  end))

  it("a thread's sandbox sleeps paused and its next ask resumes it; one E2B lost, the card says so", async(function()
    core.log_format("text", "warn")
    policy.reset()
    assert(policy.load_initial(S.policy_dir(S.FAST .. "\ne2b.sandbox_timeout_ms = 2 * second\nbash.default_ms = 3 * second\n")))
    local f = front()
    local d = dispatcher.new{
      front = f, policy = policy.current, outputs_dir = S.tmpdir(),
      stack = { force_backend = "e2b", getenv = h:getenv(), workspace_root = "/nonexistent" },
    }
    local function ask(text) return d:handle{ thread = "sleepy", user = "ana", text = text } end
    ask("run `echo kept > marker`")
    d:wait_idle()
    local sandboxes = h.sandboxes()
    local id = sandboxes[#sandboxes].id
    assert.is_true(E.wait_for(function() return h:sandbox(id).paused end, 60000), "the idle sandbox was not paused")
    local resumed = ask("run `cat marker`")
    d:wait_idle()
    -- resumed for the command's budget + margin (4 s), by E2B's clock and by the executor's
    local resumed_by = core.now_ms()
    assert.equal("kept", resumed.card.body)
    for _, note in ipairs(resumed.card.notes) do assert.is_nil(note:find("not kept", 1, true)) end
    assert.is_true(E.wait_for(function() return h:sandbox(id).paused end, 60000), "the resumed sandbox did not sleep again")
    h:expire(id) -- E2B's retention of paused sandboxes ran out
    assert.is_true(E.wait_for(function() return core.now_ms() >= resumed_by + 5000 end, 30000))
    local lost = ask("run `cat marker`")
    d:wait_idle()
    assert.equal(1, lost.card.exit_code, tostring(lost.card.state) .. ": " .. tostring(lost.card.body))
    local said
    for _, note in ipairs(lost.card.notes) do said = said or note:find("workspace not kept", 1, true) end
    assert.truthy(said, "the card did not say the workspace was lost: " .. table.concat(lost.card.notes, " | "))
    policy.reset()
  end))
end)

-- Black-box: `switchboard sandboxd --pod`, the mode for a pod that is itself the wall (a
-- Kubernetes agent-sandbox pod under gVisor or Kata; docs/sandboxd.md "Pod mode"): told
-- explicitly, reported on /healthz, one thread per pod, no idle sleep of its own.
local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")
local async = require("support.async")

-- sleep_after 1s: a walled sandboxd would put the idle instance to sleep within the test; the
-- pod must not (its release is the claim's)
local policies = S.policy_dir('sandbox.sleep_after = "1s"')

local function exec(h, key, command)
  local status, _, body = S.call(h.url, "/exec", { thread = key, body = { command = command, env = {} } })
  return status, body and body ~= "" and cjson.decode(body) or nil
end

describe("sandboxd --pod", function()
  after_each(function() S.cleanup_servers() end)

  it("says so on /healthz, serves its one thread, refuses another", async(function()
    local h = S.start_sandboxd{ policies = policies, args = { "--pod" } }
    local status, _, body = S.call(h.url, "/healthz", { thread = false })
    assert.equal(200, status)
    local doc = cjson.decode(body)
    assert.equal("pod", doc.mode)
    assert.equal(1, doc.instances.max)
    assert.matches("sandboxd%.pod_mode", h.log())

    local st, r = exec(h, "thread-a", "echo kept > marker; echo hi")
    assert.equal(200, st)
    assert.equal(0, r.exitCode)
    assert.equal("hi\n", r.stdout)

    local st2, _, raw2 = S.call(h.url, "/exec", { thread = "thread-b", body = { command = "true", env = {} } })
    assert.equal(409, st2)
    assert.equal("pod-bound", cjson.decode(raw2).reason)

    -- past sleep_after the thread's workspace is still there: no idle sleep in a pod
    core.sleep(2500)
    local st3, r3 = exec(h, "thread-a", "cat marker")
    assert.equal(200, st3)
    assert.equal("kept\n", r3.stdout)
    assert.is_nil(h.log():find("instance_slept", 1, true))
    h:stop(); h:wait()
  end))

  it("a walled sandboxd says mode walls or unwalled, never pod", async(function()
    -- --no-walls: this spec is about the mode's name, not the walls (walls_spec proves those)
    local h = S.start_sandboxd{ policies = policies, args = { "--no-walls" } }
    local _, _, body = S.call(h.url, "/healthz", { thread = false })
    assert.equal("unwalled", cjson.decode(body).mode)
    h:stop(); h:wait()
  end))

  it("--pod with --no-walls or --max-instances is a usage error", async(function()
    for _, extra in ipairs({ { "--no-walls" }, { "--max-instances", "3" } }) do
      local args = { "--pod" }
      for _, a in ipairs(extra) do args[#args + 1] = a end
      local h = S.start_sandboxd{ policies = policies, args = args, may_fail = true, start_timeout_ms = 30000 }
      local r = h.wait()
      assert.equal(2, r.exit)
      assert.matches("%-%-pod", h.log())
    end
  end))
end)

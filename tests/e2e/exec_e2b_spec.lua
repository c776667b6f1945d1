-- `switchboard exec --backend e2b` and `switchboard console --backend e2b` as black boxes
-- against the E2B stand-in on loopback (tests/support/e2b_standin.py), pointed there the way
-- E2B's SDKs allow: E2B_API_URL and E2B_SANDBOX_URL.
local core = require("switchboard.core")
local bin = require("support.bin")
local S = require("support.sandbox")
local E = require("support.e2b")

local FAST = S.FAST .. [[
e2b.keepalive_ping_ms = 1 * second
e2b.connect_grace_ms = 200
]]

describe("switchboard exec/console --backend e2b", function()
  local h, state, pol

  setup(function()
    core.run(function() h = E.start() end)
    pol = S.policy_dir(FAST)
  end)
  teardown(function()
    core.run(function() h:stop() end)
    S.cleanup()
  end)
  before_each(function() state = S.tmpdir() end)
  after_each(function() S.rm(state) end)

  local function run(args, env, stdin)
    local r
    core.run(function()
      local argv = { "--policies", pol }
      for _, a in ipairs(args) do argv[#argv + 1] = a end
      local e = { HOME = state, SWITCHBOARD_STATE_DIR = state, GH_TOKEN = "specs-own-token" }
      for k, v in pairs(env or {}) do e[k] = v end
      r = bin.run(argv, { env = e, stdin = stdin, deadline_ms = 60000 })
    end)
    return r
  end

  it("without E2B_API_KEY: exit 78 and a message naming the variable", function()
    local r = run({ "exec", "--backend", "e2b", "--", "echo", "hi" })
    assert.equal(78, r.exit)
    assert.matches("E2B_API_KEY is not set", r.stderr)
    r = run({ "console", "--backend", "e2b" }, nil, "")
    assert.equal(78, r.exit)
    assert.matches("%-%-backend e2b needs %$E2B_API_KEY", r.stderr)
  end)

  it("runs a command, passes its exit status through, and a thread's follow-up reuses its sandbox", function()
    local env = h:env()
    local r = run({ "exec", "--backend", "e2b", "--", "echo", "hello", "from", "e2b" }, env)
    assert.equal(0, r.exit, r.stderr)
    assert.equal("hello from e2b\n", r.stdout)
    r = run({ "exec", "--backend", "e2b", "--thread", "t1", "--", "echo kept > marker; exit 3" }, env)
    assert.equal(3, r.exit)
    r = run({ "exec", "--backend", "e2b", "--thread", "t1", "--", "cat", "marker" }, env)
    assert.equal(0, r.exit, r.stderr)
    assert.equal("kept\n", r.stdout)
    r = run({ "exec", "--backend", "e2b", "--thread", "t2", "--", "cat", "marker" }, env)
    assert.equal(1, r.exit)
  end)

  it("a deadline is exit 124 naming the limit; a refused key is exit 125 naming the variable", function()
    local r = run({ "exec", "--backend", "e2b", "--timeout-ms", "500", "--", "sleep", "20" }, h:env())
    assert.equal(124, r.exit)
    assert.matches("command timed out in the E2B sandbox", r.stdout)
    r = run({ "exec", "--backend", "e2b", "--", "true" }, h:env{ E2B_API_KEY = "e2b_0000" })
    assert.equal(125, r.exit)
    assert.matches("E2B refused the API key", r.stderr)
    assert.is_nil(r.stderr:find("e2b_0000", 1, true))
  end)

  it("the console runs asks on e2b and says so on the card", function()
    local r = run({ "console", "--backend", "e2b" }, h:env(),
      "run `echo hi > marker.txt`\nrun `cat marker.txt`\n")
    assert.equal(0, r.exit, r.stderr)
    assert.matches("agent:coding · e2b", r.stdout)
    assert.matches("\nhi\n", r.stdout)
  end)
end)

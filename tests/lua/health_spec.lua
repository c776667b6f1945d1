-- The health tracker (docs/contract.md#fail-fast, #failure-recycle, #capacity).
local P = require("support.policies")
local health = require("switchboard.exec.health")
local errors = require("switchboard.exec.errors")

-- An executor that answers from a script of outcomes.
local function scripted(outcomes)
  local ex = { backend = "sandbox", calls = 0 }
  local function next_outcome(self)
    self.calls = self.calls + 1
    local o = table.remove(outcomes, 1)
    if o == "ok" then return { exit_code = 0, stdout = "", stderr = "" } end
    if o == "exit1" then return { exit_code = 1, stdout = "", stderr = "x" } end
    if o == "raise-infra" then error(errors.infra("raised")) end
    return nil, o
  end
  ex.exec = next_outcome
  ex.read_file = next_outcome
  ex.write_file = next_outcome
  return ex
end

describe("ExecHealthTracker", function()
  local snap
  setup(function() snap = P.shipped() end)

  it("counts consecutive infra errors and trips at the policy's limit (2)", function()
    local e1, e2 = errors.infra("one"), errors.infra("two", "timeout")
    local t = health.new(scripted({ e1, e2 }), snap)
    assert.equal(0, t.count)
    assert.is_false(t:tripped())
    local r, err = t:exec("x")
    assert.is_nil(r)
    assert.equal(e1, err)
    assert.equal(1, t.count)
    assert.is_false(t:tripped())
    t:exec("x")
    assert.equal(2, t.count)
    assert.equal(e2, t.last_error)
    assert.is_true(t:tripped())
  end)

  it("resets on success — a nonzero exit is a success of the transport", function()
    local t = health.new(scripted({ errors.infra("a"), "exit1", errors.infra("b"), "ok" }), snap)
    t:exec("x")
    assert.equal(1, t.count)
    local r = t:exec("x")
    assert.equal(1, r.exit_code)
    assert.equal(0, t.count)
    assert.is_nil(t.last_error)
    t:read_file("p")
    assert.equal(1, t.count)
    assert.is_true(t:write_file("p", "b") ~= nil)
    assert.equal(0, t.count)
  end)

  it("leaves the count AND the last infra error untouched on ExecCapacityError (a full fleet is not a dead sandbox)", function()
    local infra = errors.infra("wedged")
    local t = health.new(scripted({ infra, errors.capacity("busy", 300000), errors.capacity("busy", 300000) }), snap)
    t:exec("x")
    t:exec("x")
    t:exec("x")
    assert.equal(1, t.count)
    assert.equal(infra, t.last_error)
    assert.is_false(t:tripped())
  end)

  it("a capacity error does not reset a count either", function()
    local t = health.new(scripted({ errors.infra("a"), errors.capacity("busy", 1), errors.infra("b") }), snap)
    t:exec("x"); t:exec("x"); t:exec("x")
    assert.equal(2, t.count)
    assert.is_true(t:tripped())
  end)

  it("tool errors pass through without counting", function()
    local t = health.new(scripted({ errors.infra("a"), errors.tool("no such file") }), snap)
    t:exec("x")
    local r, err = t:read_file("missing")
    assert.is_nil(r)
    assert.is_true(errors.is_tool(err))
    assert.equal(1, t.count)
  end)

  it("an infra error raised instead of returned is counted and re-raised unchanged", function()
    local t = health.new(scripted({ "raise-infra" }), snap)
    local ok, err = pcall(t.exec, t, "x")
    assert.is_false(ok)
    assert.is_true(errors.is_infra(err))
    assert.equal(1, t.count)
  end)

  it("follows the policy's limit", function()
    local three = assert(P.load(P.dir({ timeouts = function(s) return s .. "\nhealth.max_consecutive_infra_failures = 3\n" end })))
    local t = health.new(scripted({ errors.infra("a"), errors.infra("b") }), three)
    t:exec("x"); t:exec("x")
    assert.is_false(t:tripped())
    P.cleanup()
  end)

  it("exposes release / move_to only when the inner executor has them", function()
    local plain = health.new(scripted({}), snap)
    assert.is_nil(plain.release)
    assert.is_nil(plain.move_to)
    local inner = scripted({})
    local released
    inner.release = function(_, mode) released = mode; return true end
    local t = health.new(inner, snap)
    assert.is_true(t:release("always"))
    assert.equal("always", released)
    assert.is_nil(t.move_to)
    assert.equal("sandbox", t.backend)
  end)
end)

local errors = require("switchboard.exec.errors")

describe("exec errors", function()
  it("ExecInfraError carries kind, name, a span code and its message as tostring", function()
    local e = errors.infra("sandbox unreachable", "http 502")
    assert.equal("infra", e.kind)
    assert.equal("ExecInfraError", e.name)
    assert.equal("http 502", e.code)
    assert.equal("sandbox unreachable", tostring(e))
    assert.is_true(errors.is_infra(e))
    assert.is_false(errors.is_capacity(e))
    assert.equal("infra", errors.infra("x").code)
  end)

  it("accepts exactly the span codes the tracing expects", function()
    for _, code in ipairs({ "timeout", "http 404", "infra", "infra/attach", "infra/runtime-replaced" }) do
      assert.equal(code, errors.infra("x", code).code)
    end
    for _, bad in ipairs({ "http", "http 5", "Timeout", "transport", "" }) do
      assert.has_error(function() errors.infra("x", bad) end)
    end
  end)

  it("ExecCapacityError is not an ExecInfraError", function()
    local e = errors.capacity("sandbox fleet busy — …", 300000)
    assert.equal("capacity", e.kind)
    assert.equal("ExecCapacityError", e.name)
    assert.equal(300000, e.waited_ms)
    assert.is_true(errors.is_capacity(e))
    assert.is_false(errors.is_infra(e))
  end)

  it("tool and refused errors", function()
    assert.is_true(errors.is_tool(errors.tool("no such file")))
    local r = errors.refused("run budget exhausted")
    assert.is_true(errors.is_refused(r))
    assert.equal(124, r.exit_code)
    assert.is_false(errors.is_infra(r))
  end)

  it("a message is never empty", function()
    assert.equal("(ExecInfraError without a message)", errors.infra("").message)
    assert.equal("(ExecInfraError without a message)", tostring(errors.infra("  \n")))
    assert.equal("(ExecToolError without a message)", errors.tool(nil).message)
    assert.equal("x", errors.tool("  x ").message)
  end)

  it("a look-alike table is not an executor error", function()
    assert.is_false(errors.is_infra({ kind = "infra" }))
    assert.is_false(errors.is_error("infra"))
  end)
end)

local P = require("support.policies")
local command = require("switchboard.commands.policy")

local function run(args, policies_dir)
  local out, err = {}, {}
  local code = command.run(args, {
    policies_dir = policies_dir,
    out = function(l) out[#out + 1] = l end,
    err = function(l) err[#err + 1] = l end,
    load = { hash = P.hash },
  })
  return code, table.concat(out, "\n"), table.concat(err, "\n")
end

describe("switchboard policy check", function()
  after_each(P.cleanup)

  it("exports name, summary, help and run", function()
    assert.equal("policy", command.name)
    assert.is_string(command.summary)
    assert.truthy(command.help:find("switchboard policy check", 1, true))
  end)

  it("a valid directory: exit 0 and the version hash", function()
    local code, out = run({ "check", "policies" })
    assert.equal(0, code)
    assert.truthy(out:find("version " .. P.shipped().version, 1, true))
    assert.truthy(out:find("5 rules with", 1, true))
  end)

  it("a broken directory: exit 1 with file:line messages", function()
    local dir = P.dir({
      timeouts = function(s) return s .. '\nbash.max_ms = "x"\n' end,
      execution = function(s) return s .. "\nfunction choose_backend() while true do end end\n" end,
    })
    local code, out, err = run({ "check", dir })
    assert.equal(1, code)
    assert.equal("", out)
    assert.matches("policies/timeouts%.lua:%d+: bash%.max_ms must be a number", err)
    assert.matches("policy check failed: 1 problem in ", err)
  end)

  it("the examples run: a rule whose example fails is reported", function()
    local dir = P.dir({ errors = function(s) return (s:gsub('patterns = { "%^%%s%*%$" }', 'patterns = { "^x" }', 1)) end })
    local code, _, err = run({ "check", dir })
    assert.equal(1, code)
    assert.truthy(err:find("rule empty_error: example matches[1]", 1, true))
  end)

  it("--policies DIR (the CLI's global flag, or its own) works like the positional DIR", function()
    assert.equal(0, (run({ "--policies", "policies", "check" })))
    local broken = P.dir({ timeouts = function(s) return s .. "\nbash.max_ms = true\n" end })
    assert.equal(1, (run({ "check" }, broken)))
    assert.equal(0, (run({ "check", "policies" }, broken))) -- the positional DIR wins
  end)

  it("--help shows examples; bad usage exits 2", function()
    local code, out = run({ "--help" })
    assert.equal(0, code)
    assert.truthy(out:find("kill -HUP", 1, true))
    assert.equal(2, (run({})))
    assert.equal(2, (run({ "lint" })))
    assert.equal(2, (run({ "check", "a", "b" })))
    assert.equal(2, (run({ "check", "--bogus" })))
  end)
end)

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
    assert.truthy(err:find(dir .. "/timeouts.lua:", 1, true), err) -- the real path of the edited file
    assert.matches("timeouts%.lua:%d+: bash%.max_ms must be a number", err)
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
    assert.truthy(out:find("switchboard reload", 1, true))
    assert.equal(2, (run({})))
    assert.equal(2, (run({ "lint" })))
    assert.equal(2, (run({ "check", "a", "b" })))
    assert.equal(2, (run({ "check", "--bogus" })))
  end)
end)

describe("the commands' shared prologue", function()
  local prologue = require("switchboard.launch.prologue")
  local policy = require("switchboard.policy")
  local CMD = { name = "demo", help = "Usage: switchboard demo\n" }

  local function start(argv, what, policies_dir)
    local out, err = {}, {}
    local p, status = prologue.start(CMD, argv, {
      policies_dir = policies_dir,
      out = function(l) out[#out + 1] = l end,
      err = function(l) err[#err + 1] = l end,
    }, what)
    return p, status, table.concat(out, "\n"), table.concat(err, "\n")
  end

  before_each(function()
    policy.reset()
    policy.configure{ hash = P.hash, log = function() end }
  end)
  after_each(function() policy.reset() end)

  it("answers --help on stdout with status 0 and names a usage error with status 2", function()
    local p, status, out = start({ "--help" }, { spec = {} })
    assert.is_nil(p)
    assert.equal(0, status)
    assert.equal("Usage: switchboard demo", out)
    local _, status2, _, err = start({ "--bogus" }, { spec = {} })
    assert.equal(2, status2)
    assert.equal("switchboard demo: unknown option --bogus (see --help)", err)
  end)

  it("checks --backend before anything loads, then the command's own usage", function()
    local _, status, _, err = start({ "--backend", "cloud" }, { spec = { backend = "string" }, backend = true, policies = true },
      "/nonexistent/policies")
    assert.equal(2, status)
    assert.equal('switchboard demo: --backend must be local, sandbox, resident, e2b or kubernetes, got "cloud"', err)
    local _, status2, _, err2 = start({ "extra" }, { spec = {}, usage = function(p) return "unexpected " .. p.words[1] end })
    assert.equal(2, status2)
    assert.equal("switchboard demo: unexpected extra", err2)
  end)

  it("slack names the option whose HOST:PORT does not read, before anything loads", function()
    local slack = require("switchboard.commands.slack")
    for _, o in ipairs({ { "listen", 3000 }, { "metrics-listen", 9091 }, { "health-listen", 8081 } }) do
      local err = {}
      local status = slack.run({ "--" .. o[1], "nonsense" }, { policies_dir = "/nonexistent/policies",
        out = function() end, err = function(l) err[#err + 1] = l end })
      assert.equal(2, status)
      assert.equal(("switchboard slack: --%s takes HOST:PORT, e.g. 127.0.0.1:%d"):format(o[1], o[2]), table.concat(err, "\n"))
    end
  end)

  it("policies that do not load stop the command with the configuration status 78", function()
    local broken = P.dir({ timeouts = function(s) return s .. "\nbash.max_ms = true\n" end })
    local p, status, _, err = start({}, { policies = true }, broken)
    assert.is_nil(p)
    assert.equal(78, status)
    assert.matches("^switchboard demo: the policies do not load:\n  .*timeouts%.lua:%d+: bash%.max_ms", err)
    local ok = assert(start({ "--backend", "local" }, { spec = { backend = "string" }, backend = true, policies = true }, "policies"))
    assert.equal(P.shipped().version, ok.snap.version)
  end)

  it("says the no-credential notice once, and only for an agent with a token scope", function()
    local creds = require("switchboard.github.identity").from_env(function() return nil end)
    local p = assert(prologue.start(CMD, {}, { credentials = creds }, {}))
    local said = {}
    local function say(l) said[#said + 1] = l end
    p:notice({ name = "general" }, say)
    p:notice({ token_scope = "read" }, say)
    p:notice({ token_scope = "write" }, say)
    assert.equal(1, #said)
  end)
end)

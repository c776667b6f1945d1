-- The README's two commands as a user first meets them: `--help` says what each does and does
-- nothing else (scripts/test --help once started the whole suite; bootstrap --help installed).
local core = require("switchboard.core")
local async = require("support.async")

local function run(argv)
  local env = { PATH = os.getenv("PATH"), HOME = os.getenv("HOME") or "/root", TMPDIR = os.getenv("TMPDIR") }
  -- a --help that starts the suite instead is stopped (its whole group) rather than run for 40 minutes
  return assert(core.spawn{ argv = argv, env = env, max_output = 1 << 16, deadline_ms = 60000,
    kill_grace_ms = 2000 }):wait()
end

local function entries(dir)
  local names, p = {}, io.popen("ls -A " .. dir)
  for name in p:lines() do names[name] = true end
  p:close()
  return names
end

describe("scripts --help", function()
  it("scripts/test --help prints its usage, exits 0 and starts no run", async(function()
    local tmpdir = os.getenv("TMPDIR") or "/tmp"
    local before = entries(tmpdir)
    for _, flag in ipairs{ "--help", "-h" } do
      local r = run{ "scripts/test", flag }
      assert.are.equal(0, r.exit, r.stderr)
      assert.truthy(r.stdout:find("usage: scripts/test", 1, true), r.stdout)
      assert.truthy(r.stdout:find("SB_TEST_QUICK=1", 1, true), r.stdout)
      assert.are.equal("", r.stderr) -- no "== tests on the normal build": nothing was built
    end
    for name in pairs(entries(tmpdir)) do
      assert.is_true(before[name] ~= nil or not name:match("^sb%-test%."), "a run's TMPDIR appeared: " .. name)
    end
  end))

  it("scripts/bootstrap --help prints its usage and installs nothing; an argument it does not take is refused", async(function()
    local r = run{ "scripts/bootstrap", "--help" }
    assert.are.equal(0, r.exit, r.stderr)
    assert.truthy(r.stdout:find("usage: scripts/bootstrap", 1, true), r.stdout)
    assert.are.equal("", r.stderr) -- no "bootstrap: installing" nor "building"
    r = run{ "scripts/bootstrap", "--frobnicate" }
    assert.are.equal(2, r.exit)
    assert.truthy(r.stderr:find("takes no arguments", 1, true), r.stderr)
  end))
end)

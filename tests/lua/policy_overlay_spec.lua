-- Policy overlays (docs/operations.md): a directory holds only what the operator changes,
-- layered over the shipped set; every message names the real file; `policy show [--diff]`
-- says where each value came from; `policy check` on a missing directory or a file is a
-- usage error; a reload says what changed.
local P = require("support.policies")
local command = require("switchboard.commands.policy")
local policy = require("switchboard.policy")
local loader = require("switchboard.policy.loader")

local function run(args)
  local out, err = {}, {}
  local code = command.run(args, {
    out = function(l) out[#out + 1] = l end,
    err = function(l) err[#err + 1] = l end,
    load = { hash = P.hash, base = "policies" },
  })
  return code, table.concat(out, "\n"), table.concat(err, "\n")
end

local dirs = {}
local function overlay(files)
  local dir = require("support.tmp").dir("overlay")
  dirs[#dirs + 1] = dir
  for name, src in pairs(files) do P.write(dir .. "/" .. name .. ".lua", src) end
  return dir
end

describe("policy overlays", function()
  after_each(function()
    for _, d in ipairs(dirs) do os.execute("rm -rf '" .. d .. "'") end
    dirs = {}
    policy.reset()
  end)

  it("a directory with just timeouts.lua setting bash.max_ms is valid; the rest is shipped", function()
    local dir = overlay({ timeouts = "bash.max_ms = 30 * minute\n" })
    local snap = assert(P.load(dir, { base = "policies" }))
    assert.equal(30 * 60 * 1000, snap.timeouts.bash.max_ms)
    assert.equal(P.shipped().timeouts.bash.default_ms, snap.timeouts.bash.default_ms)
    assert.equal(P.shipped().agents.default_agent, snap.agents.default_agent)
    assert.not_equal(P.shipped().version, snap.version)
    local where, shipped = snap.where("timeouts", "bash.max_ms")
    assert.equal(dir .. "/timeouts.lua:1", where)
    assert.is_false(shipped)
    assert.matches("^policies/timeouts%.lua:%d+$", (snap.where("timeouts", "bash.default_ms")))
    -- without a base the same directory is a whole set, and incomplete
    local none, errs = P.load(dir)
    assert.is_nil(none)
    assert.truthy(P.has(errs, dir .. "/agents.lua:1: cannot read the file"))
  end)

  it("messages name the operator's file; a cross-field error points at the line they changed", function()
    local dir = overlay({ timeouts = "-- mine\n\nbash.max_ms = 2 * minute\n" })
    local _, errs = P.load(dir, { base = "policies" })
    -- bash.default_ms (shipped, 5 min) now exceeds the operator's max: their line 3 is named
    assert.truthy(P.has(errs, dir .. "/timeouts.lua:3: bash.default_ms must not exceed bash.max_ms"),
      table.concat(errs or {}, "\n"))
    local _, errs2 = P.load(overlay({ timeouts = "\nbash.max_ms = = 3\n" }), { base = "policies" })
    assert.matches("^/.*/timeouts%.lua:2: ", errs2[1])
  end)

  it("policy show prints each value and where it came from; --diff only the changes", function()
    local dir = overlay({ timeouts = "bash.max_ms = 30 * minute\n" })
    local code, out = run({ "show", dir })
    assert.equal(0, code)
    assert.truthy(out:find("bash.max_ms = 1800000  # " .. dir .. "/timeouts.lua:1", 1, true), out)
    assert.truthy(out:find("bash.default_ms = 300000  # policies/timeouts.lua:%d+ %(shipped%)"), out)
    code, out = run({ "show", "--diff", dir })
    assert.equal(0, code)
    assert.truthy(out:find("bash.max_ms 1200000 → 1800000  # " .. dir .. "/timeouts.lua:1", 1, true), out)
    assert.falsy(out:find("default_ms", 1, true))
  end)

  it("policy check on a missing directory or on a file says so and exits 2", function()
    local code, _, err = run({ "check", "/nonexistent/switchboard-policies" })
    assert.equal(2, code)
    assert.truthy(err:find("/nonexistent/switchboard-policies does not exist", 1, true), err)
    local dir = overlay({ timeouts = "bash.max_ms = 30 * minute\n" })
    code, _, err = run({ "check", dir .. "/timeouts.lua" })
    assert.equal(2, code)
    assert.truthy(err:find("is a file, not a directory", 1, true), err)
    code = run({ "check", dir })
    assert.equal(0, code)
  end)

  it("a reload logs old and new version, each changed key, and warns for restart-only keys", function()
    local logs = {}
    policy.configure { hash = P.hash, shipped_dir = "policies",
      log = function(level, event, fields) logs[#logs + 1] = { level = level, event = event, fields = fields } end }
    local dir = overlay({ timeouts = "bash.max_ms = 20 * minute\n" })
    local old = assert(policy.load_initial(dir))
    P.write(dir .. "/timeouts.lua", "bash.max_ms = 30 * minute\nserver.max_body_bytes = 13 * MiB\n")
    local new, _, changes = policy.reload()
    assert.truthy(new)
    assert.equal(3, #changes) -- max_ms, the derived token margin, the server's body limit
    local seen = {}
    for _, l in ipairs(logs) do seen[l.event] = seen[l.event] or {}; table.insert(seen[l.event], l) end
    local r = assert(seen["policy.reloaded"][1])
    assert.equal(old.version, r.fields.old_version)
    assert.equal(new.version, r.fields.version)
    local texts = {}
    for _, l in ipairs(seen["policy.changed"]) do texts[#texts + 1] = l.fields.change end
    assert.truthy(table.concat(texts, "\n"):find("bash.max_ms 1200000 → 1800000", 1, true))
    local w = assert(seen["policy.restart_required"][1])
    assert.equal("warn", w.level)
    assert.equal("server.max_body_bytes", w.fields.key)
  end)

  it("the loader's layering is off for the shipped directory itself", function()
    local a = assert(P.load("policies", { base = "./policies/" }))
    assert.equal(P.shipped().version, a.version)
    assert.is_table(loader.FILES)
  end)
end)

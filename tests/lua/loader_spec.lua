local P = require("support.policies")
local loader = require("switchboard.policy.loader")

local function expect_refused(edits, ...)
  local snap, errs = P.load(P.dir(edits))
  assert.is_nil(snap)
  assert.is_table(errs)
  if not P.has(errs, ...) then
    error("expected an error containing " .. table.concat({ ... }, " + ") .. ", got:\n" .. table.concat(errs, "\n"), 2)
  end
  return errs
end

local function append(text)
  return function(src) return src .. "\n" .. text .. "\n" end
end

local function line_count(name)
  local n = 0
  for _ in (P.read("policies/" .. name .. ".lua")):gmatch("\n") do n = n + 1 end
  return n
end

describe("policy loader", function()
  after_each(P.cleanup)

  describe("the shipped policies", function()
    it("load, and every rule's examples pass", function()
      local snap, errs = P.load("policies")
      assert.is_nil(errs)
      assert.is_string(snap.version)
      assert.matches("^%x+$", snap.version)
      assert.equal(64, #snap.version)
      assert.equal(5, snap.checked.rules)
      assert.is_true(snap.checked.examples >= 40)
      assert.is_true(snap.checked.hook_calls > 0)
    end)

    it("the version is a content hash: stable for the same bytes, new for any edit", function()
      local a = assert(P.load(P.dir()))
      local b = assert(P.load(P.dir()))
      assert.equal(a.version, b.version)
      local c = assert(P.load(P.dir({ timeouts = append("-- a comment") })))
      assert.not_equal(a.version, c.version)
    end)

    it("the snapshot is frozen, nested tables included", function()
      local snap = P.shipped()
      assert.has_error(function() snap.timeouts.bash.max_ms = 1 end)
      assert.has_error(function() snap.agents.agents.review.readonly = false end)
      assert.has_error(function() snap.version = "x" end)
      assert.equal(20 * 60 * 1000, snap.timeouts.bash.max_ms)
      -- pairs and # still work on the frozen tables
      local n = 0
      for _ in pairs(snap.agents.agents) do n = n + 1 end
      assert.equal(3, n)
      assert.equal(13, #snap.agents.agents.coding.tools) -- ten, and process_logs, process_kill, expose_port
    end)
  end)

  describe("refuses a broken policy with file:line", function()
    it("a syntax error", function()
      local errs = expect_refused({ timeouts = append("bash.max_ms = = 3") }, "/timeouts.lua:" .. (line_count("timeouts") + 2) .. ":")
      assert.equal(1, #errs)
    end)

    it("a wrong type", function()
      expect_refused({ timeouts = append('bash.max_ms = "twenty minutes"') },
        "/timeouts.lua:" .. (line_count("timeouts") + 2) .. ": bash.max_ms must be a number, got string")
    end)

    it("an out-of-range value", function()
      expect_refused({ timeouts = append("health.max_consecutive_infra_failures = 0") },
        "/timeouts.lua:" .. (line_count("timeouts") + 2) .. ": health.max_consecutive_infra_failures must be between 1 and 100, got 0")
      expect_refused({ timeouts = append("bash.floor_ms = 0.5") }, "bash.floor_ms must be a whole number")
      expect_refused({ timeouts = append("bash.max_ms = 0/0") }, "bash.max_ms must be a finite number")
    end)

    it("a field inside a multi-line table names the line of the field", function()
      local src = P.read("policies/timeouts.lua")
      local edited = src:gsub("default_ms = 5 %* minute,", 'default_ms = "5m",', 1)
      local line
      local i = 0
      for l in (edited .. "\n"):gmatch("([^\n]*)\n") do
        i = i + 1
        if l:find('default_ms = "5m"', 1, true) then line = i end
      end
      expect_refused({ timeouts = edited }, "/timeouts.lua:" .. line .. ": bash.default_ms must be a number")
    end)

    it("a missing setting and a misspelled field", function()
      expect_refused({ timeouts = function(src) return (src:gsub("\nrun = { reserve_ms = 60 %* second }\n", "\n")) end },
        "/timeouts.lua:", "run is required")
      expect_refused({ timeouts = append("bash.max_mss = 3") }, "bash.max_mss is not a known field")
    end)

    it("a rule whose own example fails", function()
      -- "Session terminated" is a listed fleet-busy reject; make the rule match it.
      local errs = expect_refused({
        errors = function(src)
          return (src:gsub('"no container instance that can be provided",', '"no container instance that can be provided", "Session terminated",', 1))
        end,
      }, "/errors.lua:", "rule fleet_busy: example rejects[", "is matched by the rule")
      local line
      local i = 0
      for l in (P.read("policies/errors.lua") .. "\n"):gmatch("([^\n]*)\n") do
        i = i + 1
        if l:find("^fleet_busy = rule") then line = i end
      end
      assert.truthy(P.has(errs, "/errors.lua:" .. line .. ": rule fleet_busy"))
    end)

    it("a rule missing an example the contract lists", function()
      expect_refused({
        errors = function(src) return (src:gsub('"Session terminated",                                              %-%- 0.3.x\n', "", 1)) end,
      }, "rule recycle: example matches[", "\"Session terminated\" is not matched")
    end)

    it("a rule without examples, or with a bad pattern", function()
      expect_refused({ errors = append('empty_error = rule{ patterns = {"^%s*$"} }') }, "matches must list at least one example")
      expect_refused({ errors = append('empty_error = rule{ patterns = {"[a"}, matches = {"x"}, rejects = {"y"} }') },
        "patterns[1] is not a valid Lua pattern")
    end)

    it("reading an unknown global", function()
      expect_refused({ timeouts = append("bash.max_ms = minutes * 20") },
        "/timeouts.lua:" .. (line_count("timeouts") + 2) .. ": unknown name \"minutes\"")
    end)

    it("writing an unknown setting", function()
      expect_refused({ agents = append("defualt_agent = \"review\"") },
        "/agents.lua:" .. (line_count("agents") + 2) .. ": unknown setting \"defualt_agent\"")
    end)

    it("assigning a helper", function()
      expect_refused({ timeouts = append("minute = 1") }, "\"minute\" is a helper and cannot be assigned")
    end)

    it("io, os, package, debug, require, load, setmetatable are not there", function()
      for _, name in ipairs({ "io", "os", "package", "debug", "require", "load", "loadstring", "dofile",
        "setmetatable", "getmetatable", "rawset", "rawget", "pcall", "collectgarbage", "_G", "coroutine" }) do
        expect_refused({ timeouts = append("local x = " .. name) }, "unknown name \"" .. name .. "\"")
      end
    end)

    it("string.dump and math.random are left out of the copies", function()
      expect_refused({ timeouts = append("local f = string.dump(function() end)") }, "attempt to call a nil value (field 'dump')")
      expect_refused({ timeouts = append("bash.max_ms = math.random(1, 5) * minute") }, "field 'random'")
    end)

    it("a huge string.rep is refused", function()
      expect_refused({ timeouts = append('local s = string.rep("x", 1 << 40)') }, "string.rep would build")
    end)

    it("a top-level loop runs out of its instruction budget", function()
      expect_refused({ timeouts = append("while true do end") },
        "/timeouts.lua:" .. (line_count("timeouts") + 2) .. ":", "instruction budget exhausted")
    end)

    it("the removed setting is refused by name: sandbox.keepalive_ms", function()
      expect_refused({ timeouts = append("sandbox.keepalive_ms = 5 * minute") }, "keepalive_ms")
    end)

    it("cross-field: floor <= default <= max, and the server default inside the bounds", function()
      expect_refused({ timeouts = append("bash.default_ms = 30 * minute") }, "bash.default_ms must not exceed bash.max_ms")
      expect_refused({ timeouts = append("bash.floor_ms = 6 * minute") }, "bash.floor_ms must not exceed bash.default_ms")
      expect_refused({ timeouts = append("sandbox.default_budget_ms = 21 * minute") },
        "sandbox.default_budget_ms must lie within [bash.floor_ms, bash.max_ms]")
    end)

    it("cross-field: a token margin that reaches the token's lifetime", function()
      expect_refused({ timeouts = append("bash.max_ms = 55 * minute") }, "token.reuse_slack_ms", "no token would ever be reused")
    end)

    it("sleep_after outside the <n>[smh] grammar", function()
      for _, bad in ipairs({ "5", "5 m", "5min", "0m", "-5m", "1.5h", "m" }) do
        expect_refused({ timeouts = append(string.format("sandbox.sleep_after = %q", bad)) }, "sandbox.sleep_after must be <n>s, <n>m or <n>h")
      end
    end)

    it("agents: a tool needing a workspace on an agent without a repository", function()
      expect_refused({ agents = append('agents.general.tools = { "bash" }') },
        "agents.general.tools[1] bash runs in a workspace")
    end)

    it("agents: readonly with write_file or the write token", function()
      expect_refused({ agents = append('agents.review.tools = { "bash", "write_file" }') }, "a readonly agent cannot have write_file")
      expect_refused({ agents = append('agents.review.token_scope = "write"') }, "a readonly agent must not get the write token")
    end)

    it("agents: an unknown default agent, a scope github.lua lacks, a run shorter than the reserve", function()
      expect_refused({ agents = append('default_agent = "triage"') }, "default_agent names no agent")
      expect_refused({ agents = append('agents.coding.token_scope = "admin"') },
        "/agents.lua:", "agents.coding.token_scope names no scope defined in policies/github.lua")
      expect_refused({ agents = append("agents.general.max_run_minutes = 1") }, "leaves nothing after the run reserve")
    end)

    it("agents: a two-line description", function()
      expect_refused({ agents = append('agents.coding.description = "a\\nb"') }, "agents.coding.description must be one line")
    end)

    it("github: a read scope asking for write", function()
      expect_refused({ github = append('scopes.read.permissions.contents = "write"') },
        "scopes.read.permissions.contents must be \"read\" in the read scope")
      expect_refused({ github = append('scopes.read.permissions.issues = "admin"') }, "must be one of \"read\", \"write\"")
    end)

    it("execution: an unknown backend, a backend for an unknown agent, a secret passed to children", function()
      expect_refused({ execution = append('backend.default = "docker"') }, "backend.default must be one of")
      expect_refused({ execution = append('backend.reviewer = "sandbox"') }, "/execution.lua:", "backend.reviewer names no agent")
      for _, name in ipairs({ "SLACK_BOT_TOKEN", "ANTHROPIC_API_KEY", "GITHUB_APP_PRIVATE_KEY", "SANDBOX_TOKEN", "GH_TOKEN", "AWS_SECRET_ACCESS_KEY" }) do
        expect_refused({ execution = append(string.format("child_env.pass[#child_env.pass + 1] = %q", name)) },
          name .. " looks like a credential")
      end
    end)

    it("a message template with an unknown placeholder, or without the knob it must name", function()
      expect_refused({ errors = append('messages.capacity = "busy after {secs}s"') }, "messages.capacity unknown placeholder {secs}")
      expect_refused({ errors = append('messages.timeout = "timed out after {seconds}s"') }, "messages.timeout must contain timeoutMs")
    end)

    it("a hook that loops, raises or answers out of range on the sample input", function()
      expect_refused({ execution = append("function choose_backend(ctx) while true do end end") },
        "/execution.lua:" .. (line_count("execution") + 2) .. ": hook choose_backend(", "instruction budget exhausted")
      expect_refused({ execution = append("function choose_backend(ctx) error('nope') end") }, "hook choose_backend(", "nope")
      expect_refused({ execution = append('function choose_backend(ctx) return "docker" end') },
        "hook choose_backend(", "returned \"docker\" (expected one of local, sandbox, resident, e2b, kubernetes)")
      expect_refused({ agents = append('function choose_agent(ctx) return "nobody" end') }, "hook choose_agent(", "returned \"nobody\"")
    end)

    it("a missing file, and every problem at once", function()
      local _, errs = P.load(P.dir({ github = false, timeouts = append("bash.max_ms = true") }))
      assert.truthy(P.has(errs, "/github.lua:1: cannot read"))
      assert.truthy(P.has(errs, "bash.max_ms must be a number, got boolean"))
    end)
  end)

  describe("configuration style", function()
    it("a later line refines an earlier one", function()
      local snap = assert(P.load(P.dir({ timeouts = append("bash.max_ms = 30 * minute") })))
      assert.equal(30 * 60 * 1000, snap.timeouts.bash.max_ms)
      -- the derived reuse margin follows the refinement
      assert.equal(35 * 60 * 1000, snap.timeouts.token.reuse_margin_ms)
    end)

    it("an operator adds an agent and gives it a backend", function()
      local snap = assert(P.load(P.dir({
        agents = append([[
agents.triage = {
  description = "Labels issues.",
  resources = { repository = true },
  readonly = true,
  token_scope = "read",
  max_run_minutes = 5,
  tools = { "bash" },
}]]),
        execution = append('backend.triage = "sandbox"'),
      })))
      assert.equal("triage", snap.agents.agents.triage.name)
      assert.equal("sandbox", snap.execution.backend.triage)
    end)

    it("table.insert, locals and loops work on the settings", function()
      local snap = assert(P.load(P.dir({
        execution = append([[
table.insert(child_env.pass, "NODE_OPTIONS")
for _, n in ipairs({ "CI", "NO_COLOR" }) do child_env.set[n] = "1" end]]),
      })))
      assert.equal("NODE_OPTIONS", snap.execution.child_env.pass[#snap.execution.child_env.pass])
      assert.equal("1", snap.execution.child_env.set.CI)
    end)

    it("a rule refined after it was built is compiled and checked again", function()
      local snap = assert(P.load(P.dir({
        errors = append([[
table.insert(recycle.texts, "The container was evicted")
table.insert(recycle.matches, "The container was evicted while the command ran")]]),
      })))
      assert.is_true(snap.errors.recycle:match("THE CONTAINER WAS EVICTED"))
      expect_refused({ errors = append("table.insert(recycle.texts, 42)") }, "rule recycle: texts[5] must be a non-empty string")
      expect_refused({ errors = append('table.insert(recycle.rejects, "Evicted")\ntable.insert(recycle.texts, "evicted")') },
        "rule recycle: example rejects[", "\"Evicted\" is matched")
    end)

    it("policy functions read the frozen, validated values after load", function()
      local snap = assert(P.load(P.dir({
        execution = append("function choose_backend(ctx) return backend.default end"),
      })))
      assert.equal("local", snap.execution.choose_backend({ agent = "coding" }))
    end)

    it("a policy function cannot write settings at run time", function()
      local snap = assert(P.load(P.dir({
        execution = append([[
function choose_backend(ctx)
  if ctx.evil then backend = { default = "e2b" } end
  return "local"
end]]),
      })))
      assert.has_error(function() snap.execution.choose_backend({ evil = true }) end)
      assert.equal("local", snap.execution.backend.default)
    end)
  end)

  describe("instruction budget", function()
    it("the Lua stand-in stops a loop and reports the line", function()
      local fn = load("local n = 0\nwhile true do n = n + 1 end", "@policies/x.lua")
      local ok, err = loader.lua_bounded(10000, fn)
      assert.is_false(ok)
      assert.matches("/x.lua:2: instruction budget exhausted", err, 1, true)
    end)

    it("the Lua stand-in returns every value of a function that finishes", function()
      local ok, a, b = loader.lua_bounded(10000, function(x) return x, x + 1 end, 41)
      assert.is_true(ok)
      assert.equal(41, a)
      assert.equal(42, b)
    end)

    it("the Lua stand-in refuses a function that yields", function()
      local ok, err = loader.lua_bounded(10000, function() coroutine.yield() end)
      assert.is_false(ok)
      assert.matches("yield", err)
    end)
  end)
end)

-- The schema's defaults (docs/policies.md "Optional settings and their defaults"): an optional
-- setting declared with S.optional(spec, default) that a policy leaves out reads the default
-- from the schema — filled in by the loader, so the snapshot holds it and no reader keeps a
-- fallback of its own; a wrong value is refused naming its path; a reload (HUP) of a running
-- sandboxd takes a changed value, and the default again once the setting is gone.
local core = require("switchboard.core")
local cjson = require("cjson")
local async = require("support.async")
local S = require("support.sandbox")
local P = require("support.policies")
local schema = require("switchboard.policy.schema")

after_each(function()
  S.cleanup_servers()
  P.cleanup()
end)

-- An overlay's timeouts.lua (or isolation.lua) that takes settings out of the shipped layer:
-- what an operator's file written before they existed leaves (a `sandbox = {…}` of its own).
local function without(names)
  local lines = {}
  for _, n in ipairs(names) do lines[#lines + 1] = n .. " = nil" end
  return table.concat(lines, "\n") .. "\n"
end

local function overlay(files)
  local dir = require("support.tmp").scratch("policies-overlay")
  for name, src in pairs(files) do P.write(dir .. "/" .. name .. ".lua", src) end
  return dir
end

describe("a policy without an optional setting", function()
  it("reads the schema's default, filled in before the snapshot is frozen", function()
    local dir = overlay{
      timeouts = without{ "sandbox.max_processes", "sandbox.exec_lane", "sandbox.exec_lane_report_ms",
        "sandbox.stream_at_bytes", "sandbox.max_ports" },
      isolation = without{ "home", "user_name" },
    }
    local snap = assert(P.load(dir, { base = "policies" }))
    local sb = snap.timeouts.sandbox
    assert.equal(8, sb.max_processes)
    assert.equal(true, sb.exec_lane)
    assert.equal(500, sb.exec_lane_report_ms)
    assert.equal(64 * 1024, sb.stream_at_bytes)
    assert.equal(10, sb.max_ports)
    assert.equal("/tmp/home", snap.isolation.home)
    assert.equal("sandbox", snap.isolation.user_name)
    assert.is_true(require("switchboard.policy.loader").is_frozen(sb))
    -- the readers read the snapshot: the walled accounts name the default user and HOME
    local passwd = require("switchboard.shell.child_env").walled_accounts(snap)
    assert.truthy(passwd:find("\nsandbox:x:1000:1000:sandbox:/tmp/home:/bin/bash\n", 1, true), passwd)
    assert.same({ max_processes = 8, process_log_bytes = 64 * 1024, process_awake_ms = 30 * 60 * 1000 },
      require("switchboard.sandboxd.processes").limits(snap))
  end)

  it("a setting the policy gives is its own, and a schema default that fails its own spec is refused", function()
    local dir = overlay{ timeouts = "sandbox.max_processes = 3\n", isolation = 'user_name = "dev"\n' }
    local snap = assert(P.load(dir, { base = "policies" }))
    assert.equal(3, snap.timeouts.sandbox.max_processes)
    assert.equal("dev", snap.isolation.user_name)
    local S_ = schema.S
    local ok, err = pcall(S_.optional, S_.int { min = 0, max = 10 }, 11)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("a schema default is not valid for its own spec: default must be between 0 and 10, got 11", 1, true), err)
    local spec = S_.optional(S_.int { min = 0, max = 10 }, 4)
    assert.equal(4, schema.default_of(spec))
    assert.is_nil(schema.default_of(S_.optional(S_.bool)))
    -- a record fills a missing field with its default, and leaves a given one alone
    local rec = S_.record { n = spec, b = S_.optional(S_.bool) }
    local v, problems = {}, {}
    rec(v, "x", function(path, msg) problems[#problems + 1] = path .. " " .. msg end)
    assert.same({}, problems)
    assert.same({ n = 4 }, v)
  end)

  it("is refused, naming its path, when the value given has the wrong type", function()
    local cases = {
      { timeouts = 'sandbox.max_processes = "eight"\n', want = "sandbox.max_processes must be a number, got string" },
      { timeouts = "sandbox.exec_lane = 1\n", want = "sandbox.exec_lane must be true or false, got integer" },
      { isolation = "home = 5\n", want = "home must be a string, got integer" },
      { isolation = 'user_name = "root"\n', want = 'user_name must not be "root" or "nobody"' },
    }
    for _, c in ipairs(cases) do
      local files = {}
      if c.timeouts then files.timeouts = c.timeouts end
      if c.isolation then files.isolation = c.isolation end
      local dir = overlay(files)
      local snap, errs = P.load(dir, { base = "policies" })
      assert.is_nil(snap, c.want)
      local text = table.concat(errs or {}, "\n")
      local file = c.timeouts and "timeouts.lua:1: " or "isolation.lua:1: "
      assert.truthy(text:find(dir .. "/" .. file .. c.want, 1, true), text)
    end
  end)
end)

-- Signals the process alone, as `kill -HUP PID` does.
local function hup(pid)
  local r = assert(core.spawn{ argv = { "kill", "-HUP", tostring(pid) }, env = S.base_env() }):wait()
  assert(r.exit == 0, "kill: " .. r.stderr)
end

describe("a reload (HUP) of a running sandboxd", function()
  it("takes a changed optional setting, and its default again once the setting is gone", async(function()
    local dir = overlay{ timeouts = S.FAST .. "\n" .. without{ "sandbox.max_processes" } }
    -- --no-walls: the subject is the policy loader's defaults across a HUP, not the walls (which
    -- the walls specs and the deploy tests run as shipped); no instance is built for 9 processes
    local h = S.start_sandboxd{ policies = dir, args = { "--no-walls" } }
    local function post(command)
      local status, _, raw = S.call(h.url, "/processes", { thread = "T-defaults", body = { command = command } })
      return status, raw:sub(1, 1) == "{" and cjson.decode(raw) or {}, raw
    end
    -- the limit a refused start names: the setting the running policy holds
    local function limit_named()
      local status, doc, raw = post("sleep 600")
      assert.equal(409, status, raw)
      assert.equal("too-many-processes", doc.reason, raw)
      return tonumber(raw:match("already runs (%d+) background processes, the most it may")) or raw
    end
    local function reload(src)
      P.write(dir .. "/timeouts.lua", src)
      local n = select(2, h.log():gsub(" sandboxd%.reload ", ""))
      hup(h.pid)
      assert.truthy(S.wait_for(function() return select(2, h.log():gsub(" sandboxd%.reload ", "")) > n end, 60000),
        "no sandboxd.reload line after HUP:\n" .. h.log())
      local last
      for line in h.log():gmatch("[^\n]* sandboxd%.reload [^\n]*") do last = line end
      assert.truthy(last:find(" ok=true", 1, true), last)
    end
    for _ = 1, 8 do
      local status, _, raw = post("sleep 600")
      assert.equal(201, status, raw)
    end
    assert.equal(8, limit_named()) -- the schema's default
    reload(S.FAST .. "\nsandbox.max_processes = 2\n")
    assert.equal(2, limit_named())
    reload(S.FAST .. "\n" .. without{ "sandbox.max_processes" })
    assert.equal(8, limit_named())
    h:stop(); h:wait()
  end))
end)

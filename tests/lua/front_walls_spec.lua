-- Fronts that serve other people (docs/isolation.md): policies/isolation.lua local_walls per
-- front, the facts choose_backend is given (which backends are configured), the list
-- `switchboard slack` refuses to start on, and the refusal that keeps a reload from turning the
-- walls off under a running bot. The walled run itself is in tests/e2e/walls_net_spec.lua and
-- the whole bot in tests/e2e/slack_walls_spec.lua.
local stack = require("switchboard.exec.stack")
local factory = require("switchboard.exec.factory")
local policy = require("switchboard.policy")
local errors = require("switchboard.exec.errors")
local P = require("support.policies")
local tmp = require("support.tmp")

local function snap_with(isolation, execution)
  local function append(text) return text and function(src) return src .. "\n" .. text .. "\n" end or nil end
  return assert(P.load(P.dir{ isolation = append(isolation), execution = append(execution) }))
end

local SANDBOX_ENV = { SANDBOX_URL = "http://127.0.0.1:9", SANDBOX_TOKEN = "st-123456" }
local function getenv_of(env) return function(name) return env[name] end end

describe("local walls per front", function()
  local root
  before_each(function() root = tmp.dir("frontwalls") end)
  after_each(function() tmp.remove_all(); P.cleanup() end)

  it("the shipped policy walls every front but a person's own terminal", function()
    local snap = snap_with()
    assert.is_false(factory.walled_locally(snap, "console"))
    assert.is_false(factory.walled_locally(snap, "exec"))
    assert.is_true(factory.walled_locally(snap, "slack"))
    assert.is_true(factory.walled_locally(snap, nil)) -- a front that names nothing: the default
    -- true/false alone still means every front
    assert.is_true(factory.walled_locally(snap_with("local_walls = true"), "console"))
    assert.is_false(factory.walled_locally(snap_with("local_walls = false"), "slack"))
  end)

  it("the slack front gets the walls; where they cannot be built it is refused, never run unwalled", function()
    local snap = snap_with()
    local asked = 0
    local built, err = stack.build({ policy = function() return snap end, workspace_root = root,
      force_backend = "local", front = "slack",
      walls_host = function() asked = asked + 1 return nil, "bwrap is not installed" end },
      { thread_key = "t", agent = "coding", snap = snap })
    assert.is_nil(built)
    assert.equal(1, asked)
    assert.truthy(errors.is_tool(err))
    assert.truthy(err.message:find("bwrap is not installed", 1, true), err.message)
    local ok = assert(stack.build({ policy = function() return snap end, workspace_root = root,
      force_backend = "local", front = "slack", walls_host = function() return { fake = true } end },
      { thread_key = "t2", agent = "coding", snap = snap }))
    assert.same({ "local executor: walled, network host (policies/isolation.lua local_walls)" }, ok.notes)
  end)

  it("a bot started without --allow-unwalled-commands refuses an unwalled executor after a reload turned the walls off", function()
    local snap = snap_with("local_walls.slack = false")
    local built, err = stack.build({ policy = function() return snap end, workspace_root = root,
      force_backend = "local", front = "slack", refuse_unwalled = true },
      { thread_key = "t", agent = "coding", snap = snap })
    assert.is_nil(built)
    assert.equal("the local executor would run agent coding's commands unwalled, next to this bot's "
      .. "secrets (policies/isolation.lua local_walls.slack is false); set it to true, point the bot at a "
      .. "sandboxd (SANDBOX_URL, SANDBOX_TOKEN), or restart it with --allow-unwalled-commands", err.message)
    -- with the flag: unwalled, and the card carries the bot's mark under the walls line
    local marked = assert(stack.build({ policy = function() return snap end, workspace_root = root,
      force_backend = "local", front = "slack", unwalled_note = "unwalled: flag" },
      { thread_key = "t", agent = "coding", snap = snap }))
    assert.same({ "local executor: unwalled — commands run as this host's user (policies/isolation.lua local_walls)",
      "unwalled: flag" }, marked.notes)
  end)

  it("unwalled_agents: the repository agents an unwalled front would run here, none when walled or on a sandbox", function()
    local open = snap_with("local_walls.slack = false")
    local list = factory.unwalled_agents({ front = "slack", getenv = getenv_of({}) }, open)
    local names = {}
    for _, u in ipairs(list) do
      names[#names + 1] = u.agent
      assert.equal("local", u.backend)
      assert.equal("policies/isolation.lua local_walls.slack", u.setting)
    end
    assert.same({ "coding", "review" }, names) -- general declares no repository: nothing runs
    assert.same({}, factory.unwalled_agents({ front = "slack", getenv = getenv_of(SANDBOX_ENV) }, open))
    assert.same({}, factory.unwalled_agents({ front = "slack", getenv = getenv_of({}) }, snap_with()))
    -- --backend local forces it even with a sandbox configured
    assert.equal(2, #factory.unwalled_agents({ front = "slack", force_backend = "local",
      getenv = getenv_of(SANDBOX_ENV) }, open))
    -- a resident that falls back to this host counts too
    local resident = snap_with("local_walls.slack = false", 'backend.review = "resident"\nresident.fallback = "local"')
    local r = factory.unwalled_agents({ front = "slack", getenv = getenv_of(SANDBOX_ENV) }, resident)
    assert.equal(1, #r)
    assert.same({ "review", "resident" }, { r[1].agent, r[1].backend })
  end)

  it("the shipped choose_backend picks the sandbox when it is configured, else local; a named agent wins", function()
    local snap = snap_with()
    local function choose(env, agent)
      return factory.backend_for({ getenv = getenv_of(env), front = "slack" }, snap, { agent = agent or "coding" })
    end
    assert.equal("sandbox", choose(SANDBOX_ENV))
    assert.equal("local", choose({}))
    assert.equal("local", choose({ SANDBOX_URL = "http://127.0.0.1:9" })) -- no token: not configured
    local named = snap_with(nil, 'backend.review = "local"')
    assert.equal("local", factory.backend_for({ getenv = getenv_of(SANDBOX_ENV) }, named, { agent = "review" }))
    assert.equal("sandbox", factory.backend_for({ getenv = getenv_of(SANDBOX_ENV) }, named, { agent = "coding" }))
    -- the facts given
    assert.same({ ["local"] = true, sandbox = true, resident = false, e2b = false, kubernetes = false },
      factory.configured(snap, { getenv = getenv_of(SANDBOX_ENV) }))
    -- in a cluster (a service account's host, or a kubeconfig) with the bearer and no SANDBOX_URL
    assert.equal("kubernetes", choose({ SANDBOX_TOKEN = "t", KUBERNETES_SERVICE_HOST = "10.0.0.1" }))
    assert.equal("sandbox", choose({ SANDBOX_TOKEN = "t", KUBERNETES_SERVICE_HOST = "10.0.0.1", SANDBOX_URL = "http://sandboxd-0.sandboxd:8080" }))
    local v = policy.decide(snap, "execution.choose_backend", nil, { agent = "coding" })
    assert.equal("local", v) -- an older caller that gives no facts gets the default
  end)

  it("the schema refuses a local_walls table without default, with an unknown front, or a value not true/false", function()
    local function refused(line, ...)
      local snap, errs = P.load(P.dir{ isolation = function(src) return src .. "\n" .. line .. "\n" end })
      assert.is_nil(snap, line)
      assert.truthy(P.has(errs, ...), table.concat(errs or {}, "\n"))
    end
    refused("local_walls = { slack = true }", "local_walls.default is required")
    refused("local_walls.teams = true", "local_walls.teams names no front")
    refused('local_walls.slack = "yes"', "local_walls.slack must be true or false")
    refused('local_walls = "yes"', "local_walls must be true, false or a table")
  end)
end)

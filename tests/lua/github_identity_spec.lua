-- The identity commands act as (docs/contract.md#credentials): chosen from the environment, least privilege by
-- toolset, resolved per command (never at executor construction), reaching the command only
-- through its environment, and said once when there is none.
local core = require("switchboard.core")
local cjson = require("cjson")
local P = require("support.policies")
local standin = require("support.github_standin")
local identity = require("switchboard.github.identity")
local factory = require("switchboard.exec.factory")

local MIN = 60 * 1000

local function shipped() return P.shipped() end

local function getenv_of(t) return function(name) return t[name] end end

local function sha256_hex(s) return core.crypto.hex(core.crypto.sha256(s)) end

local function tmpdir() return require("support.tmp").dir("identity") end

describe("github identity from the environment", function()
  local function from(env)
    return identity.from_env(getenv_of(env), { policy = shipped, log = false, redact = function() end })
  end

  it("with neither an App nor GH_TOKEN gives commands no token and says so once", function()
    local id = from({})
    assert.equal("none", id.kind)
    assert.equal("no GitHub credential: commands get no token", id:describe())
    assert.same({}, id:resolve_envs("read"))
    assert.same({}, id:resolve_envs("write"))
    assert.equal("no GitHub credential: commands get no token", id:notice())
    assert.is_nil(id:notice())
  end)

  it("passes a plain GH_TOKEN through for every scope, and registers it for redaction", function()
    local redacted = {}
    local id = identity.from_env(getenv_of({ GH_TOKEN = "ghp_plain_token_123" }),
      { policy = shipped, redact = function(s) redacted[s] = true end })
    assert.equal("env", id.kind)
    assert.equal("GH_TOKEN from the bot's environment", id:describe())
    assert.same({ GH_TOKEN = "ghp_plain_token_123" }, id:resolve_envs("read"))
    assert.same({ GH_TOKEN = "ghp_plain_token_123" }, id:resolve_envs("write"))
    assert.is_true(redacted["ghp_plain_token_123"])
    assert.is_nil(id:notice())
  end)

  it("prefers the App over GH_TOKEN and describes it in one line", function()
    local id = from({ GITHUB_APP_ID = "12345", GITHUB_APP_PRIVATE_KEY = (standin.keys()), GH_TOKEN = "x" })
    assert.equal("app", id.kind)
    assert.equal("GitHub App 12345", id:describe())
    local ghe = from({ GITHUB_APP_ID = "12345", GITHUB_APP_PRIVATE_KEY = (standin.keys()),
      GITHUB_API_URL = "https://ghe.example.com/api/v3/" })
    assert.equal("GitHub App 12345 at https://ghe.example.com/api/v3", ghe:describe())
  end)

  it("names what is missing or malformed, and fails every command with it instead of running tokenless", function()
    local cases = {
      { { GITHUB_APP_ID = "12345" }, "GITHUB_APP_ID is set but GITHUB_APP_PRIVATE_KEY is not" },
      { { GITHUB_APP_PRIVATE_KEY = "/k.pem" }, "GITHUB_APP_PRIVATE_KEY is set but GITHUB_APP_ID is not" },
      { { GITHUB_APP_ID = "12 34", GITHUB_APP_PRIVATE_KEY = "/k.pem" }, "GITHUB_APP_ID must be the App's ID" },
      { { GITHUB_APP_ID = "1", GITHUB_APP_PRIVATE_KEY = "/k.pem", GITHUB_APP_INSTALLATION_ID = "acme" },
        "GITHUB_APP_INSTALLATION_ID must be the installation's number" },
      { { GITHUB_APP_ID = "1", GITHUB_APP_PRIVATE_KEY = "/k.pem", GITHUB_API_URL = "api.github.com" },
        "GITHUB_API_URL must be an http(s) URL" },
    }
    for _, c in ipairs(cases) do
      local id = from(c[1])
      assert.equal("broken", id.kind)
      assert.matches("GitHub App misconfigured: " .. c[2], id:describe(), 1, true)
      local env, err = id:resolve_envs("read", { repo = "acme/api" })
      assert.is_nil(env)
      assert.matches(c[2], tostring(err), 1, true)
    end
  end)

  it("builds without any request or key read: nothing is minted at construction", function()
    core.run(function()
      local reads, requests = 0, 0
      local id = identity.from_env(getenv_of({ GITHUB_APP_ID = "1", GITHUB_APP_PRIVATE_KEY = "/k.pem" }), {
        policy = shipped, log = false, redact = function() end,
        read_file = function() reads = reads + 1; return nil, { kind = "not_found" } end,
        request = function() requests = requests + 1; return nil, { kind = "transport" } end,
      })
      assert.equal("app", id.kind)
      assert.equal(0, reads)
      assert.equal(0, requests)
    end)
  end)

  it("refuses a scope policies/github.lua does not define", function()
    core.run(function()
      local w = standin.world({ policy = shipped })
      local env, err = w.identity:resolve_envs("admin", { repo = "acme/api" })
      assert.is_nil(env)
      assert.matches('token scope "admin" is not defined in policies/github.lua', tostring(err), 1, true)
      assert.equal(0, #w.gh.requests)
      w.close()
    end)
  end)
end)

describe("github identity: least privilege by scope", function()
  it("mints a READ-scoped token whose permissions are exactly contents, pull_requests, issues, actions, checks and metadata — all read", function()
    core.run(function()
      local w = standin.world({ policy = shipped })
      assert(w.identity:resolve_envs("read", { repo = "acme/api" }))
      assert.equal(1, #w.gh.mints)
      local m = w.gh.mints[1]
      assert.same({ contents = "read", pull_requests = "read", issues = "read",
                    actions = "read", checks = "read", metadata = "read" }, m.asked)
      -- The body asks for permissions and nothing else (no repositories list, no extras).
      local body = cjson.decode(m.body)
      local keys = {}
      for k in pairs(body) do keys[#keys + 1] = k end
      assert.same({ "permissions" }, keys)
      w.close()
    end)
  end)

  it("every permission the read scope requests is read — never write or admin", function()
    core.run(function()
      local w = standin.world({ policy = shipped })
      assert(w.identity:resolve_envs("read", { repo = "acme/api" }))
      for name, level in pairs(w.gh.mints[1].asked) do
        assert.equal("read", level, name)
      end
      assert.is_nil(w.gh.mints[1].asked.statuses)
      assert.is_nil(w.gh.mints[1].asked.workflows)
      w.close()
    end)
  end)

  it("the write scope requests NO permissions restriction — the full grant", function()
    core.run(function()
      local w = standin.world({ policy = shipped })
      local env = assert(w.identity:resolve_envs("write", { repo = "acme/api" }))
      local m = w.gh.mints[1]
      assert.is_nil(m.body)
      assert.is_nil(m.asked)
      assert.equal("write", m.scope)
      assert.same(standin.FULL_GRANT, w.gh.tokens[env.GH_TOKEN].permissions)
      w.close()
    end)
  end)
end)

describe("github identity through the executor factory", function()
  local root
  before_each(function() root = tmpdir() end)
  after_each(function() os.execute("rm -rf '" .. root .. "'") end)

  -- The local executor of agent for thread, with the world's identity as credentials.
  local function executor(w, agent, repo, credentials)
    local sel = assert(factory.make_executor({
      policy = shipped, workspace_root = root, force_backend = "local", front = "console",
      credentials = credentials or w.identity,
      getenv = getenv_of({ PATH = os.getenv("PATH") }),
    }, { thread_key = "t-" .. agent, agent = agent, repo = repo }))
    return sel.executor
  end

  -- The sha256 of the GH_TOKEN the command saw, computed inside the command (the token itself
  -- never goes through its command line or its output).
  local HASH_CMD = [[printf %s "${GH_TOKEN-unset}" | sha256sum | cut -c1-64]]

  local function seen(ex)
    local r = assert(ex:exec(HASH_CMD, {}))
    assert.equal(0, r.exit_code, r.text)
    return r.stdout:match("^(%x+)")
  end

  it("a readonly agent's commands get the READ-scoped token; a full agent's get WRITE", function()
    core.run(function()
      local w = standin.world({ policy = shipped })
      local review = executor(w, "review", "acme/api")
      local coding = executor(w, "coding", "acme/api")
      local r_seen, c_seen = seen(review), seen(coding)
      assert.equal(1, w.gh:mints_for("read"))
      assert.equal(1, w.gh:mints_for("write"))
      for _, m in ipairs(w.gh.mints) do
        if m.scope == "read" then assert.equal(sha256_hex(m.token), r_seen) end
        if m.scope == "write" then assert.equal(sha256_hex(m.token), c_seen) end
      end
      w.close()
    end)
  end)

  it("resolves nothing at construction — building the executor mints no credential", function()
    core.run(function()
      local w = standin.world({ policy = shipped })
      executor(w, "review", "acme/api")
      executor(w, "coding", "acme/api")
      assert.equal(0, #w.gh.requests)
      assert.equal(0, #w.gh.mints)
      w.close()
    end)
  end)

  it("resolves the credential on EVERY command, so each carries the token current at its own start", function()
    core.run(function()
      local w = standin.world({ policy = shipped })
      local calls = 0
      local counting = {
        resolve_envs = function(_, scope, rctx)
          calls = calls + 1
          return w.identity:resolve_envs(scope, rctx)
        end,
      }
      local ex = executor(w, "review", "acme/api", counting)
      assert.equal(0, calls)
      local first = seen(ex)
      assert.equal(1, calls)
      w.advance(10 * MIN)
      assert.equal(first, seen(ex))            -- 50 min left: the same token, reused
      assert.equal(2, calls)
      w.advance(26 * MIN)                       -- 24 min left: a new command gets a new one
      local third = seen(ex)
      assert.equal(3, calls)
      assert.are_not.equal(first, third)
      assert.equal(2, w.gh:mints_for("read"))
      w.close()
    end)
  end)

  it("an agent without a repository gets the null executor and no credential is ever resolved", function()
    core.run(function()
      local w = standin.world({ policy = shipped })
      local sel = assert(factory.make_executor({ policy = shipped, workspace_root = root,
        credentials = w.identity }, { thread_key = "t", agent = "general" }))
      local _, err = sel.executor:exec("true", {})
      assert.is_not_nil(err)
      assert.equal(0, #w.gh.requests)
      w.close()
    end)
  end)

  it("a credential that cannot be resolved fails the command as infra, keeping GitHub's status as the span code", function()
    core.run(function()
      local w = standin.world({ policy = shipped })
      local ex = executor(w, "review", "acme/not-covered")
      local r, err = ex:exec("echo should-not-run", {})
      assert.is_nil(r)
      assert.equal("infra", err.kind)
      assert.equal("http 404", err.code)
      assert.matches("GitHub credentials don't have access to acme/not-covered", err.message, 1, true)
      w.close()
    end)
  end)
end)

describe("github identity: secrets stay out of logs and errors", function()
  it("logs mints by scope, installation and expiry only, and registers every token and JWT for redaction", function()
    core.run(function()
      local w = standin.world({ policy = shipped })
      assert(w.identity:resolve_envs("read", { repo = "acme/api" }))
      assert(w.identity:resolve_envs("write", { repo = "acme/api" }))
      local minted = 0
      for _, l in ipairs(w.logs) do
        local line = l.event .. " " .. cjson.encode(l.fields)
        assert.is_nil(w.leak(line), line)
        if l.event == "github.token_minted" then minted = minted + 1 end
      end
      assert.equal(2, minted)
      for _, s in ipairs(w.secrets()) do
        if #s >= 16 and not s:find("\n") then
          assert.is_true(w.redacted[s] == true, "not registered for redaction: " .. s:sub(1, 8) .. "…")
        end
      end
      w.close()
    end)
  end)
end)

describe("switchboard exec and the identity", function()
  local bin = require("support.bin")

  local function run_exec(args, env)
    local r
    core.run(function() r = bin.run(args, { env = env, deadline_ms = 30000 }) end)
    return r
  end

  it("says 'no token' once on stderr when the agent has a token scope and no credential exists", function()
    local state = tmpdir()
    local env = { SWITCHBOARD_STATE_DIR = state }
    local r = run_exec({ "exec", "--agent", "review", "--", "echo ${GH_TOKEN-none}" }, env)
    assert.equal(0, r.exit, r.stderr)
    assert.equal("none\n", r.stdout)
    local _, count = r.stderr:gsub("note: no GitHub credential: commands get no token\n", "")
    assert.equal(1, count)
    -- An agent without a token scope has nothing to be told.
    r = run_exec({ "exec", "--agent", "general", "--", "true" }, env)
    assert.is_nil(r.stderr:find("no GitHub credential", 1, true))
    -- A plain GH_TOKEN reaches the command through its environment.
    env.GH_TOKEN = "ghp_from_the_bot_env"
    r = run_exec({ "exec", "--agent", "review", "--", "echo ${#GH_TOKEN}" }, env)
    assert.equal("20\n", r.stdout)
    assert.is_nil(r.stderr:find("no GitHub credential", 1, true))
    os.execute("rm -rf '" .. state .. "'")
  end)
end)

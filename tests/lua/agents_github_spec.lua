-- Credential scopes (docs/contract.md#credential-scope) and per-agent resources, as the
-- shipped policies declare them.
local P = require("support.policies")
local policy = require("switchboard.policy")

describe("github scopes (item 5)", function()
  local snap
  setup(function() snap = P.shipped() end)

  it("the read scope requests exactly contents, pull_requests, issues, actions, checks, metadata — all read", function()
    local perms = {}
    for k, v in pairs(snap.github.scopes.read.permissions) do perms[k] = v end
    assert.same({
      contents = "read", pull_requests = "read", issues = "read",
      actions = "read", checks = "read", metadata = "read",
    }, perms)
  end)

  it("every permission the read scope requests is read — never write or admin", function()
    for name, level in pairs(snap.github.scopes.read.permissions) do
      assert.equal("read", level, name)
    end
    assert.is_nil(snap.github.scopes.read.permissions.statuses)
    assert.is_nil(snap.github.scopes.read.permissions.workflows)
  end)

  it("the write scope requests NO permissions restriction — the full grant", function()
    assert.is_not_nil(snap.github.scopes.write)
    assert.is_nil(snap.github.scopes.write.permissions)
  end)
end)

describe("agents (item 7)", function()
  local snap
  setup(function() snap = P.shipped() end)

  it("coding: a repository, the write token, bash/read_file/write_file, not readonly", function()
    local a = policy.agent(snap, "coding")
    assert.is_true(a.resources.repository)
    assert.equal("write", a.token_scope)
    assert.is_false(a.readonly)
    assert.same({ "bash", "read_file", "write_file" }, { a.tools[1], a.tools[2], a.tools[3] })
  end)

  it("review: a repository, readonly, the read token, a 25-minute run", function()
    local a = policy.agent(snap, "review")
    assert.is_true(a.resources.repository)
    assert.is_true(a.readonly)
    assert.equal("read", a.token_scope)
    assert.equal(25, a.max_run_minutes)
    for _, tool in ipairs(a.tools) do assert.not_equal("write_file", tool) end
  end)

  it("general: no repository, so no credential and no executor tools", function()
    local a = policy.agent(snap, "general")
    assert.is_false(a.resources.repository)
    assert.is_nil(a.token_scope)
    assert.equal(0, #a.tools)
  end)

  it("every agent has a name, a one-line description, a run length and tools", function()
    for _, name in ipairs(policy.agent_names(snap)) do
      local a = policy.agent(snap, name)
      assert.equal(name, a.name)
      assert.is_string(a.description)
      assert.is_nil(a.description:find("\n"))
      assert.is_true(a.max_run_minutes > 0)
      assert.is_table(a.tools)
      assert.is_boolean(a.readonly)
    end
  end)

  it("a readonly agent gets the read token and a full agent the write one", function()
    for _, name in ipairs(policy.agent_names(snap)) do
      local a = policy.agent(snap, name)
      if a.token_scope then
        assert.equal(a.readonly and "read" or "write", a.token_scope, name)
      end
    end
  end)

  it("the default agent is defined, and the shipped hook answers with it", function()
    assert.is_not_nil(policy.agent(snap, snap.agents.default_agent))
    assert.equal(snap.agents.default_agent, snap.agents.choose_agent({ text = "hi" }, snap.agents))
  end)
end)

describe("execution policy", function()
  local snap
  setup(function() snap = P.shipped() end)

  it("every agent runs locally by default", function()
    for _, name in ipairs(policy.agent_names(snap)) do
      assert.equal("local", snap.execution.choose_backend({ agent = name }, snap.execution))
    end
  end)

  it("names the configuration each backend needs and how a missing one is reported", function()
    assert.equal("SANDBOX_URL", snap.execution.sandbox.url_env)
    assert.equal("SANDBOX_TOKEN", snap.execution.sandbox.token_env)
    assert.equal("E2B_API_KEY", snap.execution.e2b.api_key_env)
    local text = require("switchboard.policy.template").fill(snap.execution.missing,
      { agent = "review", backend = "sandbox", setting = "SANDBOX_URL" })
    assert.truthy(text:find("agent review runs on the sandbox backend, but SANDBOX_URL is not set", 1, true))
  end)
end)

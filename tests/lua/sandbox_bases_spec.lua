-- Repository bases' pure parts (issue 37 item 3; the behaviour is tests/e2e/agent_base_spec.lua
-- and walls_base_spec.lua): the /exec body's base and baseSince, the push a webhook names, and
-- a base's age and staleness on real files.
local cjson = require("cjson")
local S = require("support.sandbox")
local routes = require("switchboard.sandboxd.routes")
local bases = require("switchboard.sandboxd.bases")
local pushes = require("switchboard.dispatch.pushes")

local snap = S.snapshot()

describe("the /exec body's base", function()
  local function parse(fields)
    local body = { command = "true" }
    for k, v in pairs(fields) do body[k] = v end
    return routes.parse(snap, "/exec", cjson.encode(body))
  end

  it("is a repository's owner/name, and baseSince whole seconds", function()
    local call = assert(parse{ base = "acme/api", baseSince = 1700000000 })
    assert.equal("acme/api", call.base)
    assert.equal(1700000000, call.base_since)
    assert.is_nil(assert(parse{}).base)
    -- any name the bot uses (a local repository's too: kubernetes_executor_spec's acme-api)
    assert.equal("acme-api", assert(parse{ base = "acme-api" }).base)
    for _, bad in ipairs({ "", ("x"):rep(257), "a\nb", "a\0b", 7, { "a/b" } }) do
      local c, status, why = parse{ base = bad }
      assert.is_nil(c)
      assert.equal(400, status)
      assert.matches("base must be a repository's name", why, 1, true)
    end
    for _, bad in ipairs({ -1, "1700000000", 2 ^ 41 }) do
      local c, status = parse{ base = "acme/api", baseSince = bad }
      assert.is_nil(c)
      assert.equal(400, status)
    end
  end)
end)

describe("a push webhook", function()
  local function payload(ref)
    return { ref = ref, repository = { full_name = "acme/api", default_branch = "main" } }
  end

  it("to the default branch names the repository; another branch or event names none", function()
    assert.equal("acme/api", (pushes.read("push", payload("refs/heads/main"), 5)))
    assert.is_nil(pushes.read("push", payload("refs/heads/feature"), 5))
    assert.is_nil(pushes.read("push", payload("refs/tags/main"), 5))
    assert.is_nil(pushes.read("issue_comment", payload("refs/heads/main"), 5))
    assert.is_nil(pushes.read("push", { ref = "refs/heads/main" }, 5))
    local d = {}
    assert.is_nil(pushes.since(d, "acme/api"))
    pushes.note(d, "acme/api", 42)
    assert.equal(42, pushes.since(d, "acme/api"))
  end)
end)

describe("a base", function()
  it("is usable while younger than bases_refresh_ms and not marked stale by a later push", function()
    local root = S.tmpdir()
    assert.is_nil(bases.info(root, "acme/api"))
    os.execute(("mkdir -p %s/ws && echo 'abc123 main 1000' > %s/meta"):format(bases.path(root, "acme/api"),
      bases.path(root, "acme/api")))
    local info = assert(bases.info(root, "acme/api"))
    assert.same({ sha = "abc123", branch = "main", made_s = 1000 }, info)
    assert.is_true(bases.usable(info, 60000, false, 1059))
    assert.is_false(bases.usable(info, 60000, false, 1060))
    assert.is_false(bases.usable(info, 0, false, 1000))
    assert.is_false(bases.stale(root, "acme/api", info))
    assert.truthy(bases.mark_stale(root, "acme/api"))
    assert.is_true(bases.stale(root, "acme/api", info))
    -- another repository's base is another directory
    assert.are_not.equal(bases.path(root, "acme/api"), bases.path(root, "acme/web"))
    -- half-made bases are removed at start
    os.execute(("mkdir -p %s.new-0a1b2c3d/ws"):format(bases.path(root, "acme/api")))
    local n
    require("switchboard.core").run(function() n = bases.recover(root, 10000, nil) end)
    assert.equal(1, n)
    assert.truthy(bases.info(root, "acme/api"))
    S.rm(root)
  end)
end)

-- Registries instead of lists (issue 42): a backend from the test tree, registered the way a
-- new one is (its own module, one registration), is everywhere the shipped ones are — the
-- --help of the commands that take --backend, --backend itself and the error naming the valid
-- ones, the policy schema (its name and its own settings), `doctor` — and it runs a command.
local core = require("switchboard.core")
local async = require("support.async")
local P = require("support.policies")
local files = require("support.files")
local policy = require("switchboard.policy")
local backends = require("switchboard.exec.backends")
local factory = require("switchboard.exec.factory")
local toy = require("support.toy_backend")

-- A command run in this process, its lines caught: status, stdout, stderr.
local function run_command(name, argv, ctx)
  local out, err = {}, {}
  ctx = ctx or {}
  ctx.out = function(l) out[#out + 1] = l end
  ctx.err = function(l) err[#err + 1] = l end
  local status = require("switchboard.commands." .. name).run(argv, ctx)
  return status, table.concat(out, "\n"), table.concat(err, "\n")
end

-- The shipped policies with policies/execution.lua's text edited.
local function execution_with(edit)
  return P.dir({ execution = function(src) return edit(src) end })
end

describe("a backend registered from the test tree", function()
  setup(function() backends.register(toy.backend) end)
  teardown(function() backends.unregister(toy.backend.name) end)
  before_each(function()
    policy.reset()
    policy.configure{ hash = P.hash, log = function() end }
  end)
  after_each(function() policy.reset(); P.cleanup() end)

  it("is listed, after the shipped ones, in --help of every command that takes --backend", function()
    for _, name in ipairs({ "exec", "console", "slack" }) do
      local status, out = run_command(name, { "--help" })
      assert.equal(0, status)
      local line = out:match("\n( *toy +[^\n]*)")
      assert.truthy(line, name .. " --help does not list the toy:\n" .. out)
      assert.truthy(line:find(toy.backend.help, 1, true), line)
      assert.truthy(out:find("kubernetes[^\n]*\n *toy "), name .. ": the toy is not after kubernetes")
      assert.falsy(out:find("{backends}", 1, true))
    end
  end)

  it("is accepted by --backend, and named by the error for a backend that does not exist", function()
    local status, _, err = run_command("exec", { "--backend", "cloud", "--", "true" })
    assert.equal(2, status)
    assert.equal('switchboard exec: --backend must be local, sandbox, resident, e2b, kubernetes or toy, got "cloud"', err)
    local prologue = require("switchboard.launch.prologue")
    assert.is_true(prologue.check_backend("exec", "toy", { err = function() end }))
  end)

  it("has its settings validated as part of policies/execution.lua, and policy may choose it", function()
    local bad = execution_with(function(src) return src .. "\ntoy = { greeting = 7 }\n" end)
    local snap, errs = P.load(bad)
    assert.is_nil(snap)
    assert.truthy(table.concat(errs, "\n"):find("toy.greeting must be a string", 1, true), table.concat(errs, "\n"))

    local unknown = execution_with(function(src) return src .. "\ntoy = { greting = \"hi\" }\n" end)
    snap, errs = P.load(unknown)
    assert.is_nil(snap)
    assert.truthy(table.concat(errs, "\n"):find("toy.greting is not a known field", 1, true), table.concat(errs, "\n"))

    local chosen = execution_with(function(src)
      return src:gsub("backend%s*=%s*{%s*default%s*=%s*\"[a-z]+\"", 'backend = { default = "toy"', 1)
        .. "\ntoy = { greeting = \"hi from policy\" }\n"
    end)
    snap, errs = P.load(chosen)
    assert.truthy(snap, errs and table.concat(errs, "\n"))
    assert.equal("hi from policy", snap.execution.toy.greeting)
    assert.equal("toy", factory.backend_for({ getenv = function() end }, snap, { agent = "coding" }))
    assert.is_true(factory.configured(snap, { getenv = function() end }).toy)

    local wrong = execution_with(function(src)
      return (src:gsub("backend%s*=%s*{%s*default%s*=%s*\"[a-z]+\"", 'backend = { default = "toys"', 1))
    end)
    snap, errs = P.load(wrong)
    assert.is_nil(snap)
    assert.truthy(table.concat(errs, "\n"):find('"kubernetes", "toy", got "toys"', 1, true), table.concat(errs, "\n"))
  end)

  it("runs a command: `exec --backend toy`, with its own settings in the command's environment", async(function()
    local dir = files.tmpdir()
    local pols = execution_with(function(src) return src .. "\ntoy = { greeting = \"hi from policy\" }\n" end)
    local status, out, err = run_command("exec", { "--backend", "toy", "--agent", "coding",
      "--workspace-root", dir, "--thread", "toy-thread", "--", "echo", "$TOY_GREETING", "from", "$PWD" },
      { policies_dir = pols })
    assert.equal(0, status, err)
    -- the thread's workspace under the toy's own root (shell/workspace.lua's safe name)
    local want = "hi from policy from " .. dir .. "/toy/toy-thread-"
    assert.equal(want, out:sub(1, #want))
    os.execute(("rm -rf '%s'"):format(dir))
  end))

  it("has its own row in `switchboard doctor`", async(function()
    local _, out = run_command("doctor", {}, { policies_dir = "policies", no_installed = true,
      getenv = function(name)
        if name == "SWITCHBOARD_WALLS_HELPER" then return "/nonexistent/switchboard-walls" end
      end })
    assert.truthy(out:find("\nok    toy       the toy greets with " .. toy.DEFAULT_GREETING, 1, true), out)
    assert.truthy(out:find("\nskip  sandboxd  ", 1, true), out)
  end))
end)

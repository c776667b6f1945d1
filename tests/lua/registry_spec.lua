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

-- Within a describe: decl registered with registry for its cases, each on a fresh policy state.
local function registered(registry, decl)
  setup(function() registry.register(decl) end)
  teardown(function() registry.unregister(decl.name) end)
  before_each(function()
    policy.reset()
    policy.configure{ hash = P.hash, log = function() end }
  end)
  after_each(function() policy.reset(); P.cleanup() end)
end

describe("a backend registered from the test tree", function()
  registered(backends, toy.backend)

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

describe("a front registered from the test tree", function()
  local fronts = require("switchboard.fronts.registry")
  local front_commands = require("switchboard.commands.front")
  local toy_front = require("support.toy_front")

  registered(fronts, toy_front.front)

  -- The shipped policies with the toy's walls off (a spec runs no walls) and its own settings.
  local function toy_policies(timeouts_line)
    return P.dir({
      isolation = function(src)
        return (src:gsub("local_walls = { default = true,", "local_walls = { default = true, toy = false,", 1))
      end,
      timeouts = function(src) return src .. "\n" .. (timeouts_line or "") .. "\n" end,
    })
  end

  it("is a command: in `switchboard --help` after the shipped fronts, with its own --help", function()
    local usage = require("switchboard.cli").usage()
    assert.truthy(usage:find("\n  slack +[^\n]*\n  toy +" .. toy_front.front.summary:gsub("%p", "%%%0")), usage)
    local cmd = front_commands.command("toy")
    local lines = {}
    assert.equal(0, cmd.run({ "--help" }, { out = function(l) lines[#lines + 1] = l end }))
    assert.equal(toy_front.HELP:gsub("\n$", ""), table.concat(lines, "\n"))
  end)

  it("has its settings validated (policies/timeouts.lua) and its key in local_walls", function()
    local snap, errs = P.load(toy_policies("toy = { drain_ms = \"soon\" }"))
    assert.is_nil(snap)
    assert.truthy(table.concat(errs, "\n"):find("toy.drain_ms must be", 1, true), table.concat(errs, "\n"))
    snap, errs = P.load(toy_policies("toy = { drain_ms = 5000 }"))
    assert.truthy(snap, errs and table.concat(errs, "\n"))
    assert.equal(5000, snap.timeouts.toy.drain_ms)
    assert.is_false(factory.walled_locally(snap, "toy"))
    local wrong = P.dir({ isolation = function(src)
      return (src:gsub("local_walls = { default = true,", "local_walls = { default = true, toys = false,", 1))
    end })
    snap, errs = P.load(wrong)
    assert.is_nil(snap)
    assert.truthy(table.concat(errs, "\n"):find("names no front (known: default, console, exec, slack, toy)", 1, true),
      table.concat(errs, "\n"))
  end)

  it("runs a command, hosted like the others: the record, /metrics, the drain on TERM", async(function()
    local dir = files.tmpdir()
    local asks = dir .. "/asks"
    local f = assert(io.open(asks, "w"))
    f:write("run `echo hi from the toy front`\n")
    f:close()
    local pols = toy_policies("toy = { drain_ms = 5000 }")
    local out, status = {}, nil
    core.go(function()
      status = front_commands.command("toy").run(
        { "--asks", asks, "--metrics-listen", "127.0.0.1:0", "--workspace-root", dir .. "/ws" },
        { policies_dir = pols, out = function(l) out[#out + 1] = l end, err = function(l) out[#out + 1] = l end,
          getenv = function(name) if name == "SWITCHBOARD_STATE_DIR" then return dir .. "/state" end return os.getenv(name) end })
    end)
    local waited = 0
    while not (toy_front.last and toy_front.last.idle) and status == nil and waited < 60000 do
      core.sleep(50); waited = waited + 50
    end
    assert.truthy(toy_front.last and toy_front.last.idle, "the toy front never went idle: " .. table.concat(out, "\n"))
    local text = table.concat(out, "\n")
    assert.truthy(text:find("[main] ", 1, true) and text:find("hi from the toy front", 1, true), text)
    -- the host's listener and the host's record
    local code, _, body = core.http.request{ method = "GET",
      url = ("http://127.0.0.1:%d/metrics"):format(toy_front.last.hosted.servers.metrics.port), deadline_ms = 10000 }
    assert.equal(200, code)
    assert.truthy(body:find("switchboard_", 1, true), body)
    assert.truthy(io.open(dir .. "/state/record.db", "r"), "no record under the state directory")
    -- the host's drain on a real TERM to this process (the host's handler is in place since
    -- READY): the front's drain with its own drain time, then the command returns 0
    local pid = assert(io.open("/proc/self/stat", "r")):read("l"):match("^(%d+)")
    assert(os.execute("kill -TERM " .. pid))
    waited = 0
    while status == nil and waited < 60000 do core.sleep(50); waited = waited + 50 end
    assert.equal(0, status)
    os.execute(("rm -rf '%s'"):format(dir))
  end))
end)

-- The local executor and the null executor on the real engine (docs/contract.md#timeouts,
-- #provisioning).
local core = require("switchboard.core")
local async = require("support.async")
local tmp = require("support.tmp")
local policy = require("switchboard.policy")
local errors = require("switchboard.exec.errors")
local local_executor = require("switchboard.exec.local")
local null_executor = require("switchboard.exec.null")
local workspace = require("switchboard.shell.workspace")

local function new(root, key)
  return local_executor.new{ root = root, thread_key = key or "t1", policy = policy.shipped }
end

describe("the local executor", function()
  local root
  before_each(function() root = tmp.dir("ws") end)
  after_each(function() tmp.remove_all() end)

  it("renders exit 0 with output, (no output), and a nonzero exit as a result", async(function()
    local ex = new(root)
    assert.are.equal("hi", ex:exec("echo hi").text)
    local r = ex:exec("true")
    assert.are.equal(0, r.exit_code)
    assert.are.equal("(no output)", r.text)
    r = ex:exec("echo oops >&2; exit 3")
    assert.are.equal(3, r.exit_code)
    assert.are.equal("exit 3: oops", r.text)
  end))

  it("a bare exit 127 with no output is an ordinary result", async(function()
    local r = new(root):exec("nosuchcommand-xyz 2>/dev/null")
    assert.are.equal(127, r.exit_code)
    assert.are.equal("exit 127:", r.text)
  end))

  it("a deadline kill is exit 124 naming the limit, the timeoutMs knob and its maximum",
    async(function()
      local t0 = core.now_ms()
      local r = new(root):exec("sleep 30", { timeout_ms = 1000 })
      local took = core.now_ms() - t0
      assert.are.equal(124, r.exit_code)
      assert.is_true(r.timed_out)
      assert.truthy(r.text:find("^exit 124:"))
      assert.truthy(r.text:find("timeoutMs", 1, true))
      assert.truthy(r.text:find("1200000", 1, true))
      assert.truthy(r.text:find("1000 ms", 1, true) or r.text:find("1s", 1, true))
      assert.is_true(took >= 950 and took < 15000, "took " .. took) -- under half of the 30 s sleep
    end))

  it("clamps the budget: 0 runs at the 1 s floor", async(function()
    local t0 = core.now_ms()
    local r = new(root):exec("sleep 30", { timeout_ms = 0 })
    assert.are.equal(124, r.exit_code)
    assert.is_true(core.now_ms() - t0 < 15000) -- under half of the 30 s sleep
  end))

  it("a hard stop is reported as a stop, never as 124", async(function()
    local stop = core.signal()
    core.go(function() core.sleep(100); stop:abort("hard stop") end)
    local r = new(root):exec("sleep 30", { signal = stop })
    assert.is_true(r.aborted)
    assert.are_not.equal(124, r.exit_code)
    assert.is_nil(r.text:find("timeoutMs", 1, true))
    assert.truthy(r.text:find("stop", 1, true))
  end))

  it("release('always') stops what still runs, and the executor keeps working", async(function()
    local ex = new(root)
    core.go(function() core.sleep(100); ex:release("always") end)
    local r = ex:exec("sleep 30")
    assert.is_true(r.aborted)
    assert.are.equal("again", ex:exec("echo again").text)
  end))

  it("inside the run reserve the command is refused with exit 124", async(function()
    local r, err = new(root):exec("echo never", { remaining_ms = 30000 })
    assert.is_nil(r)
    assert.is_true(errors.is_refused(err))
    assert.are.equal(124, err.exit_code)
    assert.truthy(tostring(err):find("run budget exhausted", 1, true))
  end))

  it("decides with the snapshot the caller captured (opts.snap) and reads the policy no more", async(function()
    local ex = local_executor.new{ root = root, thread_key = "snap",
      policy = function() error("the policy was read again at command start") end }
    local snap = policy.shipped()
    assert.are.equal("(no output)", ex:exec("true", { snap = snap }).text)
    local r, err = ex:exec("echo never", { snap = snap, remaining_ms = 30000 })
    assert.is_nil(r)
    assert.is_true(errors.is_refused(err))
    assert.is_true(ex:write_file("f", "x", { snap = snap }))
    assert.are.equal("x", ex:read_file("f", { snap = snap }))
  end))

  it("reuses a thread's workspace and keeps threads apart", async(function()
    local a, b = new(root, "thread-a"), new(root, "thread-b")
    a:exec("echo hi > marker.txt")
    assert.are.equal("hi", a:exec("cat marker.txt").text)
    assert.are.equal("hi", new(root, "thread-a"):exec("cat marker.txt").text)
    assert.are.equal(1, b:exec("test -e marker.txt").exit_code)
  end))

  it("turns thread keys into safe, distinct directory names", function()
    local names = {}
    for _, key in ipairs({ "a/b", "a_b", "../../etc", "..", ".", "C1:17000.1", ("x"):rep(300) }) do
      local name = workspace.dir_name(key)
      assert.truthy(name:match("^[%w%-_.]+$"), name)
      assert.is_nil(name:find("/", 1, true))
      assert.are_not.equal(".", name:sub(1, 1))
      assert.is_true(#name <= 80)
      assert.is_nil(names[name])
      names[name] = true
    end
  end)

  it("reads and writes files in the workspace, binary-safe", async(function()
    local ex = new(root)
    local bytes = "a\0b\255\n"
    assert.is_true(ex:write_file("sub/dir/f.bin", bytes))
    assert.are.equal(bytes, ex:read_file("sub/dir/f.bin"))
    assert.are.equal("5", ex:exec("wc -c < sub/dir/f.bin").text)
  end))

  it("refuses every escape and never follows a symlink out", async(function()
    local ex = new(root)
    local outside = tmp.dir("outside")
    local f = assert(io.open(outside .. "/secret", "w")); f:write("top secret"); f:close()
    ex:exec(("ln -s %s out; ln -s %s/secret link; ln -s /etc/passwd pw"):format(outside, outside))
    for _, path in ipairs({ "../x", "a/../../x", "/etc/passwd", "link", "pw", "out/secret" }) do
      local bytes, err = ex:read_file(path)
      assert.is_nil(bytes, path)
      assert.is_true(errors.is_tool(err), path)
      assert.truthy(tostring(err):find("outside the workspace", 1, true), tostring(err))
    end
    for _, path in ipairs({ "../evil", "/tmp/evil-sb", "out/evil" }) do
      local ok, err = ex:write_file(path, "x")
      assert.is_nil(ok, path)
      assert.truthy(tostring(err):find("outside the workspace", 1, true), tostring(err))
    end
    assert.is_nil(io.open(outside .. "/evil"))
    assert.is_nil(io.open("/tmp/evil-sb"))
    assert.is_nil(io.open(root .. "/evil"))
  end))

  it("a missing file is a legible tool error", async(function()
    local bytes, err = new(root):read_file("nope.txt")
    assert.is_nil(bytes)
    assert.is_true(errors.is_tool(err))
    assert.truthy(tostring(err):find("nope.txt does not exist", 1, true))
  end))

  it("passes credentials from resolve_envs through the environment, resolved per command",
    async(function()
      local n = 0
      local ex = local_executor.new{
        root = root, thread_key = "t", policy = policy.shipped,
        resolve_envs = function() n = n + 1; return { GH_TOKEN = "tok-" .. n } end,
      }
      assert.are.equal(0, n, "nothing is resolved at construction")
      assert.are.equal("tok-1", ex:exec('echo "$GH_TOKEN"').text)
      assert.are.equal("tok-2", ex:exec('echo "$GH_TOKEN"').text)
    end))

  it("never passes the bot's own secrets to a command", async(function()
    local ex = local_executor.new{
      root = root, thread_key = "t", policy = policy.shipped,
      getenv = function(name)
        return ({ PATH = "/usr/bin:/bin", HOME = "/root", SANDBOX_TOKEN = "bot-secret",
                  GITHUB_APP_PRIVATE_KEY = "pem" })[name]
      end,
    }
    local r = ex:exec("env")
    assert.is_nil(r.stdout:find("bot-secret", 1, true))
    assert.is_nil(r.stdout:find("GITHUB_APP_PRIVATE_KEY", 1, true))
    assert.truthy(r.stdout:find("PATH=/usr/bin:/bin", 1, true))
  end))
end)

describe("the null executor", function()
  it("answers every call with a legible tool error naming the missing repository", function()
    local ex = null_executor.new{ agent = "general", policy = policy.shipped }
    for _, call in ipairs({
      function() return ex:exec("ls") end,
      function() return ex:read_file("README.md") end,
      function() return ex:write_file("x", "y") end,
    }) do
      local r, err = call()
      assert.is_nil(r)
      assert.is_true(errors.is_tool(err))
      assert.truthy(tostring(err):find("agent general declares no repository", 1, true))
    end
  end)
end)

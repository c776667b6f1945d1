-- Black-box: the finding tools (glob, grep, list; docs/agent.md "Finding one's way") run inside
-- the walls of the thread's sandbox, through the sandbox executor against the real
-- `switchboard sandboxd` on loopback, like bash: the process that searches is the instance's —
-- its uid from the walls' block, not the host's root — and the run's hard stop ends it.
local core = require("switchboard.core")
local S = require("support.sandbox")
local sandbox = require("switchboard.exec.sandbox")
local tools = require("switchboard.agent.tools")
local policies = require("support.policies")

after_each(S.cleanup_servers)

local UID_BASE = 1500000 + (core.crypto.random_bytes(2):byte(1) * 256 + core.crypto.random_bytes(1):byte()) * 64
local UID_COUNT = 64

local dir = policies.dir{
  timeouts = function(src) return src .. "\n" .. S.FAST .. "\nsandbox.sleep_after = \"60s\"\n" end,
  isolation = function(src) return src .. ("\nuid_base = %d\nuid_count = %d\n"):format(UID_BASE, UID_COUNT) end,
}
local snap = assert(policies.load(dir))
local coding = require("switchboard.policy").agent(snap, "coding")

local function call(ex, name, input, signal)
  return tools.call(ex, snap, coding, { id = "t", name = name, input = input },
    { signal = signal or core.signal(), remaining_ms = 10 * 60000 })
end

describe("glob, grep and list inside the walls", function()
  it("search the thread's workspace as the instance's user, and a stop ends a search at once", function()
    local r = {}
    core.run(function()
      local h = S.start_sandboxd{ policies = dir }
      local ex = sandbox.new{ url = h.url, token = S.TOKEN, thread_key = "find-1", policy = function() return snap end }
      local made = call(ex, "bash", { command = "mkdir -p src/deep && printf 'alpha\\nneedle here\\n' > src/deep/a.txt"
        .. " && printf 'needle too\\n' > b.md && ln -s /proc/self/status me && printf 'x\\n' > .hidden" })
      assert.is_false(made.is_error, made.content)
      r.glob = call(ex, "glob", { pattern = "**/*.txt" }).content
      r.grep = call(ex, "grep", { pattern = "needle", glob = "*.txt" }).content
      r.list = call(ex, "list", {}).content
      -- me → /proc/self/status: ripgrep reads its own process's status, so the uid it shows is
      -- the uid the search ran as
      r.uid = call(ex, "grep", { pattern = "^Uid:", path = "me" }).content
      r.bash_status = call(ex, "bash", { command = "grep -E '^(Uid|NSpid):' /proc/self/status; readlink /proc/self/ns/user" }).content
      r.ns = call(ex, "grep", { pattern = "^NSpid:", path = "me" }).content
      -- a stop: a search over a FIFO that never ends is killed at once
      call(ex, "bash", { command = "mkfifo never" })
      local stop = core.signal()
      core.go(function() core.sleep(500); stop:abort("stop asked in this thread") end)
      local t0 = core.now_ms()
      r.stopped = call(ex, "grep", { pattern = "x", path = "never" }, stop)
      r.stop_ms = core.now_ms() - t0
      h:stop()
      h:wait()
    end)
    assert.equal("src/deep/a.txt", r.glob)
    assert.equal("src/deep/a.txt:2:needle here", r.grep)
    assert.matches("file  b.md  11 bytes", r.list, 1, true)
    assert.matches("dir   src/", r.list, 1, true)
    assert.matches("link  me", r.list, 1, true)
    -- the search ran as the instance's user (the uid its bash has, in the instance's user
    -- namespace), not as this host's user
    local uid = tonumber(r.uid:match("Uid:%s+(%d+)"))
    local sandbox_uid = tonumber(r.bash_status:match("Uid:%s+(%d+)"))
    local host_uid = tonumber(io.open("/proc/self/status"):read("a"):match("Uid:%s+(%d+)"))
    assert.is_not_nil(uid, r.uid)
    assert.equal(sandbox_uid, uid)
    assert.are_not.equal(host_uid, uid)
    -- and in the instance's pid namespace: one level, as bash's is
    assert.matches("^%d+:NSpid:\t%d+$", r.ns)
    assert.is_false(r.stopped.is_error and r.stopped.kind == "infra")
    assert.matches("stop", r.stopped.content)
  end)
end)

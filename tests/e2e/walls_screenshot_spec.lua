-- Black-box: the screenshot tool (docs/agent.md "screenshot") inside the walls of the thread's
-- sandbox, through the sandbox executor against the real `switchboard sandboxd` on loopback:
-- headless Chromium starts as the instance's unprivileged user (its own sandbox on), renders
-- a page from the workspace, and the PNG comes back through the file route byte for byte;
-- the temporary file is gone from the workspace afterwards.
local core = require("switchboard.core")
local S = require("support.sandbox")
local sandbox = require("switchboard.exec.sandbox")
local tools = require("switchboard.agent.tools")
local policies = require("support.policies")

after_each(S.cleanup_servers)

local UID_BASE = 1500000 + (core.crypto.random_bytes(2):byte(1) * 256 + core.crypto.random_bytes(1):byte()) * 64

local dir = policies.dir{
  timeouts = function(src) return src .. "\n" .. S.FAST .. "\nsandbox.sleep_after = \"60s\"\n" end,
  isolation = function(src) return src .. ("\nuid_base = %d\nuid_count = %d\n"):format(UID_BASE, 64) end,
}
local snap = assert(policies.load(dir))
local coding = require("switchboard.policy").agent(snap, "coding")

local function call(ex, name, input, attach)
  return tools.call(ex, snap, coding, { id = "t", name = name, input = input },
    { signal = core.signal(), remaining_ms = 10 * 60000, attach = attach })
end

describe("the screenshot tool inside the walls", function()
  it("renders a workspace page with Chromium as the instance's user and gives the PNG back", function()
    local r = {}
    core.run(function()
      local h = S.start_sandboxd{ policies = dir }
      local ex = sandbox.new{ url = h.url, token = S.TOKEN, thread_key = "shot-1", policy = function() return snap end }
      local made = call(ex, "write_file", { path = "p/index.html", content = "<h1 style='color:red'>walled</h1>\n" })
      assert.is_false(made.is_error, made.content)
      r.shot = call(ex, "screenshot", { url = "p/index.html", width = 320, height = 200 }, function(img) r.attached = img end)
      r.left = call(ex, "bash", { command = "ls -A; id -u" }).content
      h:stop()
      h:wait()
    end)
    assert.is_false(r.shot.is_error, type(r.shot.content) == "string" and r.shot.content or "")
    assert.equal("image", r.shot.content[1].type)
    local png = core.crypto.base64_decode(r.shot.content[1].source.data)
    assert.equal("\137PNG\r\n\26\n", png:sub(1, 8))
    assert.equal(png, r.attached.bytes)
    assert.equal(320, r.attached.width)
    assert.equal(200, r.attached.height)
    assert.is_nil(r.left:find(".switchboard-screenshot", 1, true), r.left)
    -- not root inside: Chromium ran with its own sandbox
    assert.are_not.equal("0", r.left:match("(%d+)%s*$"))
    print(("\nwalled screenshot: %s"):format(r.shot.content[2].text))
  end)

  it("Chromium's own sandbox engages inside the walls: its renderers in namespaces of their own, under seccomp", function()
    local out
    core.run(function()
      local h = S.start_sandboxd{ policies = dir }
      local ex = sandbox.new{ url = h.url, token = S.TOKEN, thread_key = "shot-2", policy = function() return snap end }
      -- Chromium as the tool runs it, kept alive by a debugging port; its renderers are
      -- looked at once they exist (at most 60 s on a loaded machine), then it is ended. The
      -- pattern [-]-type does not match this command line itself
      out = call(ex, "bash", { timeoutMs = 120000, command = [[
d=$(mktemp -d)
HOME="$d" chromium --headless --disable-gpu --no-first-run --user-data-dir="$d/p" --remote-debugging-port=9229 about:blank >/dev/null 2>&1 &
c=$!
for i in $(seq 600); do pgrep -f '[-]-type=renderer' >/dev/null && break; sleep 0.1; done
echo "bash $(readlink /proc/self/ns/user)"
sleep 1; for p in $(pgrep -f '[-]-type=renderer'); do echo "renderer $(readlink /proc/$p/ns/user) $(awk '/^Seccomp:/{print $2}' /proc/$p/status)"; done
kill $c; wait $c 2>/dev/null; rm -rf "$d"; true]] }).content
      h:stop()
      h:wait()
    end)
    local own = out:match("bash (user:%[%d+%])")
    local ns, seccomp = out:match("renderer (user:%[%d+%]) (%d)")
    assert.is_not_nil(ns, out)
    assert.are_not.equal(own, ns)
    assert.equal("2", seccomp) -- SECCOMP_MODE_FILTER
  end)
end)

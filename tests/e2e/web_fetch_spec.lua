-- Black-box: web_fetch (docs/agent.md "web_fetch") through the thread's executor, in network
-- namespaces the spec makes: a "thread" namespace (where the executor's commands run, through
-- the real local executor's bash and curl) and a "web" namespace holding a page server at
-- 203.0.113.2 (TEST-NET-3: public as far as the check goes), joined by a veth pair. Nothing
-- of the host's own network is touched.
--   - the page is fetched and converted to markdown, a redirect followed
--   - a page on the thread's own 127.0.0.1 (a server is listening there: only the check stops
--     it) is refused, by address and by a name that resolves to it (localhost)
--   - a redirect from the public page to that loopback page is refused at the hop
-- and the same from the bot, for an agent without a sandbox (core.http with public_only:
-- the engine refuses the address as it connects), run in the thread's namespace as a process
-- of its own (tests/support/web_fetch_bot.lua).
local core = require("switchboard.core")
local async = require("support.async")
local tmp = require("support.tmp")
local files = require("support.files")
local cjson = require("cjson")
local preload = require("support.preload")
local policy = require("switchboard.policy")
local local_executor = require("switchboard.exec.local")
local tools = require("switchboard.agent.tools")
local P = require("support.policies")

local snap = P.shipped()
local coding = policy.agent(snap, "coding")
local TAG = core.crypto.hex(core.crypto.random_bytes(3))
local THREAD_NS, WEB_NS = "sbwf-t-" .. TAG, "sbwf-w-" .. TAG

local function sh(cmd)
  local ok = os.execute(cmd)
  assert(ok, "failed: " .. cmd)
end

local function quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

local pids, dir = {}, nil

local function start_server(ns, bind, port, redirect_to)
  local d = dir .. "/" .. ns .. "-" .. port
  sh("mkdir -p " .. d)
  local p = io.popen(("ip netns exec %s /usr/bin/python3 tests/support/web_page_server.py --bind %s --port %d --dir %s "
    .. "--redirect-to %s >%s/err 2>&1 & echo $!"):format(ns, bind, port, d, quote(redirect_to or "http://127.0.0.1/"), d))
  pids[#pids + 1] = tonumber(p:read("l"))
  p:close()
  local t0 = core.now_ms()
  while not files.read(d .. "/ready") and core.now_ms() - t0 < 120000 do core.sleep(20) end
  assert(files.read(d .. "/ready"), files.read(d .. "/err"))
  return d
end

describe("web_fetch", function()
  setup(function()
    dir = files.tmpdir()
    sh("ip netns add " .. THREAD_NS)
    sh("ip netns add " .. WEB_NS)
    sh(("ip link add wft%s netns %s type veth peer name wfw%s netns %s"):format(TAG, THREAD_NS, TAG, WEB_NS))
    sh(("ip -n %s addr add 203.0.113.1/24 dev wft%s && ip -n %s link set wft%s up && ip -n %s link set lo up")
      :format(THREAD_NS, TAG, THREAD_NS, TAG, THREAD_NS))
    sh(("ip -n %s addr add 203.0.113.2/24 dev wfw%s && ip -n %s link set wfw%s up && ip -n %s link set lo up")
      :format(WEB_NS, TAG, WEB_NS, TAG, WEB_NS))
  end)
  teardown(function()
    for _, pid in ipairs(pids) do os.execute("kill " .. pid .. " 2>/dev/null") end
    os.execute("ip netns del " .. THREAD_NS .. " 2>/dev/null; ip netns del " .. WEB_NS .. " 2>/dev/null")
    if dir then os.execute("rm -rf '" .. dir .. "'") end
    tmp.remove_all()
  end)

  it("fetches a public page as markdown and refuses loopback, before and after a redirect", async(function()
    local web = start_server(WEB_NS, "203.0.113.2", 8080, "http://127.0.0.1:8081/secret")
    local inner = start_server(THREAD_NS, "127.0.0.1", 8081)
    local ex = local_executor.new{ root = tmp.dir("ws"), thread_key = "wf1", policy = policy.shipped }
    -- the thread's executor, in the thread's namespace: each command runs there
    local thread_ex = setmetatable({ exec = function(_, command, opts)
      return ex:exec("exec ip netns exec " .. THREAD_NS .. " bash -c " .. quote(command), opts)
    end }, { __index = ex })
    local function fetch(url)
      return tools.call(thread_ex, snap, coding, { id = "w", name = "web_fetch", input = { url = url } },
        { signal = core.signal(), remaining_ms = 600000 })
    end
    -- the loopback page is really there: without the check it would be served
    local direct = thread_ex:exec("curl -sS http://127.0.0.1:8081/secret", { snap = snap })
    assert.equal("loopback secret", direct.stdout)

    local page = fetch("http://203.0.113.2:8080/moved")
    assert.is_false(page.is_error, page.content)
    assert.equal("result", page.kind)
    assert.equal(table.concat({
      "http://203.0.113.2:8080/ (HTTP 200, text/html; charset=utf-8)",
      "",
      "# Served & converted",
      "",
      "A paragraph with [a relative link](http://203.0.113.2:8080/moved) and **bold** text.",
      "",
      "- first item",
      "- second item",
      "",
      "```",
      "if (a < b) { return 1; }",
      "```",
    }, "\n"), page.content)

    local by_address = fetch("http://127.0.0.1:8081/secret")
    assert.is_true(by_address.is_error)
    assert.matches("refused http://127.0.0.1:8081/secret: 127.0.0.1 resolves to 127.0.0.1, loopback", by_address.content, 1, true)
    local by_name = fetch("http://localhost:8081/secret")
    assert.is_true(by_name.is_error)
    assert.matches("localhost resolves to 127.0.0.1, loopback", by_name.content, 1, true)
    local redirected = fetch("http://203.0.113.2:8080/away")
    assert.is_true(redirected.is_error)
    assert.matches("refused http://127.0.0.1:8081/secret", redirected.content, 1, true)
    -- the loopback server saw only the spec's own direct request, never web_fetch's
    assert.equal("/secret\n", files.read(inner .. "/log"))
    assert.equal("/moved\n/\n/away\n", files.read(web .. "/log"))
    local private = fetch("http://10.0.0.1/")
    assert.matches("10.0.0.1, a private network", private.content, 1, true)
    local meta = fetch("http://169.254.169.254/latest/meta-data/")
    assert.matches("link-local", meta.content, 1, true)

    -- from the bot: the same page served, the same loopback page refused
    local p = io.popen(("%sip netns exec %s lua5.4 tests/support/web_fetch_bot.lua %s %s %s %s 2>&1"):format(
      preload.shell_prefix(), THREAD_NS, "http://203.0.113.2:8080/moved", "http://127.0.0.1:8081/secret",
      "http://localhost:8081/secret", "http://203.0.113.2:8080/away"))
    local lines = {}
    for line in p:lines() do lines[#lines + 1] = line end
    p:close()
    local bot = {}
    for i, line in ipairs(lines) do
      local ok, v = pcall(cjson.decode, line)
      assert(ok, table.concat(lines, "\n"))
      bot[i] = v
    end
    assert.equal(4, #bot, table.concat(lines, "\n"))
    assert.is_false(bot[1].is_error)
    assert.equal(page.content, bot[1].content)
    for i = 2, 4 do
      assert.is_true(bot[i].is_error)
      assert.matches("refused http://127.0.0.1:8081/secret: 127.0.0.1", bot[i].content:gsub("localhost", "127.0.0.1"), 1, true)
      assert.matches("web_fetch only fetches public addresses", bot[i].content, 1, true)
    end
    assert.equal("/secret\n", files.read(inner .. "/log"))
    assert.equal("/moved\n/\n/away\n/moved\n/\n/away\n", files.read(web .. "/log"))
  end))
end)

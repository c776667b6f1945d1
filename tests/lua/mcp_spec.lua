-- MCP servers as an agent's tools (docs/mcp.md) on the real engine: a stdio server (a python3
-- script of tests/support) driven through the local executor's real bash, a streamable-HTTP
-- server stand-in on loopback (session id, SSE replies, a bearer token from the environment),
-- tool names within the API's rule, a server that fails to start as a card note, and the
-- policy shape `policy check` refuses. The same through the walled sandbox and the model
-- loop: tests/e2e/mcp_spec.lua.
local core = require("switchboard.core")
local cjson = require("cjson")
local async = require("support.async")
local tmp = require("support.tmp")
local files = require("support.files")
local policy = require("switchboard.policy")
local local_executor = require("switchboard.exec.local")
local protocol = require("switchboard.agent.mcp.protocol")
local bridge = require("switchboard.agent.mcp.bridge")
local tools = require("switchboard.agent.tools")
local P = require("support.policies")

local snap = P.shipped()
local SERVER = io.popen("pwd"):read("l") .. "/tests/support/mcp_stdio_server.py"

-- the run's event stream, as far as the card's keyed notes go (dispatch/run_events.lua)
local function card()
  local c = { notes = {} }
  function c.emit(_, e) if e.type == "note" then c.notes[e.key] = e.text end end
  return c
end

local function run_ctx(ex, def, c)
  return { snap = snap, def = def, executor = ex, events = c, signal = core.signal(),
           deadline_ms = core.now_ms() + 600000, now_ms = core.now_ms }
end

local function coding_with(servers)
  local def = {}
  for k, v in pairs(policy.agent(snap, "coding")) do def[k] = v end
  def.mcp_servers = servers
  return def
end

local function call(ex, def, name, input)
  return tools.call(ex, snap, def, { id = "u1", name = name, input = input },
    { signal = core.signal(), remaining_ms = 600000 })
end

describe("MCP tool names", function()
  it("are mcp__SERVER__TOOL within ^[a-zA-Z0-9_-]{1,64}$, long ones kept apart by a hash", function()
    assert.equal("mcp__demo__echo", protocol.tool_name("demo", "echo"))
    assert.equal("mcp__my_srv__do_it_now_", protocol.tool_name("my.srv", "do it/now!"))
    local a = protocol.tool_name("server", ("x"):rep(80) .. "a")
    local b = protocol.tool_name("server", ("x"):rep(80) .. "b")
    assert.equal(64, #a)
    assert.matches("^[a-zA-Z0-9_-]+$", a)
    assert.are_not.equal(a, b)
  end)
end)

describe("a stdio MCP server through the executor", function()
  after_each(function() tmp.remove_all() end)

  it("lists every page of its tools, answers a call with its env, and says when a tool failed", async(function()
    local ex = local_executor.new{ root = tmp.dir("ws"), thread_key = "mcp1", policy = policy.shipped }
    local c = card()
    local def = bridge.attach(run_ctx(ex, coding_with{
      demo = { command = { "/usr/bin/python3", SERVER }, env = { MCP_DEMO_GREETING = "it's hello" } },
    }, c))
    local names = {}
    for _, t in ipairs(tools.definitions(snap, def)) do names[#names + 1] = t.name end
    assert.same({ "mcp__demo__echo", "mcp__demo__fail" }, { names[#names - 1], names[#names] })
    local echo = tools.definitions(snap, def)[#names - 1]
    assert.matches("Echo the text back.", echo.description, 1, true)
    assert.same({ "text" }, echo.input_schema.required)
    assert.is_nil(c.notes.mcp)
    local out = call(ex, def, "mcp__demo__echo", { text = "ping 'quoted' \"too\"" })
    assert.is_false(out.is_error)
    assert.equal("result", out.kind)
    assert.matches("echo: ping 'quoted' \"too\" %(uid %d+, greeting it's hello%)", out.content)
    local failed = call(ex, def, "mcp__demo__fail", {})
    assert.is_true(failed.is_error)
    assert.equal("it failed on purpose", failed.content)
  end))

  it("that fails to start is a named note, and its tools are not offered", async(function()
    local ex = local_executor.new{ root = tmp.dir("ws"), thread_key = "mcp2", policy = policy.shipped }
    local c = card()
    local def = bridge.attach(run_ctx(ex, coding_with{
      broken = { command = { "/usr/bin/python3", SERVER, "--crash" } },
      missing = { command = { "/nonexistent/mcp-server" } },
    }, c))
    assert.matches("MCP server broken failed to start or list its tools", c.notes.mcp, 1, true)
    assert.matches("cannot open its database", c.notes.mcp, 1, true)
    assert.matches("MCP server missing failed to start", c.notes.mcp, 1, true)
    assert.matches("its stderr: env: .*/nonexistent/mcp%-server.*: No such file or directory", c.notes.mcp)
    for _, t in ipairs(tools.definitions(snap, def)) do assert.is_nil(t.name:match("^mcp__")) end
    local out = call(ex, def, "mcp__broken__echo", { text = "x" })
    assert.is_true(out.is_error)
    assert.matches("there is no tool", out.content, 1, true)
  end))
end)

describe("a stdio MCP server that never answers", function()
  after_each(function() tmp.remove_all(); P.cleanup() end)

  it("is bounded by the command deadline and is a note", async(function()
    local dir = P.dir{ timeouts = function(src) return src .. "\nbash.floor_ms = 100\nbash.default_ms = 1500\n" end }
    local fast = assert(P.load(dir))
    local ex = local_executor.new{ root = tmp.dir("ws"), thread_key = "mcp3", policy = function() return fast end }
    local c = card()
    local def = {}
    for k, v in pairs(policy.agent(fast, "coding")) do def[k] = v end
    def.mcp_servers = { silent = { command = { "/usr/bin/python3", "-c", "import time; time.sleep(600)" } } }
    local t0 = core.now_ms()
    bridge.attach({ snap = fast, def = def, executor = ex, events = c, signal = core.signal(),
                    deadline_ms = core.now_ms() + 600000, now_ms = core.now_ms })
    local took = core.now_ms() - t0
    assert.matches("MCP server silent failed to start or list its tools (server): no answer within the command "
      .. "deadline (1500 ms)", c.notes.mcp, 1, true)
    assert.is_true(took >= 1500 and took < 60000, tostring(took))
  end))
end)

describe("HTML as markdown", function()
  local convert = require("switchboard.agent.html_markdown").convert
  it("keeps headings, links, lists, code and emphasis; drops scripts and styles; decodes entities", function()
    assert.equal("# Title & more\n\nText with a [link](https://a.example/dir/x.html) and *emphasis*.\n\n"
      .. "- one\n- two\n  1. inner\n\n```\nx < y\n  z\n```\n\ncafé é ✓ `inline`",
      convert("<html><head><title>T</title><style>p{}</style></head><body><script>alert(1)</script>"
        .. "<h1>Title &amp; more</h1><p>Text  with a <a href=\"x.html\">link</a> and <em>emphasis</em>.</p>"
        .. "<ul><li>one</li><li>two<ol><li>inner</li></ol></li></ul><pre>x &lt; y\n  z</pre>"
        .. "<p>caf&eacute; &#233; &#x2713; <code>inline</code></p><!-- a comment --></body></html>",
        "https://a.example/dir/page.html"))
  end)
end)

describe("a streamable-HTTP MCP server", function()
  local dir, pid
  local function start(token)
    dir = files.tmpdir()
    os.execute(("/usr/bin/python3 tests/support/mcp_http_standin.py --dir %s --token %s >%s/err 2>&1 & echo $! >%s/pid")
      :format(dir, token, dir, dir))
    pid = tonumber(files.read(dir .. "/pid"))
    local t0 = core.now_ms()
    while not files.read(dir .. "/port") and core.now_ms() - t0 < 120000 do core.sleep(20) end
    return "http://127.0.0.1:" .. assert(files.read(dir .. "/port"), files.read(dir .. "/err"))
  end
  after_each(function()
    if pid then os.execute("kill " .. pid .. " 2>/dev/null") end
    if dir then os.execute("rm -rf '" .. dir .. "'") end
    pid, dir = nil, nil
  end)

  it("is called from the bot with its session id and a token from the environment", async(function()
    local token = "tok-" .. core.crypto.hex(core.crypto.random_bytes(8))
    local url = start(token)
    local env = { LOOKUP_TOKEN = token }
    local c = card()
    local def = bridge.attach(run_ctx(nil, coding_with{
      lookup = { url = url .. "/mcp", headers = { Authorization = "Bearer ${LOOKUP_TOKEN}" } },
    }, c), { getenv = function(k) return env[k] end })
    assert.is_nil(c.notes.mcp)
    assert.is_true(tools.offered(snap, def, "mcp__lookup__lookup"))
    local out = call(nil, def, "mcp__lookup__lookup", { key = "k1" })
    assert.is_false(out.is_error)
    assert.equal("value of k1", out.content)
    local log = {}
    for line in files.read(dir .. "/log"):gmatch("[^\n]+") do log[#log + 1] = cjson.decode(line) end
    local methods = {}
    for i, m in ipairs(log) do
      methods[i] = m.method
      assert.is_true(m.auth_ok)
      if m.method ~= "initialize" then assert.matches("^sess%-", m.session) end
    end
    assert.same({ "initialize", "notifications/initialized", "tools/list", "tools/call" }, methods)
    assert.equal("2025-03-26", log[4].version)
    -- the server forgets its sessions: the next call is a 404, then a new session and the call
    assert.equal(200, (core.http.request{ method = "POST", url = url .. "/_expire", body = "{}", deadline_ms = 10000 }))
    local again = call(nil, def, "mcp__lookup__lookup", { key = "k2" })
    assert.is_false(again.is_error, again.content)
    assert.equal("value of k2", again.content)
    local later = {}
    for line in files.read(dir .. "/log"):gmatch("[^\n]+") do later[#later + 1] = cjson.decode(line) end
    local after = {}
    for i = 5, #later do after[#after + 1] = later[i].method end
    assert.same({ "tools/call", "initialize", "notifications/initialized", "tools/call" }, after)
    assert.are_not.equal(later[5].session, later[8].session)
  end))

  it("whose token variable is unset is a note naming the header and the variable", async(function()
    local url = start("secret-token")
    local c = card()
    bridge.attach(run_ctx(nil, coding_with{
      lookup = { url = url .. "/mcp", headers = { Authorization = "Bearer ${LOOKUP_TOKEN}" } },
    }, c), { getenv = function() return nil end })
    assert.matches("MCP server lookup failed to start or list its tools", c.notes.mcp, 1, true)
    assert.matches("header Authorization names ${LOOKUP_TOKEN}", c.notes.mcp, 1, true)
  end))
end)

describe("policy check of mcp_servers", function()
  local function check(servers_src)
    local dir = P.dir{ agents = function(src) return src .. "\nagents.coding.mcp_servers = " .. servers_src .. "\n" end }
    local bin = os.getenv("SWITCHBOARD_BIN") or "build/switchboard"
    local p = io.popen(bin .. " policy check " .. dir .. " 2>&1; echo \"rc=$?\"")
    local out = p:read("a")
    p:close()
    return out
  end
  after_each(P.cleanup)

  it("accepts the stdio and HTTP shapes and refuses a malformed one, naming the field", function()
    assert.matches("rc=0", check([[{ demo = { command = { "python3", "s.py" }, env = { A = "1" } },
      remote = { url = "https://mcp.example.com/mcp", headers = { Authorization = "Bearer ${TOKEN}" } } }]]))
    local both = check([[{ demo = { command = { "x" }, url = "https://a.example" } }]])
    assert.matches("rc=1", both)
    assert.matches("agents.coding.mcp_servers.demo must have exactly one of command", both, 1, true)
    local argv = check([[{ demo = { command = "python3 s.py" } }]])
    assert.matches("agents.coding.mcp_servers.demo.command must be a list", argv, 1, true)
    local url = check([[{ demo = { url = "file:///etc/passwd" } }]])
    assert.matches("mcp_servers.demo.url must be an http:// or https:// URL", url, 1, true)
    local name = check([[{ ["bad name"] = { url = "https://a.example" } }]])
    assert.matches("is not a valid name", name, 1, true)
    local extra = check([[{ demo = { command = { "x" }, cwd = "/" } }]])
    assert.matches("mcp_servers.demo.cwd is not a known field", extra, 1, true)
  end)
end)

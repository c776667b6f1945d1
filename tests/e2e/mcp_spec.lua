-- Black-box: an agent's stdio MCP server runs inside the walls of the thread's sandbox (the
-- real `switchboard sandboxd` on loopback) and its tool is called by the model (the Messages
-- API stand-in) through the run loop: the tool is offered as mcp__demo__echo, the model's call
-- reaches the server, and the server's answer is the next request's tool_result — computed by
-- a process of the instance's user, not the host's, with the policy's env. A second server
-- that fails to start is a note on the card; the run still answers (docs/mcp.md).
local core = require("switchboard.core")
local S = require("support.sandbox")
local sandbox = require("switchboard.exec.sandbox")
local health = require("switchboard.exec.health")
local run = require("switchboard.agent.run")
local client = require("switchboard.agent.client")
local run_card = require("switchboard.dispatch.run_card")
local files = require("support.files")
local model = require("support.model")
local policies = require("support.policies")

after_each(S.cleanup_servers)

local UID_BASE = 1500000 + (core.crypto.random_bytes(2):byte(1) * 256 + core.crypto.random_bytes(1):byte()) * 64
local dir = policies.dir{
  timeouts = function(src) return src .. "\n" .. S.FAST .. "\nsandbox.sleep_after = \"60s\"\n" end,
  isolation = function(src) return src .. ("\nuid_base = %d\nuid_count = 64\n"):format(UID_BASE) end,
  agents = function(src) return src .. [[
agents.coding.mcp_servers = {
  demo = { command = { "python3", "mcp_demo.py" }, env = { MCP_DEMO_GREETING = "from-policy" } },
  broken = { command = { "python3", "mcp_demo.py", "--crash" } },
}
]] end,
}
local snap = assert(policies.load(dir))
local coding = require("switchboard.policy").agent(snap, "coding")

describe("a stdio MCP server in the thread's sandbox", function()
  it("answers the model's call through the walls; a server that fails is a card note", function()
    local r = {}
    core.run(function()
      local m = model.start()
      local h = S.start_sandboxd{ policies = dir }
      local ex = sandbox.new{ url = h.url, token = S.TOKEN, thread_key = "mcp-1", policy = function() return snap end }
      assert(ex:write_file("mcp_demo.py", files.read("tests/support/mcp_stdio_server.py"), { snap = snap }))
      m:script{
        { content = { { type = "tool_use", id = "toolu_mcp1", name = "mcp__demo__echo", input = { text = "ping" } } } },
        { content = { { type = "text", text = "the server said it" } } },
      }
      local tracker = health.new(ex, snap)
      local card = run_card.new{ thread = "t", agent = "coding", ask = "call it" }
      r.state, r.answer = run.run{
        snap = snap, def = coding, agent = "coding", executor = tracker, tracker = tracker,
        client = client.new{ api_key = m.key, base_url = m.url, settings = snap.agents.model_api },
        events = run_card.events(card, core.now_ms), signal = core.signal(), deadline_ms = core.now_ms() + 600000, ask = "call the demo tool",
      }
      r.requests = m:requests()
      r.note = table.concat(card.notes, "\n")
      r.host_uid = tonumber(io.open("/proc/self/status"):read("a"):match("Uid:%s+(%d+)"))
      m:stop()
      h:stop()
      h:wait()
    end)
    assert.equal("done", r.state)
    assert.equal("the server said it", r.answer)
    local names = model.tool_names(r.requests[1])
    assert.truthy(table.concat(names, " "):find("mcp__demo__echo", 1, true))
    assert.falsy(table.concat(names, " "):find("mcp__broken", 1, true))
    local results = model.tool_results(r.requests[2])
    assert.equal(1, #results)
    assert.equal("toolu_mcp1", results[1].tool_use_id)
    local text = type(results[1].content) == "string" and results[1].content or results[1].content[1].text
    local uid = tonumber(text:match("^echo: ping %(uid (%d+), greeting from%-policy%)$"))
    assert.is_not_nil(uid, text)
    assert.are_not.equal(r.host_uid, uid) -- the instance's user: the walls' uid block, not this host's
    assert.matches("MCP server broken failed to start or list its tools", r.note, 1, true)
    assert.matches("cannot open its database", r.note, 1, true)
  end)
end)

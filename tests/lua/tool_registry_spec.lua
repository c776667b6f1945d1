-- The tool registry (agent/tools.lua; issue 42 item 2): every tool is declared by its own
-- module — name, definition, what it reaches, what its executor must have, policy part, call,
-- help — and the registry derives what used to be lists. A toy tool from the test tree is
-- registered with one line and the model (the Messages API stand-in) is offered it and calls
-- it through the real run loop. The process tools are offered only where the executor has
-- background processes.
local core = require("switchboard.core")
local tools = require("switchboard.agent.tools")
local tool_schema = require("switchboard.agent.tool_schema")
local run = require("switchboard.agent.run")
local client = require("switchboard.agent.client")
local run_card = require("switchboard.dispatch.run_card")
local health = require("switchboard.exec.health")
local null = require("switchboard.exec.null")
local local_ex = require("switchboard.exec.local")
local sandbox = require("switchboard.exec.sandbox")
local stack_tracing = require("switchboard.exec.tracing")
local schema = require("switchboard.policy.schema")
local policy = require("switchboard.policy")
local model = require("support.model")
local P = require("support.policies")

local snap = P.shipped()

local function names(defs)
  local out = {}
  for i, d in ipairs(defs) do out[i] = d.name end
  return out
end

describe("the tool registry", function()
  it("declares every tool the shipped agents list, each with help, and what it reaches", function()
    for _, agent in ipairs({ "coding", "review", "general" }) do
      for _, name in ipairs(policy.agent(snap, agent).tools) do
        local d = tools.get(name)
        assert.is_not_nil(d, name .. " is listed by agent " .. agent .. " but not registered")
        assert.is_string(d.help)
        for _, cap in ipairs(d.reaches) do assert.is_string(tools.CAPABILITIES[cap], name .. ": " .. cap) end
      end
    end
    assert.matches("web_search%s+web%s", tools.help())
    assert.matches("expose_port%s+processes,publish%s", tools.help())
  end)

  it("derives the lists: the loader's executor and write tools, the reads run at once, the files touched", function()
    assert.same(tools.needing_repository(), schema.EXECUTOR_TOOLS)
    assert.same(tools.WRITE_TOOLS, schema.WRITE_TOOLS)
    assert.same({ read_file = true, glob = true, grep = true, list = true, process_logs = true }, tools.READ_ONLY)
    assert.same({ read_file = true, write_file = true, edit_file = true }, tools.TOUCHES_FILE)
  end)

  it("offers the process tools and run_in_background only where the executor has processes", function()
    local coding = policy.agent(snap, "coding")
    local plain_local = local_ex.new{ root = "/nonexistent", policy = function() return snap end }
    local off = tools.definitions(snap, coding, stack_tracing.new(health.new(plain_local, snap)))
    assert.same({ "bash", "read_file", "write_file", "edit_file", "glob", "grep", "list", "web_fetch", "screenshot",
                  "todo_write" }, names(off))
    assert.is_nil(off[1].input_schema.properties.run_in_background)
    -- the sandbox executor, through the stack (tracing → health → backend), has them
    local sb = sandbox.new{ url = "http://127.0.0.1:9", token = "t", thread_key = "k", policy = function() return snap end }
    local on = tools.definitions(snap, coding, stack_tracing.new(health.new(sb, snap)))
    assert.same({ "bash", "read_file", "write_file", "edit_file", "glob", "grep", "list", "web_fetch", "screenshot",
                  "todo_write", "process_logs", "process_kill", "expose_port" }, names(on))
    assert.equal("boolean", on[1].input_schema.properties.run_in_background.type)
    -- a call of a process tool where it is not offered is the model's mistake, not a crash
    local out = tools.call(plain_local, snap, coding, { id = "x", name = "process_logs", input = { id = "p1" } },
      { signal = core.signal(), remaining_ms = 60000 })
    assert.is_true(out.is_error)
    assert.matches('there is no tool "process_logs" for this agent', out.content, 1, true)
  end)

  it("a toy tool registered from the test tree is offered to the model, which calls it", function()
    tools.register(require("support.toy_tool").TOOLS[1]) -- adding a tool: its module, and this line
    local dir = P.dir{ agents = function(src) return src .. [[
agents.toy = { description = "A toy.", resources = {}, readonly = true, max_run_minutes = 5,
               tools = { "toy_reverse", "todo_write" }, max_turns = 4 }
]] end }
    local s = assert(P.load(dir))
    local def = policy.agent(s, "toy")
    local r = {}
    core.run(function()
      local m = model.start()
      m:script{
        { content = { { type = "tool_use", id = "toolu_toy", name = "toy_reverse", input = { text = "drawkcab" } } } },
        { content = { { type = "text", text = "it said backward" } } },
      }
      local ex = health.new(null.new{ agent = "toy", policy = function() return s end }, s)
      local card = run_card.new{ thread = "t", agent = "toy", ask = "reverse it" }
      r.state, r.answer = run.run{
        snap = s, def = def, agent = "toy", executor = ex, tracker = ex,
        client = client.new{ api_key = m.key, base_url = m.url, settings = s.agents.model_api },
        -- the card directly, or through the run's event stream where runs have one (issue 42 item 1)
        card = card, events = run_card.events and run_card.events(card, core.now_ms), signal = core.signal(),
        deadline_ms = core.now_ms() + 120000, ask = "reverse drawkcab", transcript = { write = function() end },
      }
      r.requests = m:requests()
      m:stop()
    end)
    assert.equal("done", r.state)
    assert.equal("it said backward", r.answer)
    assert.same({ "toy_reverse", "todo_write" }, model.tool_names(r.requests[1]))
    local results = model.tool_results(r.requests[2])
    assert.equal("toolu_toy", results[1].tool_use_id)
    assert.equal("reversed: backward", type(results[1].content) == "string" and results[1].content
      or results[1].content[1].text)
  end)

  it("builds a tool's input schema from its compact field list, as the API's JSON schema", function()
    assert.same({ name = "t", description = "d", input_schema = {
      type = "object",
      properties = {
        path = { type = "string", description = "A path." },
        limit = { type = "integer", description = "How many." },
        list = { type = "array", items = { type = "object", properties = { s = { type = "string", enum = { "a", "b" } } },
                                           required = { "s" } } },
      },
      required = { "path", "list" },
    } }, tool_schema.tool("t", "d", {
      { "path", "string", "A path.", required = true },
      { "limit", "integer", "How many." },
      { "list", "array", required = true, items = tool_schema.object{ { "s", "string", enum = { "a", "b" }, required = true } } },
    }))
    -- no field required: no required list at all, as such a tool (list) always wrote it
    assert.same({ type = "object", properties = { path = { type = "string", description = "A path." } } },
      tool_schema.object{ { "path", "string", "A path." } })
  end)

  it("refuses a declaration that reaches what is not a capability", function()
    assert.has_error(function()
      tools.register{ name = "sneaky", reaches = { "engine" }, help = "x", definition = function() end, call = function() end }
    end)
    assert.is_nil(tools.get("sneaky"))
  end)
end)

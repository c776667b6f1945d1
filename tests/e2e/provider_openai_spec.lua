-- An agent on an OpenAI-compatible Chat Completions endpoint (docs/agent.md "Model providers"),
-- black-box: `switchboard console` with the coding agent's policy naming provider "openai",
-- against tests/support/chat_standin.py (Bearer auth, the API's checks of tool messages, the
-- streamed chat.completion.chunk events and [DONE]). One round trip with a tool call: the
-- model's tool_calls become a bash tool_use the executor runs, and its tool_result goes back
-- as a role "tool" message answering the call's id.
local core = require("switchboard.core")
local bin = require("support.bin")
local files = require("support.files")
local cards = require("support.cards")
local model = require("support.model")
local policies = require("support.policies")

local BIN = bin.path
if BIN:sub(1, 1) ~= "/" then BIN = os.getenv("PWD") .. "/" .. BIN end

describe("the openai provider", function()
  local state, m

  before_each(function() state = files.tmpdir() end)
  after_each(function()
    if m then core.run(function() m.stop() end) end
    m = nil
    os.execute("rm -rf '" .. state .. "'")
    policies.cleanup()
  end)

  local function session(answers, line, env_extra)
    local pol = policies.dir{
      agents = function(src) return src .. '\nagents.coding.provider = "openai"\nmodel_api.retry.first_ms = 50\n' end,
    }
    local r, reqs = model.session(answers, {
      start = { standin = "tests/support/chat_standin.py", key = "sk-or-spec-" .. core.crypto.hex(core.crypto.random_bytes(12)) },
      started = function(h) m = h end,
      spawn = function(h)
        return model.console_spawn(BIN, pol, line, { HOME = state, SWITCHBOARD_STATE_DIR = state,
          OPENAI_BASE_URL = h.url .. "/v1", OPENAI_API_KEY = h.key }, env_extra)
      end,
    })
    assert.is_false(r.timed_out)
    return r.stdout, r.stderr, reqs
  end

  it("runs a tool call and sends its result back as a tool message", function()
    local out, err, reqs = session({
      { content = { { type = "text", text = "Let me look." },
                    { type = "tool_use", name = "bash", input = { command = "echo from-the-tool; echo \"q\\\"uote\"" } } },
        split = 2, chunk = 5 },
      { content = { { type = "text", text = "The tool said from-the-tool." } } },
    }, "agent:coding use a command and tell me what it says")
    local c = cards.find(out, "^%[main%] agent:coding")
    assert.is_not_nil(c, out .. err)
    assert.matches("✓ done after 2 turns", c, 1, true)
    assert.matches("The tool said from-the-tool.", c, 1, true)
    assert.matches("200 tokens in / 40 out", c, 1, true) -- the endpoint's usage, summed over both turns
    assert.equal(2, #reqs)
    for _, req in ipairs(reqs) do
      assert.equal(200, req.status)
      assert.equal("Bearer " .. m.key, req.headers.authorization)
      assert.is_nil(req.headers["x-api-key"])
    end
    local first = reqs[1].body
    assert.is_true(first.stream)
    assert.equal("system", first.messages[1].role)
    assert.equal("user", first.messages[2].role)
    assert.matches("use a command and tell me what it says", first.messages[2].content, 1, true)
    local names = {}
    for _, t in ipairs(first.tools) do
      assert.equal("function", t.type)
      assert.equal("object", t["function"].parameters.type)
      names[#names + 1] = t["function"].name
    end
    assert.same({ "bash", "read_file", "write_file", "edit_file", "glob", "grep", "list", "web_fetch", "screenshot", "todo_write" }, names)
    -- the second request: the assistant's tool call as it came, then its result as a tool message
    local msgs = reqs[2].body.messages
    local call_msg, result = msgs[#msgs - 1], msgs[#msgs]
    assert.equal("assistant", call_msg.role)
    assert.equal("Let me look.", call_msg.content)
    local call = call_msg.tool_calls[1]
    assert.equal("bash", call["function"].name)
    assert.matches('^call_', call.id)
    assert.same({ command = "echo from-the-tool; echo \"q\\\"uote\"" }, require("cjson").decode(call["function"].arguments))
    assert.equal("tool", result.role)
    assert.equal(call.id, result.tool_call_id)
    assert.equal('from-the-tool\nq"uote', result.content)
    -- the key is in no output and no log line
    assert.is_nil((out .. err):find(m.key, 1, true))
  end)

  it("says which variable is missing, and a wrong key in the endpoint's words", function()
    local out = session({}, "agent:coding hello", { OPENAI_BASE_URL = false })
    assert.matches("provider openai (openai) has no address: set $OPENAI_BASE_URL", out, 1, true)
    local out2, err2 = session({}, "agent:coding hello", { OPENAI_API_KEY = "sk-wrong-key-0000" })
    assert.matches("the endpoint rejected the API key (401 invalid_request_error: Incorrect API key provided.)", out2, 1, true)
    assert.is_nil((out2 .. err2):find("sk-wrong-key-0000", 1, true))
  end)

  it("policy check refuses a provider that is not defined, or of an unknown kind", function()
    local function check(extra)
      local pol = policies.dir{ agents = function(src) return src .. "\n" .. extra .. "\n" end }
      local r
      core.run(function() r = assert(core.spawn{ argv = { BIN, "policy", "check", pol } }):wait() end)
      assert.are_not.equal(0, r.exit)
      return r.stdout .. r.stderr
    end
    assert.matches('agents.coding.provider "nope" is not "anthropic" nor a name in providers',
      check('agents.coding.provider = "nope"'), 1, true)
    assert.matches('providers.odd.kind must be one of "openai", "bedrock", "vertex", got "telepathy"',
      check('providers.odd = { kind = "telepathy" }'), 1, true)
  end)
end)

-- An agent on Claude through Google Vertex AI (docs/agent.md "Model providers"), black-box:
-- `switchboard console` with the coding agent's policy naming provider "vertex", against
-- tests/support/vertex_standin.py: the OAuth2 token endpoint verifies the service account's
-- RS256-signed JWT with its public key, and streamRawPredict takes only a token it issued and
-- answers the Messages API's events. One round trip with a tool call on one token, the body in
-- Vertex's form, and a key the token endpoint refuses said in words.
local core = require("switchboard.core")
local bin = require("support.bin")
local files = require("support.files")
local cards = require("support.cards")
local model = require("support.model")
local policies = require("support.policies")
local cjson = require("cjson")

local BIN = bin.path
if BIN:sub(1, 1) ~= "/" then BIN = os.getenv("PWD") .. "/" .. BIN end

local MODEL = "claude-sonnet-4-5@20250929"
local EMAIL = "switchboard@acme-project.iam.gserviceaccount.com"

describe("the vertex provider", function()
  local state, m

  before_each(function() state = files.tmpdir() end)
  after_each(function()
    if m then core.run(function() m.stop() end) end
    m = nil
    os.execute("rm -rf '" .. state .. "'")
    policies.cleanup()
  end)

  -- sign_with: the private key written into the key file (another one: a key Google refuses)
  local function session(answers, line, o)
    o = o or {}
    local pol = policies.dir{
      agents = function(src)
        return src .. ('\nagents.coding.provider = "vertex"\nagents.coding.model = %q\n'
          .. 'models[%q] = models["claude-sonnet-4-5"]\nmodel_api.retry.first_ms = 50\n'):format(MODEL, MODEL)
      end,
    }
    local priv, pub
    core.run(function() priv, pub = core.crypto.rsa_generate(2048) end)
    local f = assert(io.open(state .. "/public.pem", "w")); f:write(pub); f:close()
    local r, reqs = model.session(answers, {
      start = { standin = "tests/support/vertex_standin.py", args = "--public-key " .. state .. "/public.pem", key = EMAIL },
      started = function(h) m = h end,
      spawn = function(h)
        local signing = o.other_key and (core.crypto.rsa_generate(2048)) or priv
        local key = { type = "service_account", project_id = "acme-project", private_key_id = "kid-standin",
          private_key = signing, client_email = EMAIL, token_uri = h.url .. "/token" }
        local kf = assert(io.open(state .. "/key.json", "w")); kf:write(cjson.encode(key)); kf:close()
        return model.console_spawn(BIN, pol, line, { HOME = state, SWITCHBOARD_STATE_DIR = state, VERTEX_BASE_URL = h.url,
          CLOUD_ML_REGION = "europe-west1", GOOGLE_APPLICATION_CREDENTIALS = state .. "/key.json" })
      end,
    })
    assert.is_false(r.timed_out)
    return r.stdout, r.stderr, reqs, priv
  end

  it("runs a tool call with an OAuth2 token from the service account's signed JWT", function()
    local out, err, reqs, priv = session({
      { content = { { type = "text", text = "Let me look." },
                    { type = "tool_use", name = "bash", input = { command = "echo from-the-tool" } } }, split = 2, chunk = 5 },
      { content = { { type = "text", text = "The tool said from-the-tool." } } },
    }, "agent:coding use a command and tell me what it says")
    local c = cards.find(out, "^%[main%] agent:coding")
    assert.is_not_nil(c, out .. err)
    assert.matches("✓ done after 2 turns", c, 1, true)
    assert.matches("The tool said from-the-tool.", c, 1, true)
    -- one token, then two predictions on it
    assert.equal(3, #reqs)
    assert.is_true(reqs[1].token)
    assert.equal(200, reqs[1].status)
    local bearer
    for i = 2, 3 do
      local req = reqs[i]
      assert.equal(200, req.status, req.error)
      assert.equal("/v1/projects/acme-project/locations/europe-west1/publishers/anthropic/models/" .. MODEL .. ":streamRawPredict", req.path)
      assert.equal("vertex-2023-10-16", req.body.anthropic_version)
      assert.is_nil(req.body.model)
      assert.is_true(req.body.stream)
      bearer = bearer or req.headers.authorization
      assert.equal(bearer, req.headers.authorization)
    end
    assert.matches("^Bearer ya29%.standin%-", bearer)
    assert.equal("from-the-tool", model.tool_results(reqs[3])[1].content)
    -- neither the token nor the private key in any output or log line
    assert.is_nil((out .. err):find(bearer:sub(8), 1, true))
    assert.is_nil((out .. err):find(priv:match("\n([^\n]+)\n"), 1, true))
  end)

  it("a key the token endpoint refuses is said in words, and no prediction is sent", function()
    local out, _, reqs = session({}, "agent:coding hello", { other_key = true })
    assert.matches("the token endpoint refused the service account key (400: Invalid JWT Signature.)", out, 1, true)
    for _, req in ipairs(reqs) do assert.is_true(req.token) end
  end)
end)

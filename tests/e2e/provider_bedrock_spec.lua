-- An agent on Claude through Amazon Bedrock (docs/agent.md "Model providers"), black-box:
-- `switchboard console` with the coding agent's policy naming provider "bedrock", against
-- tests/support/bedrock_standin.py, which recomputes every request's AWS Signature Version 4
-- with the secret key and session token and answers InvokeModelWithResponseStream's binary
-- event stream (CRC'd frames whose base64 `bytes` carry the Messages API's events). One round
-- trip with a tool call, the model id in the path, the body in Bedrock's form, a throttling
-- exception mid-stream retried, and wrong credentials said in Bedrock's words.
package.cpath = (os.getenv("SB_BUILD_DIR") or "./build") .. "/lua/?.so;" .. package.cpath
local core = require("switchboard.core")
local bin = require("support.bin")
local files = require("support.files")
local cards = require("support.cards")
local model = require("support.model")
local policies = require("support.policies")
local bedrock = require("switchboard.agent.providers.bedrock")

local BIN = bin.path
if BIN:sub(1, 1) ~= "/" then BIN = os.getenv("PWD") .. "/" .. BIN end

local MODEL = "anthropic.claude-sonnet-4-5-20250929-v1:0"
local TOKEN = "IQoJb3JpZ2luX2VjEStandinSessionToken" .. string.rep("x", 20)
local KEY_ID = "AKIASTANDIN000000001"

describe("the bedrock provider", function()
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
      agents = function(src)
        return src .. ('\nagents.coding.provider = "bedrock"\nagents.coding.model = %q\n'
          .. 'models[%q] = models["claude-sonnet-4-5"]\nmodel_api.retry.first_ms = 50\n'):format(MODEL, MODEL)
      end,
    }
    local r, reqs = model.session(answers, {
      start = { standin = "tests/support/bedrock_standin.py", args = "--token " .. TOKEN .. " --key-id " .. KEY_ID,
        key = "wJalrXUtnFEMI/K7MDENG+bPx" .. core.crypto.hex(core.crypto.random_bytes(8)) },
      started = function(h) m = h end,
      spawn = function(h)
        return model.console_spawn(BIN, pol, line, { HOME = state, SWITCHBOARD_STATE_DIR = state, BEDROCK_BASE_URL = h.url,
          AWS_REGION = "eu-west-3", AWS_ACCESS_KEY_ID = KEY_ID, AWS_SECRET_ACCESS_KEY = h.key, AWS_SESSION_TOKEN = TOKEN }, env_extra)
      end,
    })
    assert.is_false(r.timed_out)
    return r.stdout, r.stderr, reqs
  end

  it("runs a tool call through signed requests and the binary event stream, retrying a throttled stream", function()
    local out, err, reqs = session({
      { exception = { type = "throttlingException", message = "Too many requests, please wait before trying again." } },
      { content = { { type = "text", text = "Let me look." },
                    { type = "tool_use", name = "bash", input = { command = "echo from-the-tool" } } }, split = 2, chunk = 5 },
      { content = { { type = "text", text = "The tool said from-the-tool." } } },
    }, "agent:coding use a command and tell me what it says")
    local c = cards.find(out, "^%[main%] agent:coding")
    assert.is_not_nil(c, out .. err)
    assert.matches("✓ done after 2 turns", c, 1, true)
    assert.matches("The tool said from-the-tool.", c, 1, true)
    assert.equal(3, #reqs)
    for _, req in ipairs(reqs) do
      assert.equal(200, req.status, req.error)
      assert.equal("/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke-with-response-stream", req.path)
      assert.equal(MODEL, req.model)
      assert.matches("^AWS4%-HMAC%-SHA256 Credential=" .. KEY_ID .. "/%d+/eu%-west%-3/bedrock/aws4_request, SignedHeaders=[%w;-]*host[%w;-]*, Signature=%x+$",
        req.headers.authorization)
      assert.equal(TOKEN, req.headers["x-amz-security-token"])
      assert.equal("bedrock-2023-05-31", req.body.anthropic_version)
      assert.is_nil(req.body.model)
      assert.is_nil(req.body.stream)
    end
    assert.matches("throttlingException", err, 1, true) -- the retry's log line
    -- the tool's result went back as the Messages API's tool_result (the stand-in checked the pairing)
    assert.equal("from-the-tool", model.tool_results(reqs[3])[1].content)
    assert.is_nil((out .. err):find(m.key, 1, true))
    assert.is_nil((out .. err):find(TOKEN, 1, true))
  end)

  it("says which credential is missing, and a wrong secret in Bedrock's words", function()
    local out = session({}, "agent:coding hello", { AWS_SECRET_ACCESS_KEY = false })
    assert.matches("provider bedrock (bedrock) needs AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", out, 1, true)
    local wrong = "wrongSecretKey/0000000000000000000000"
    local out2, err2 = session({}, "agent:coding hello", { AWS_SECRET_ACCESS_KEY = wrong })
    assert.matches("Bedrock refused the credentials (403 error: The request signature we calculated does not match", out2, 1, true)
    assert.is_nil((out2 .. err2):find(wrong, 1, true))
  end)

  it("frames: CRC32 and the event-stream decoder against split, corrupt and oversized input", function()
    assert.equal(0xCBF43926, bedrock.crc32("123456789"))
    -- one frame as the stand-in encodes it: headers :message-type event, :event-type chunk
    local function hdr(name, value) return string.pack(">s1B>s2", name, 7, value) end
    local headers = hdr(":message-type", "event") .. hdr(":event-type", "chunk")
    local payload = '{"bytes":"' .. core.crypto.base64_encode('{"type":"ping"}') .. '"}'
    local total = 12 + #headers + #payload + 4
    local prelude = string.pack(">I4I4", total, #headers)
    prelude = prelude .. string.pack(">I4", bedrock.crc32(prelude))
    local body = prelude .. headers .. payload
    local f = body .. string.pack(">I4", bedrock.crc32(body))
    local feed = bedrock.frames()
    local got = {}
    for i = 1, #f * 2 do
      local frames = assert(feed((f .. f):sub(i, i)))
      for _, x in ipairs(frames) do got[#got + 1] = x end
    end
    assert.equal(2, #got)
    assert.equal("chunk", got[1].headers[":event-type"])
    assert.equal(payload, got[2].payload)
    local bad = f:sub(1, 20) .. "X" .. f:sub(22)
    local frames, why = bedrock.frames()(bad)
    assert.is_nil(frames)
    assert.equal("a frame fails its CRC", tostring(why))
    local huge = string.pack(">I4I4", 1 << 30, 0)
    frames, why = bedrock.frames()(huge .. string.pack(">I4", bedrock.crc32(huge)))
    assert.is_nil(frames)
    assert.matches("a frame of 1073741824 bytes", tostring(why), 1, true)
  end)
end)

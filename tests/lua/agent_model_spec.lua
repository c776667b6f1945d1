-- The model client's pieces without a network: core.sse + agent/stream.lua assembling a
-- streamed answer however it is cut, and agent/client.lua's retry and failure rules driven by
-- a scripted request function (the black-box cases against the stand-in are in
-- tests/e2e/agent_console_spec.lua).
local core = require("switchboard.core")
local cjson = require("cjson")
local stream = require("switchboard.agent.stream")
local client = require("switchboard.agent.client")
local P = require("support.policies")

local function sse(event, doc) return ("event: %s\ndata: %s\n\n"):format(event, cjson.encode(doc)) end

-- A realistic answer: text, then a tool_use whose JSON is cut inside an escape and a UTF-8
-- character, an unknown block type, an unknown event, a ping.
local function answer_stream()
  local json = '{"command":"echo \\"h\\u00e9llo\\" é","timeoutMs":600000}'
  local parts = { json:sub(1, 14), json:sub(15, 16), json:sub(17, 31), json:sub(32, 33), json:sub(34) }
  local s = {
    sse("message_start", { type = "message_start", message = { id = "msg_1", model = "m", usage = { input_tokens = 10, cache_read_input_tokens = 5, output_tokens = 1 } } }),
    sse("ping", { type = "ping" }),
    sse("content_block_start", { type = "content_block_start", index = 0, content_block = { type = "text", text = "" } }),
    sse("content_block_delta", { type = "content_block_delta", index = 0, delta = { type = "text_delta", text = "Let me " } }),
    sse("content_block_delta", { type = "content_block_delta", index = 0, delta = { type = "text_delta", text = "look." } }),
    sse("content_block_stop", { type = "content_block_stop", index = 0 }),
    sse("content_block_start", { type = "content_block_start", index = 1, content_block = { type = "redacted_thinking", data = "x" } }),
    sse("content_block_delta", { type = "content_block_delta", index = 1, delta = { type = "signature_delta", signature = "s" } }),
    sse("content_block_stop", { type = "content_block_stop", index = 1 }),
    sse("some_future_event", { type = "some_future_event" }),
    sse("content_block_start", { type = "content_block_start", index = 2, content_block = { type = "tool_use", id = "toolu_1", name = "bash", input = {} } }),
  }
  for _, p in ipairs(parts) do
    s[#s + 1] = sse("content_block_delta", { type = "content_block_delta", index = 2, delta = { type = "input_json_delta", partial_json = p } })
  end
  s[#s + 1] = sse("content_block_stop", { type = "content_block_stop", index = 2 })
  s[#s + 1] = sse("message_delta", { type = "message_delta", delta = { stop_reason = "tool_use" }, usage = { output_tokens = 42 } })
  s[#s + 1] = sse("message_stop", { type = "message_stop" })
  return table.concat(s)
end

local function assemble(chunks)
  local p = core.sse.parser(1 << 20)
  local a = stream.new()
  for _, c in ipairs(chunks) do
    local events = assert(p:feed(c))
    for i = 1, #events, 2 do assert.is_nil(a:event(events[i], events[i + 1])) end
  end
  return a
end

describe("agent stream", function()
  it("assembles text, tool_use input fragments and usage, skipping what it does not know", function()
    local a = assemble({ answer_stream() })
    assert.is_true(a.done)
    local m = a:message()
    assert.equal("tool_use", m.stop_reason)
    assert.same({ input_tokens = 10, cache_read_input_tokens = 5, cache_creation_input_tokens = 0, output_tokens = 42 }, m.usage)
    assert.equal(3, #m.content)
    assert.same({ type = "text", text = "Let me look." }, m.content[1])
    assert.same({ type = "redacted_thinking", data = "x" }, m.content[2]) -- kept to be sent back
    assert.equal("toolu_1", m.content[3].id)
    assert.equal('echo "héllo" é', m.content[3].input.command)
    assert.equal(600000, m.content[3].input.timeoutMs)
    assert.is_nil(m.content[3].input_error)
  end)

  it("gives the same message however the bytes are cut", function()
    local s = answer_stream()
    local want = assemble({ s }):message()
    for cut = 1, #s, 7 do
      for cut2 = cut, math.min(#s, cut + 40), 13 do
        local got = assemble({ s:sub(1, cut), s:sub(cut + 1, cut2), s:sub(cut2 + 1) }):message()
        assert.same(want, got)
      end
    end
  end)

  it("marks a tool_use whose input is not a JSON object, and reads an error event", function()
    local a = assemble({
      sse("message_start", { type = "message_start", message = { id = "m" } }),
      sse("content_block_start", { type = "content_block_start", index = 0, content_block = { type = "tool_use", id = "t", name = "bash", input = {} } }),
      sse("content_block_delta", { type = "content_block_delta", index = 0, delta = { type = "input_json_delta", partial_json = '{"command": ' } }),
      sse("content_block_stop", { type = "content_block_stop", index = 0 }),
      sse("error", { type = "error", error = { type = "overloaded_error", message = "Overloaded" } }),
    })
    assert.equal("its input is not a JSON object", a:message().content[1].input_error)
    assert.same({ type = "overloaded_error", message = "Overloaded" }, a.error)
    assert.is_false(a.done)
  end)

  it("ignores a second stop of a tool call, and a delta after its stop (fuzz_bedrock_stream found both raising)", function()
    local a = assemble({
      sse("message_start", { type = "message_start", message = { id = "m" } }),
      sse("content_block_start", { type = "content_block_start", index = 0, content_block = { type = "tool_use", id = "t", name = "bash", input = {} } }),
      sse("content_block_delta", { type = "content_block_delta", index = 0, delta = { type = "input_json_delta", partial_json = '{"command": "ls"}' } }),
      sse("content_block_stop", { type = "content_block_stop", index = 0 }),
      sse("content_block_delta", { type = "content_block_delta", index = 0, delta = { type = "input_json_delta", partial_json = "{}" } }),
      sse("content_block_stop", { type = "content_block_stop", index = 0 }),
    })
    assert.same({ command = "ls" }, a:message().content[1].input)
  end)

  it("refuses an event whose data is not JSON", function()
    local a = stream.new()
    assert.equal("bad_event", a:event("message_start", "{nope").kind)
    assert.is_nil(a:event("unknown_event", "{nope")) -- unknown events are not even decoded
  end)
end)

describe("agent client", function()
  local snap = P.shipped()
  local KEY = "sk-ant-unit-0123456789abcdef"

  -- A client whose request function answers from `script`: each entry is
  -- {status, headers, body} or {chunks = {...}} (a 200 stream) or {fail = {kind, message}}.
  local function scripted(script, opts)
    opts = opts or {}
    local c = { sent = {}, slept = {} }
    local settings = setmetatable({ retry = { max_attempts = opts.attempts or 4, first_ms = 100, max_ms = 300,
      jitter_percent = opts.jitter or 0, max_retry_after_ms = 60000 } },
      { __index = snap.agents.model_api })
    c.client = client.new{
      api_key = KEY, base_url = "http://model.invalid/", settings = settings, redact = function() end,
      request = function(req)
        c.sent[#c.sent + 1] = req
        local a = table.remove(script, 1)
        if a.fail then return nil, a.fail end
        if a.chunks then
          for _, ch in ipairs(a.chunks) do req.on_chunk(ch) end
          return 200, {}, table.concat(a.chunks)
        end
        return a.status, a.headers or {}, a.body or ""
      end,
      sleep = function(ms) c.slept[#c.slept + 1] = ms; return true end,
      now_ms = opts.now_ms,
      random = opts.random,
    }
    return c
  end

  local function err_body(kind, message) return cjson.encode({ type = "error", error = { type = kind, message = message } }) end
  local OK = { chunks = { answer_stream() } }

  it("sends the key, the version and a streamed request to /v1/messages", function()
    local c = scripted({ OK })
    local m = assert(c.client:create({ model = "m", max_tokens = 10, messages = { { role = "user", content = "hi" } } }))
    assert.equal("tool_use", m.stop_reason)
    local req = c.sent[1]
    assert.equal("http://model.invalid/v1/messages", req.url)
    assert.equal(KEY, req.headers["x-api-key"])
    assert.equal("2023-06-01", req.headers["anthropic-version"])
    assert.is_true(cjson.decode(req.body).stream)
  end)

  it("waits retry-after on 429, backs off on 529 and 5xx, re-sends a cut stream", function()
    local s = answer_stream()
    local c = scripted({
      { status = 429, headers = { ["retry-after"] = "7" }, body = err_body("rate_limit_error", "slow") },
      { status = 529, body = err_body("overloaded_error", "Overloaded") },
      { chunks = { s:sub(1, #s // 2) } },                -- cut before message_stop
      OK,
    })
    assert(c.client:create({ model = "m", max_tokens = 1, messages = {} }))
    assert.equal(4, #c.sent)
    assert.same({ 7000, 200, 300 }, c.slept) -- the exponent counts every retry, as the SDKs do
  end)

  it("retries 408, 409 and x-should-retry: true as the SDKs do; retry-after-ms first; never x-should-retry: false", function()
    local c = scripted({
      { status = 408, body = err_body("timeout_error", "slow") },
      { status = 409, headers = { ["retry-after-ms"] = "250", ["retry-after"] = "9" }, body = err_body("conflict", "x") },
      { status = 400, headers = { ["x-should-retry"] = "true" }, body = err_body("invalid_request_error", "y") },
      OK,
    }, { attempts = 5 })
    assert(c.client:create({ model = "m", max_tokens = 1, messages = {} }))
    assert.same({ 100, 250, 300 }, c.slept)
    local d = scripted({ { status = 503, headers = { ["x-should-retry"] = "false" }, body = err_body("api_error", "no") } })
    local _, err = d.client:create({ model = "m", max_tokens = 1, messages = {} })
    assert.equal("fatal", err.kind)
    assert.equal(1, #d.sent)
  end)

  it("jitters the backoff: each wait within [1 - jitter, 1] of the doubling, and not in lockstep", function()
    local r = { first_ms = 500, max_ms = 8000, jitter_percent = 25 }
    local seen = {}
    for attempt = 1, 6 do
      local base = math.min(500 * 2 ^ (attempt - 1), 8000)
      for _ = 1, 50 do
        local w = client.backoff_ms(r, attempt, math.random)
        assert.is_true(w <= base and w >= base * 0.75, ("attempt %d: %d"):format(attempt, w))
        seen[w] = true
      end
    end
    local n = 0
    for _ in pairs(seen) do n = n + 1 end
    assert.is_true(n > 12) -- 300 draws over 6 bases: lockstep would give 6 values
    assert.equal(8000, client.backoff_ms(r, 9, function() return 0 end))
    assert.equal(6000, client.backoff_ms(r, 9, function() return 1 end))
  end)

  it("a prompt too long is too_long (the run compacts), not the max_tokens advice", function()
    local c = scripted({ { status = 400, body = err_body("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum") } })
    local _, err = c.client:create({ model = "m", max_tokens = 1, messages = {} })
    assert.equal("too_long", err.kind)
    assert.not_matches("max_tokens", err.message, 1, true)
  end)

  it("ends at once on 401 with what to fix, and never shows the key", function()
    local c = scripted({ { status = 401, body = err_body("authentication_error", "invalid x-api-key " .. KEY) } })
    local m, err = c.client:create({ model = "m", max_tokens = 1, messages = {} })
    assert.is_nil(m)
    assert.equal("fatal", err.kind)
    assert.matches("set ANTHROPIC_API_KEY", err.message, 1, true)
    assert.not_matches(KEY, err.message, 1, true)
    assert.equal(1, #c.sent)
  end)

  it("says the run's time is up when the API asks to wait longer than the run has", function()
    local now = 0
    local c = scripted({ { status = 429, headers = { ["retry-after"] = "30" }, body = err_body("rate_limit_error", "x") } },
      { now_ms = function() return now end })
    local _, err = c.client:create({ model = "m", max_tokens = 1, messages = {} }, { deadline_ms = 10000 })
    assert.equal("budget", err.kind)
    assert.matches("asked to wait 30s", err.message, 1, true)
  end)

  it("gives up after max_attempts, naming the last failure", function()
    local f = { fail = { kind = "transport", message = "connection refused" } }
    local c = scripted({ f, f, f, f })
    local _, err = c.client:create({ model = "m", max_tokens = 1, messages = {} })
    assert.equal("exhausted", err.kind)
    assert.matches("failed 4 times in a row; the last: the model API did not answer (transport: connection refused)", err.message, 1, true)
  end)

  it("from_env: no key is the card's text", function()
    local c, why = client.from_env(function() return nil end, snap)
    assert.is_nil(c)
    assert.equal("no_key", why.kind)
    assert.matches("ANTHROPIC_API_KEY is not set", tostring(why), 1, true)
  end)
end)

describe("core.log_scrub", function()
  it("replaces every registered secret, even after a NUL byte", function()
    local secret = "sk-ant-scrub-" .. core.crypto.hex(core.crypto.random_bytes(8))
    assert.equal("x " .. secret, core.log_scrub("x " .. secret))
    core.log_redact(secret)
    assert.equal("x [redacted]\0y [redacted]!", core.log_scrub("x " .. secret .. "\0y " .. secret .. "!"))
    assert.equal("nothing here", core.log_scrub("nothing here"))
  end)
end)

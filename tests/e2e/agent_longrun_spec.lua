-- Long agent runs through `switchboard console` as a black box (issue 24): the real binary,
-- the local backend, and the model stand-in behaving like the Messages API where a long run
-- meets it — it refuses a body that is not valid UTF-8, a prompt over its window ("prompt is
-- too long"), a tool loop whose thinking block was not sent back; it reports cache reads and
-- writes from the request's breakpoints.
local core = require("switchboard.core")
local bin = require("support.bin")
local files = require("support.files")
local cards = require("support.cards")
local model = require("support.model")
local policies = require("support.policies")

local BIN = bin.path
if BIN:sub(1, 1) ~= "/" then BIN = os.getenv("PWD") .. "/" .. BIN end

local ASK = "count to forty thousand sixty times and tell me the last number"

local function policy_dir(agents)
  return policies.dir{
    agents = function(src) return src .. "\nmodel_api.retry.first_ms = 100\nmodel_api.retry.max_ms = 400\n"
      .. (agents or "") .. "\n" end,
  }
end

local function text_answer(t, extra)
  local a = { content = { { type = "text", text = t } } }
  for k, v in pairs(extra or {}) do a[k] = v end
  return a
end
local function tool(name, input, extra)
  local a = { content = { { type = "tool_use", name = name, input = input } } }
  for k, v in pairs(extra or {}) do a[k] = v end
  return a
end

-- The blocks that carry cache_control in a request body, as "tools[i]", "system[i]", "messages[i]".
local function breakpoints(body)
  local out = {}
  for i, t in ipairs(body.tools or {}) do if t.cache_control then out[#out + 1] = "tools[" .. i .. "]" end end
  if type(body.system) == "table" then
    for i, b in ipairs(body.system) do if b.cache_control then out[#out + 1] = "system[" .. i .. "]" end end
  end
  for i, m in ipairs(body.messages) do
    if type(m.content) == "table" then
      for _, b in ipairs(m.content) do if b.cache_control then out[#out + 1] = "messages[" .. i .. "]" end end
    end
  end
  return out
end

describe("long agent runs", function()
  local state, m

  before_each(function() state = files.tmpdir() end)
  after_each(function()
    if m then core.run(function() m.stop() end) end
    m = nil
    os.execute("rm -rf '" .. state .. "'")
    policies.cleanup()
  end)

  -- Pipes `lines` into the console against the stand-in scripted with `answers`.
  -- Returns stdout, stderr, the requests the model got.
  local function session(answers, lines, o)
    o = o or {}
    local r, reqs = model.session(answers, {
      started = function(h) m = h end,
      before = function(h) if o.config then h:config(o.config) end end,
      spawn = function(h)
        local env = bin.env{ HOME = state, SWITCHBOARD_STATE_DIR = state, BIN = BIN, POL = o.policies or policy_dir(),
                             ANTHROPIC_BASE_URL = h.url, ANTHROPIC_API_KEY = h.key, GH_TOKEN = "specs-own-token" }
        local script = '"$BIN" --policies "$POL" console > out 2> err <<\'EOF\'\n' .. table.concat(lines, "\n")
          .. "\nEOF\necho \"exit=$?\" >> out"
        return { argv = { "bash", "-c", script }, env = env, cwd = state, deadline_ms = 300000 }
      end,
    })
    assert.is_false(r.timed_out, "the session did not end: " .. tostring(r.stderr))
    return files.read(state .. "/out") or "", files.read(state .. "/err") or "", reqs
  end

  local function transcript_lines()
    local p = io.popen("cat '" .. state .. "'/transcripts/*/*.jsonl 2>/dev/null")
    local out = {}
    for line in p:lines() do out[#out + 1] = line end
    p:close()
    return out
  end

  local function refused(reqs)
    local out = {}
    for i, r in ipairs(reqs) do
      if r.status ~= 200 then out[#out + 1] = ("request %d: %s %s"):format(i, tostring(r.status), tostring(r.error)) end
    end
    return out
  end

  it("a 60-turn run whose tool outputs would overflow the window finishes, compacting, and keeps the ask", function()
    local answers = {}
    for i = 1, 59 do answers[i] = tool("bash", { command = "seq 1 40000" }) end
    answers[60] = text_answer("40000, sixty times.")
    answers[61] = text_answer("The ask: count to forty thousand. Decisions: use seq. Files touched: none. "
      .. "Plan: run seq again until sixty runs are done.", { match = "about to be shortened" })
    -- a window of 30,000 tokens: each bounded result is ~9,000 (30,000 characters, its
    -- newlines escaped in JSON), so the conversation passes it after 3 turns without
    -- compaction; eliding all but the latest 2 results keeps it under for a while, then the
    -- elided lines and the turns add up and the model summarises
    local out, err, reqs = session(answers, { "agent:coding " .. ASK }, {
      config = { max_prompt_tokens = 30000 },
      policies = policy_dir('models["claude-sonnet-4-5"].context_tokens = 30000\n'
        .. "context.keep_tool_results = 2\ncontext.keep_turns = 1\n"),
    })
    local c = cards.find(out, "^%[main%] agent:coding")
    assert.is_not_nil(c, out .. err)
    assert.matches("✓ done after 60 turns", c, 1, true)
    assert.matches("40000, sixty times.", c, 1, true)
    assert.same({}, refused(reqs))
    assert.matches("🗜 context compacted %d+ times; the latest at turn %d+: ", c)
    local how = {}
    for _, line in ipairs(transcript_lines()) do
      if line:find('"type":"compaction"', 1, true) then how[line:match('"how":"(%a+)"')] = true end
    end
    assert.same({ elide = true, summary = true }, how)
    -- the 30,000-character bound, with the whole output saved where read_file reaches it
    local first = model.tool_results(reqs[2])[1].content
    assert.matches("characters cut here; the whole output is saved at switchboard%-outputs/turn%-1%-", first)
    assert.matches("^1\n2\n3\n", first)
    assert.matches("\n40000\n?$", first)
    -- the request after the summary starts from the ask and the summary
    local after
    for i, r in ipairs(reqs) do
      if r.matched then after = reqs[i + 1]; break end
    end
    assert.is_not_nil(after)
    local opening = model.text_of(after.body.messages[1])
    assert.matches("The ask: " .. ASK, opening, 1, true)
    assert.matches("Plan: run seq again", opening, 1, true)
    for _, r in ipairs(reqs) do assert.is_true(r.bytes < 30000 * 4 + 20000) end
  end)

  it("saves a long output whole in the workspace, where read_file with offset and limit reads it", function()
    local out, err, reqs = session({
      { content = { { type = "tool_use", id = "toolu_seq", name = "bash", input = { command = "seq 1 40000" } } } },
      tool("read_file", { path = "switchboard-outputs/turn-1-toolu_seq.txt", offset = 39998, limit = 5 }),
      text_answer("read"),
    }, { "agent:coding count" })
    assert.matches("✓ done after 3 turns", cards.find(out, "^%[main%] agent:coding"), 1, true, out .. err)
    assert.matches("saved at switchboard-outputs/turn-1-toolu_seq.txt", model.tool_results(reqs[2])[1].content, 1, true)
    assert.equal("[lines 39998-40000 of 40000]\n 39998\t39998\n 39999\t39999\n 40000\t40000", model.tool_results(reqs[3])[1].content)
  end)

  it("printf of bytes that are not UTF-8, read_file of a PNG and of a binary keep the run going", function()
    -- a 1×1 PNG
    local png = "\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\1\0\0\0\1\8\6\0\0\0\x1f\x15\xc4\x89\0\0\0\rIDATx\x9cc\xf8\xff"
      .. "\xff?\0\5\xfe\2\xfe\xa7\x35\x81\x84\0\0\0\0IEND\xaeB`\x82"
    local esc = png:gsub(".", function(ch) return ("\\x%02x"):format(ch:byte()) end)
    local out, err, reqs = session({
      tool("bash", { command = "printf '\\xff\\xfe'" }),
      tool("bash", { command = "printf '" .. esc .. "' > dot.png && cp /bin/true prog" }),
      tool("read_file", { path = "dot.png" }),
      tool("read_file", { path = "prog" }),
      text_answer("seen"),
    }, { "agent:coding look at these bytes" })
    local c = cards.find(out, "^%[main%] agent:coding")
    assert.matches("✓ done after 5 turns", c, 1, true, out .. err)
    assert.same({}, refused(reqs))
    assert.equal("\u{FFFD}\u{FFFD}", model.tool_results(reqs[2])[1].content)
    local img = model.tool_results(reqs[4])[1].content
    assert.equal("image", img[1].type)
    assert.equal("image/png", img[1].source.media_type)
    assert.equal(png, core.crypto.base64_decode(img[1].source.data))
    local prog = model.tool_results(reqs[5])[1].content
    assert.matches("^prog is a binary file: an ELF executable or library, %d+ bytes; its bytes are not shown", prog)
  end)

  it("puts cache breakpoints on tools, system and the latest two user turns, moving each turn; the card shows cache reads", function()
    local out, _, reqs = session({
      tool("bash", { command = "echo one" }), tool("bash", { command = "echo two" }), text_answer("done"),
    }, { "agent:coding echo twice" })
    -- the breakpoint is on the last tool, however many the coding agent has
    local last_tool = ("tools[%d]"):format(#reqs[1].body.tools)
    assert.same({ last_tool, "system[1]", "messages[1]" }, breakpoints(reqs[1].body))
    assert.same({ last_tool, "system[1]", "messages[1]", "messages[3]" }, breakpoints(reqs[2].body))
    assert.same({ last_tool, "system[1]", "messages[3]", "messages[5]" }, breakpoints(reqs[3].body))
    assert.equal(0, reqs[1].usage.cache_read_input_tokens)
    assert.is_true(reqs[1].usage.cache_creation_input_tokens > 0)
    assert.is_true(reqs[3].usage.cache_read_input_tokens > reqs[2].usage.cache_read_input_tokens)
    local c = cards.find(out, "^%[main%] agent:coding")
    assert.matches("tokens in / 60 out · cache [%d,]+ read / [%d,]+ written · %$0%.%d%d\n", c)
  end)

  it("a tool call cut by max_tokens is told as cut and retried larger; a cut answer is continued", function()
    local out, _, reqs = session({
      { content = { { type = "tool_use", name = "write_file", raw_input = '{"path":"big.txt","content":"hel' } },
        stop_reason = "max_tokens" },
      tool("write_file", { path = "big.txt", content = "hello" }),
      text_answer("The first half", { stop_reason = "max_tokens" }),
      text_answer(" and the second half."),
    }, { "agent:coding write a big file" })
    assert.same({}, refused(reqs))
    local cut = model.tool_results(reqs[2])[1]
    assert.is_true(cut.is_error)
    assert.matches("^not run: this call was cut off by the output limit %(max_tokens 16000%)", cut.content)
    assert.equal(16000, reqs[1].body.max_tokens)
    assert.equal(32000, reqs[2].body.max_tokens)
    local last = reqs[4].body.messages[#reqs[4].body.messages]
    assert.matches("cut off by the output limit. Continue it exactly where it stopped", model.text_of(last), 1, true)
    assert.equal(64000, reqs[4].body.max_tokens) -- grown again, to the model's maximum
    local c = cards.find(out, "^%[main%] agent:coding")
    assert.matches("The first half and the second half.$", c)
    -- one line for max_tokens on the card, the latest: the cut answer of turn 3
    assert.matches("✂ turn 3: the answer reached max_tokens; asked the model to continue it (max_tokens 64000)", c, 1, true)
  end)

  it("sends thinking blocks back unchanged with their signatures; the stand-in refuses a loop without them", function()
    local _, _, reqs = session({
      tool("bash", { command = "ls" }, { thinking = "Let me list the files first." }),
      text_answer("listed", { thinking = "Done." }),
    }, { "agent:coding list the files" })
    assert.same({}, refused(reqs))
    assert.same({ type = "enabled", budget_tokens = 6000 }, reqs[1].body.thinking)
    local back = reqs[2].body.messages[2].content[1]
    assert.equal("thinking", back.type)
    assert.equal("Let me list the files first.", back.thinking)
    assert.truthy(back.signature:match("^%x+$"))
    -- the same loop with its thinking block dropped: the stand-in answers as the API does
    local body = reqs[2].body
    table.remove(body.messages[2].content, 1)
    local status, answer
    core.run(function()
      m.stop()
      m = model.start()
      local cjson = require("cjson")
      status, _, answer = core.http.request{ method = "POST", url = m.url .. "/v1/messages", deadline_ms = 10000,
        headers = { ["x-api-key"] = m.key, ["anthropic-version"] = "2023-06-01", ["content-type"] = "application/json" },
        body = cjson.encode(body) }
    end)
    assert.equal(400, status)
    assert.matches('"type": "invalid_request_error"', answer, 1, true)
    assert.matches("a final `assistant` message must start with a thinking block", answer, 1, true)
  end)
end)

-- Black-box: an agent's card in Slack reads like Slack (issue 25 §4), and card updates keep to
-- Slack's rate limits (docs/slack.md "Cards"). The real `switchboard slack` against the Slack
-- stand-in (tests/support/slack_standin.py: the Web API with its 429 + Retry-After) and the
-- Messages API stand-in (tests/support/model_standin.py).
local core = require("switchboard.core")
local SL = require("support.slack")
local model = require("support.model")
local files = require("support.files")
local policies = require("support.policies")

local ANSWER = table.concat({
  "## What I found",
  "",
  "The **timeout** comes from `client.go` — see [the docs](https://example.com/docs?a=1&b=2).",
  "",
  "- first: *retry* the call",
  "- second: raise the limit",
  "",
  "```go",
  "if err != nil && x < 3 {",
  "    return err",
  "}",
  "```",
}, "\n")

-- The cards of every thread, final or not, from the stand-in's messages.
local function all_cards(st)
  local out = {}
  for _, m in pairs(st:state().messages) do
    if m.blocks ~= nil and m.blocks ~= require("cjson").null then out[#out + 1] = m end
  end
  return out
end

-- The most chat.update calls in any window of window_ms (by the stand-in's clock).
local function max_in_window(calls, window_ms)
  local at = {}
  for _, c in ipairs(calls) do at[#at + 1] = c.wall end
  table.sort(at)
  local best, j = 0, 1
  for i = 1, #at do
    while at[i] - at[j] >= window_ms do j = j + 1 end
    best = math.max(best, i - j + 1)
  end
  return best
end

describe("slack: an agent's card", function()
  local state
  before_each(function() state = files.tmpdir() end)
  after_each(function()
    os.execute("rm -rf '" .. state .. "'")
    policies.cleanup()
  end)

  it("shows the ask as a quote and the answer as mrkdwn text, not in a code block", function()
    local blocks
    core.run(function()
      local m = model.start()
      m:script{ { content = { { type = "text", text = ANSWER } } } }
      local st = SL.standin()
      local bot = SL.bot(st, { state_dir = state .. "/st", env = { ANTHROPIC_BASE_URL = m.url, ANTHROPIC_API_KEY = m.key } })
      st:envelope("events_api", SL.mention{ ts = "1700000200.000100", text = "agent:general why does the call *time out*?" })
      local final = SL.wait(function()
        for _, c in ipairs(st:cards("1700000200.000100")) do
          if SL.is_final(c) and SL.card_text(c):find("done", 1, true) then return c end
        end
      end, "the final card", 60000)
      blocks = final.blocks
      bot:signal("TERM")
      bot:wait()
      st:close()
      m.stop()
    end)
    local texts = {}
    for _, b in ipairs(blocks) do
      if b.type == "section" then texts[#texts + 1] = b.text.text end
    end
    local all = table.concat(texts, "\n")
    -- the ask: the person's words, quoted — no "$ " command line
    assert.equal("&gt; why does the call *time out*?", texts[1])
    assert.not_matches("$ ", all, 1, true)
    -- the answer: mrkdwn text; the only code block is the one the model wrote
    local answer = texts[#texts]
    assert.equal(table.concat({
      "*What I found*",
      "",
      "The *timeout* comes from `client.go` — see <https://example.com/docs?a=1&b=2|the docs>.",
      "",
      "• first: _retry_ the call",
      "• second: raise the limit",
      "",
      "```",
      "if err != nil &amp;&amp; x &lt; 3 {",
      "    return err",
      "}",
      "```",
    }, "\n"), answer)
    assert.not_matches("^```", answer:sub(1, 3), 1, true)
  end)

  it("splits a long answer over sections within Slack's limit, and puts a longer one up as a file", function()
    local para = ("The answer goes on and on about **things**. "):rep(20) -- ~900 bytes a paragraph
    local long = {}
    for i = 1, 8 do long[#long + 1] = ("## Part %d\n\n%s"):format(i, para) end
    local longer = {}
    for i = 1, 40 do longer[#longer + 1] = ("## Part %d\n\n%s"):format(i, para) end
    local split_card, file_card, upload
    core.run(function()
      local m = model.start()
      m:script{ { content = { { type = "text", text = table.concat(long, "\n\n") } } },
                { content = { { type = "text", text = table.concat(longer, "\n\n") } } } }
      local st = SL.standin()
      local bot = SL.bot(st, { state_dir = state .. "/st", env = { ANTHROPIC_BASE_URL = m.url, ANTHROPIC_API_KEY = m.key } })
      local function final_of(ts)
        return SL.wait(function()
          for _, c in ipairs(st:cards(ts)) do
            if SL.is_final(c) and SL.card_text(c):find("done", 1, true) then return c end
          end
        end, "the final card", 60000)
      end
      st:envelope("events_api", SL.mention{ ts = "1700000600.000100", text = "agent:general tell me a lot" })
      split_card = final_of("1700000600.000100")
      st:envelope("events_api", SL.mention{ ts = "1700000700.000100", text = "agent:general tell me even more" })
      file_card = final_of("1700000700.000100")
      for _, up in pairs(st:state().uploads) do upload = up end
      bot:signal("TERM")
      bot:wait()
      st:close()
      m.stop()
    end)
    -- 8 parts of ~900 bytes: three or more sections, each within the limit, all the text there
    local sections, text = 0, {}
    for _, b in ipairs(split_card.blocks) do
      if b.type == "section" then
        assert.is_true(#b.text.text <= 3000, #b.text.text)
        if b.text.text:find("Part", 1, true) then sections = sections + 1; text[#text + 1] = b.text.text end
      end
    end
    assert.is_true(sections >= 3, "sections: " .. sections)
    for i = 1, 8 do assert.matches("*Part " .. i .. "*", table.concat(text, "\n"), 1, true) end
    -- 40 parts: more than card.max_answer_blocks sections — the Markdown goes up as a file
    assert.matches("The answer is long: <https://acme.slack.com/files/", SL.card_text(file_card), 1, true)
    assert.is_not_nil(upload)
    assert.is_true(upload.completed)
    assert.equal("1700000700.000100", upload.thread_ts)
    assert.matches("^answer%-.*%.md$", upload.filename)
    assert.matches("## Part 40", upload.bytes, 1, true)
    assert.equal("Answer of agent:general", upload.title)
  end)

  it("20 runs at once stay within the policy's updates per minute, a 429's Retry-After is honoured, and every final state lands", function()
    local N = 20
    local updates, finals, rate_limited, calls_after_429, span_s
    core.run(function()
      local m = model.start()
      local script = {}
      -- each run's answer is held 12 s: its card changes every second meanwhile
      for i = 1, N do script[i] = { content = { { type = "text", text = "answer " .. i } }, hold_ms = 12000 } end
      m:script(script)
      local st = SL.standin()
      -- every card would like an update each second; all of them together get 50 a minute
      local pol = policies.dir{ slack = function(src)
        return src .. "\ncard.update_every_ms = 1 * second\ncard.updates_per_minute = 50\n"
      end }
      local bot = SL.bot(st, { state_dir = state .. "/st", policies = pol,
        env = { ANTHROPIC_BASE_URL = m.url, ANTHROPIC_API_KEY = m.key } })
      local t0 = core.wall_ms()
      for i = 1, N do
        st:envelope("events_api", SL.mention{ ts = ("1700000300.%06d"):format(i), channel = "C0GEN",
                                              text = "agent:general question " .. i })
      end
      -- once the cards are up, Slack answers the next chat.update calls 429 (Retry-After 2 s)
      SL.wait(function() return #all_cards(st) >= N end, "20 cards posted", 60000)
      st:control("rate_limit", { method = "chat.update", count = 3, retry_after = 2 })
      SL.wait(function()
        local done = 0
        for _, c in ipairs(all_cards(st)) do
          if SL.is_final(c) and SL.card_text(c):find("answer", 1, true) then done = done + 1 end
        end
        return done == N
      end, "20 final cards", 240000)
      span_s = (core.wall_ms() - t0) / 1000
      local calls = st:calls("chat.update")
      updates = calls
      finals = 0
      for _, c in ipairs(all_cards(st)) do
        if SL.is_final(c) then finals = finals + 1 end
      end
      rate_limited = 0
      local first_429
      for _, c in ipairs(calls) do
        if c.answer == 429 then
          rate_limited = rate_limited + 1
          first_429 = first_429 or c.wall
        end
      end
      calls_after_429 = {}
      for _, c in ipairs(calls) do
        if first_429 and c.wall > first_429 and c.wall < first_429 + 1500 then calls_after_429[#calls_after_429 + 1] = c end
      end
      bot:signal("TERM")
      bot:wait()
      st:close()
      m.stop()
    end)
    local most = max_in_window(updates, 60000)
    print(("slack_card_spec: %d chat.update calls for %d runs in %.1f s; at most %d in any 60 s window; %d answered 429")
      :format(#updates, N, span_s, most, rate_limited))
    assert.equal(N, finals)
    assert.equal(3, rate_limited)
    assert.is_true(most <= 50 + 1, "chat.update calls in one minute: " .. most)
    -- after a 429 with Retry-After 2 s, no card's update went out within the next 1.5 s but
    -- the retries of that call itself (webapi waits the 2 s out too)
    assert.equal(0, #calls_after_429, "calls during a Retry-After: " .. #calls_after_429)
  end)
end)

-- A long run's bounds with the real model client against the model stand-in
-- (tests/support/model_standin.py, the Messages API's protocol): spend caps per run, thread
-- and day, the SDK-like jittered retry schedule against the run's deadline, the thread's
-- history in and the conversation out, the card's thinking; and the pieces of
-- agent/context.lua on their own. The command side is a scripted executor behind the real
-- health tracker: the executor is not the point here (the e2e specs run real commands).
local core = require("switchboard.core")
local client = require("switchboard.agent.client")
local context = require("switchboard.agent.context")
local spend = require("switchboard.agent.spend")
local run = require("switchboard.agent.run")
local run_card = require("switchboard.dispatch.run_card")
local run_events = require("switchboard.dispatch.run_events")
local health = require("switchboard.exec.health")
local policy = require("switchboard.policy")
local model = require("support.model")
local P = require("support.policies")

local shipped = P.shipped()

-- The shipped snapshot with agents' fields replaced (a policy edit, without a file).
local function snap_with(agents_fields)
  local agents = setmetatable(agents_fields, { __index = shipped.agents })
  return setmetatable({ agents = agents }, { __index = shipped })
end

-- 100,000 fresh input tokens: $0.30 at the shipped price of claude-sonnet-4-5 ($3 per million)
local BIG = { input_tokens = 100000, output_tokens = 0, cache_read_input_tokens = 0, cache_creation_input_tokens = 0 }
local function bash(cmd, usage)
  return { content = { { type = "tool_use", name = "bash", input = { command = cmd } } }, usage = usage }
end
local function text(t, usage) return { content = { { type = "text", text = t } }, usage = usage } end

describe("a long run's bounds", function()
  local m
  after_each(function()
    if m then core.run(function() m.stop() end) end
    m = nil
  end)

  -- One run on the stand-in; o overrides the run's options. Returns state, answer, problem,
  -- record, the card.
  local function one_run(snap, o)
    local inner = { backend = "local", exec = o.exec or function(_, command) return { exit_code = 0, text = "ran " .. command } end }
    local tracker = health.new(inner, snap)
    local c = client.new{ api_key = m.key, base_url = m.url, settings = snap.agents.model_api }
    local card = run_card.new{ thread = o.thread or "main", agent = "coding", ask = o.ask or "go" }
    local args = {
      snap = snap, def = policy.agent(snap, "coding"), agent = "coding", executor = tracker, tracker = tracker,
      client = c, events = run_card.events(card, core.now_ms), signal = core.signal(), deadline_ms = core.now_ms() + 120000,
      ask = o.ask or "go", thread = o.thread or "main", accounts = o.accounts,
      history = o.history, now_s = o.now_s, on_turn = o.on_turn,
    }
    if o.transcript then args.events:subscribe("lines", o.transcript) end
    local s, a, p, r = run.run(args)
    return s, a, p, r, card
  end

  it("stops at the per-run cap before the next request, with the cap, its policy line and what was spent", function()
    local state, problem, card, record, nreq
    core.run(function()
      m = model.start()
      m:script{ bash("echo 1", BIG), bash("echo 2", BIG), text("never") }
      local snap = snap_with{ spend = { per_run_usd = 0.5 } }
      state, _, problem, record, card = one_run(snap, { accounts = spend.new_accounts() })
      nreq = #m.requests()
    end)
    assert.equal("spend", state)
    assert.matches("the spend cap of $0.50 per run is reached (spend.per_run_usd in policies/agents.lua): "
      .. "this run has spent $0.60, so the run stopped before its next model request with what it had done", problem, 1, true)
    assert.equal(2, nreq)
    assert.equal(2, record.turns)
    assert.is_true(record.cost_usd >= 0.6 and record.cost_usd < 0.61)
    card:ended(state, 0, "", problem)
    assert.matches("💲 stopped at a spend cap after 2 turns", card:status_line(0, 4000), 1, true)
    -- what it has done is published like a run at its turn limit: as a draft
    local agent_run = require("switchboard.dispatch.agent_run")
    local ask = { agent_def = policy.agent(shipped, "coding"), repo = "acme/api", stop = core.signal(), snap = shipped }
    assert.same({ "draft", "it reached a spend cap" }, { agent_run.publishes({}, ask, "spend") })
    -- pull_request.unfinished = "none": nothing, and the card says why
    local notes = {}
    ask.snap = { agents = { pull_request = { unfinished = "none" } } }
    ask.events = { emit = function(_, e) if e.type == "note" then notes[#notes + 1] = e.text end end }
    assert.is_nil(agent_run.publishes({}, ask, "spend"))
    assert.matches('pull_request.unfinished in policies/agents.lua is "none"', notes[1], 1, true)
    -- a finished run: ready; a shutdown: nothing
    assert.equal("ready", agent_run.publishes({}, ask, "done"))
    assert.is_nil(agent_run.publishes({ shutdown = { aborted = true } }, ask, "done"))
  end)

  it("stops at the per-thread cap across runs of the thread, and only that thread", function()
    local s1, s2, s3, p2, nreq
    core.run(function()
      m = model.start()
      local accounts = spend.new_accounts()
      local snap = snap_with{ spend = { per_thread_usd = 0.5 } }
      m:script{ text("first", BIG), text("second", BIG), text("other thread", BIG) }
      s1 = one_run(snap, { thread = "T1/C1/1.0", accounts = accounts })
      s2, _, p2 = one_run(snap, { thread = "T1/C1/1.0", accounts = accounts }) -- $0.60 now: the third is refused
      local s2b, _, p2b = one_run(snap, { thread = "T1/C1/1.0", accounts = accounts })
      assert.equal("spend", s2b)
      assert.matches("the spend cap of $0.50 per thread is reached (spend.per_thread_usd in policies/agents.lua): "
        .. "this thread has spent $0.60", p2b, 1, true)
      s3 = one_run(snap, { thread = "T1/C1/2.0", accounts = accounts })
      nreq = #m.requests()
    end)
    assert.equal("done", s1)
    assert.equal("done", s2)
    assert.is_nil(p2)
    assert.equal("done", s3)
    assert.equal(3, nreq)
  end)

  it("stops at the per-day cap of a Slack workspace, on a new day starts again, another workspace is not held", function()
    local results, problem, nreq = {}, nil, nil
    core.run(function()
      m = model.start()
      local accounts = spend.new_accounts()
      local snap = snap_with{ spend = { per_day_usd = 0.5 } }
      local day1 = function() return 1764547200 end          -- 2025-12-01 00:00 UTC
      local day2 = function() return 1764547200 + 86400 end
      m:script{ text("a", BIG), text("b", BIG), text("c", BIG), text("d", BIG) }
      results[1] = one_run(snap, { thread = "T1/C1/1.0", accounts = accounts, now_s = day1 })
      results[2] = one_run(snap, { thread = "T1/C2/2.0", accounts = accounts, now_s = day1 })
      local s
      s, _, problem = one_run(snap, { thread = "T1/C3/3.0", accounts = accounts, now_s = day1 })
      results[3] = s
      results[4] = one_run(snap, { thread = "T2/C1/1.0", accounts = accounts, now_s = day1 })
      results[5] = one_run(snap, { thread = "T1/C3/3.0", accounts = accounts, now_s = day2 })
      nreq = #m.requests()
    end)
    assert.same({ "done", "done", "spend", "done", "done" }, results)
    assert.matches("the spend cap of $0.50 per day for workspace T1 is reached (spend.per_day_usd in policies/agents.lua): "
      .. "workspace T1 has spent $0.60 today (UTC)", problem, 1, true)
    assert.equal(4, nreq)
  end)

  it("retries with jittered, growing waits and gives up before the run's deadline", function()
    local waits, err, deadline = {}, nil, nil
    core.run(function()
      m = model.start()
      local busy = { status = 529, error = { type = "overloaded_error", message = "Overloaded" } }
      local script = {}
      for i = 1, 20 do script[i] = busy end
      m:script(script)
      local settings = setmetatable({ retry = { max_attempts = 20, first_ms = 100, max_ms = 800,
        jitter_percent = 25, max_retry_after_ms = 60000 } }, { __index = shipped.agents.model_api })
      local c = client.new{ api_key = m.key, base_url = m.url, settings = settings }
      deadline = core.now_ms() + 2500
      local _
      _, err = c:create({ model = "claude-sonnet-4-5", max_tokens = 10, messages = { { role = "user", content = "hi" } } },
        { deadline_ms = deadline, on_wait = function(ms) waits[#waits + 1] = { ms = ms, left = deadline - core.now_ms() } end })
    end)
    assert.equal("budget", err.kind)
    assert.is_true(#waits >= 3)
    local jittered = false
    for i, w in ipairs(waits) do
      local base = math.floor(math.min(100 * 2 ^ (i - 1), 800))
      assert.is_true(w.ms <= base and w.ms >= base * 0.75, ("wait %s: %s ms for a base of %s"):format(i, w.ms, base))
      assert.is_true(w.ms < w.left, ("wait %s: %s ms with %s ms left"):format(i, w.ms, w.left))
      if w.ms < base then jittered = true end
    end
    assert.is_true(jittered)
    -- it stopped because the next wait would pass the deadline, not because the attempts ran out
    assert.matches("longer than the run has left", err.message, 1, true)
    assert.is_true(#waits < 19)
  end)

  it("takes the thread's history before the ask and returns the conversation as last sent, usage and cost", function()
    local record, reqs
    local history = {
      { role = "user", content = { { type = "text", text = "earlier ask" } } },
      { role = "assistant", content = { { type = "text", text = "earlier answer" } } },
    }
    core.run(function()
      m = model.start()
      m:script{ bash("echo 1"), text("done") }
      _, _, _, record = one_run(snap_with{}, { history = history, ask = "follow-up", accounts = spend.new_accounts() })
      reqs = m:requests()
    end)
    local sent = reqs[1].body.messages
    assert.equal("earlier ask", model.text_of(sent[1]))
    assert.equal("earlier answer", model.text_of(sent[2]))
    assert.equal("follow-up", model.text_of(sent[3]))
    -- the record's messages are the second request's, without the cache marks, then the final answer
    assert.equal(#reqs[2].body.messages + 1, #record.messages)
    for i, msg in ipairs(reqs[2].body.messages) do
      assert.equal(msg.role, record.messages[i].role)
      for _, b in ipairs(type(record.messages[i].content) == "table" and record.messages[i].content or {}) do
        assert.is_nil(b.cache_control)
      end
    end
    assert.equal("assistant", record.messages[#record.messages].role)
    assert.equal("done", model.text_of(record.messages[#record.messages]))
    local u = record.usage
    local want = { input_tokens = 0, output_tokens = 0, cache_read_input_tokens = 0, cache_creation_input_tokens = 0 }
    for _, r in ipairs(reqs) do
      for k in pairs(want) do want[k] = want[k] + r.usage[k] end
    end
    assert.same(want, u)
    assert.near(spend.cost(shipped.agents.models["claude-sonnet-4-5"].price, want), record.cost_usd, 1e-9)
  end)

  -- The seam of issues 23 and 24: what the thread's record keeps after an elision is the
  -- elided conversation (the loop replaces the message, so the record rewrites rather than
  -- appends), and a follow-up from it after a restart passes the API's checks: thinking
  -- blocks back unchanged with their signatures, every tool_use with its tool_result.
  it("the thread's record keeps the compacted conversation, and a follow-up from it after a restart is accepted", function()
    local record_mod = require("switchboard.store.record")
    local path = require("support.tmp").name("record")
    local stored, final, follow, reqs, state
    core.run(function()
      m = model.start()
      -- the size of a request with just the ask: the system prompt and the tools
      m:script{ text("sized") }
      one_run(snap_with{}, { accounts = spend.new_accounts() })
      local u = m:requests()[1].usage
      local base = u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens
      -- a window whose compaction threshold (75 %) is passed by the second 4 kB tool result
      -- and no longer once the first is elided
      local sonnet = shipped.agents.models["claude-sonnet-4-5"]
      local snap = snap_with{
        models = { ["claude-sonnet-4-5"] = setmetatable({ context_tokens = (base + 1600) * 100 // 75 }, { __index = sonnet }) },
        context = setmetatable({ keep_tool_results = 1 }, { __index = shipped.agents.context }),
      }
      m:script{ bash("first"), bash("second"), text("done") }
      local rec = assert(record_mod.open(path))
      local mark
      local _
      state, _, _, final = one_run(snap, { thread = "T1/C1/9.0", accounts = spend.new_accounts(),
        exec = function() return { exit_code = 0, text = ("y"):rep(4000) } end,
        on_turn = function(messages) mark = assert(rec:save_conversation("T1/C1/9.0", messages, mark)) end })
      rec:close()
      -- a restart: the conversation comes from the file
      local again = assert(record_mod.open(path))
      stored = again:conversation("T1/C1/9.0")
      again:close()
      m:script{ text("again") }
      follow = one_run(snap_with{}, { thread = "T1/C1/9.0", history = stored, ask = "follow-up", accounts = spend.new_accounts() })
      reqs = m:requests()
    end)
    for _, suffix in ipairs({ "", "-wal", "-shm" }) do os.remove(path .. suffix) end
    assert.equal("done", state)
    local elided = 0
    for _, msg in ipairs(final.messages) do
      for _, b in ipairs(type(msg.content) == "table" and msg.content or {}) do
        if b.type == "tool_result" and b.content:find("[elided", 1, true) then elided = elided + 1 end
      end
    end
    assert.equal(1, elided)
    -- what the record keeps is what was last sent, elided
    assert.same(final.messages, stored)
    local thinking = 0
    for _, msg in ipairs(stored) do
      for _, b in ipairs(type(msg.content) == "table" and msg.content or {}) do
        if b.type == "thinking" then thinking = thinking + 1 assert.is_string(b.signature) end
      end
    end
    assert.is_true(thinking >= 3)
    assert.equal("done", follow)
    local last = reqs[#reqs]
    assert.equal(200, last.status, tostring(last.error))
    assert.equal(#stored + 1, #last.body.messages)
    assert.equal("follow-up", model.text_of(last.body.messages[#last.body.messages]))
  end)

  it("when compaction cannot make the conversation fit, ends as context and says so in words", function()
    local state, problem, card, reqs
    core.run(function()
      m = model.start()
      m:config{ max_prompt_tokens = 300 } -- less than the system prompt and the tools alone
      m:script{ text("never") }
      state, _, problem, _, card = one_run(snap_with{}, { accounts = spend.new_accounts() })
      reqs = m:requests()
    end)
    assert.equal("context", state)
    assert.matches("^the conversation %(~%d+ tokens%) no longer fits the model's window of 200000 tokens, and "
      .. "compacting it failed %(the conversation is larger than the model's window %(400 invalid_request_error: "
      .. "prompt is too long: %d+ tokens > 300 maximum%)%)%. Ask again in this thread with a narrower task", problem)
    assert.not_matches("max_tokens", problem, 1, true)
    assert.equal(2, #reqs) -- the turn's request, then the summary's; both refused as too long
    card:ended(state, 0, "", problem)
    assert.matches("✗ the conversation outgrew the model's window after 1 turn", card:status_line(0, 4000), 1, true)
  end)

  it("on \"prompt is too long\" elides only the older results, keeps the newest keep_tool_results, retries, and asks for no summary", function()
    local state, reqs, lines = nil, nil, {}
    core.run(function()
      m = model.start()
      m:script{ text("sized") }
      one_run(snap_with{}, { accounts = spend.new_accounts() })
      local u = m:requests()[1].usage
      local base = u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens
      -- each result is ~1,000 tokens: the 4th request (three results) passes the stand-in's
      -- window, the 3rd does not; the shipped window (200,000) never asks for compaction itself
      m:config{ max_prompt_tokens = base + 2700 }
      local summary = shipped.agents.context.summary_prompt
      m:script{ bash("one"), bash("two"), bash("three"), text("done"),
                { match = summary:sub(1, 40), content = { { type = "text", text = "a summary" } } } }
      local n = 0
      state = one_run(snap_with{ context = setmetatable({ keep_tool_results = 1 }, { __index = shipped.agents.context }) },
        { accounts = spend.new_accounts(), transcript = function(rec) if run_events.kept(rec) then lines[#lines + 1] = rec end end,
          exec = function() n = n + 1; return { exit_code = 0, text = ("result " .. n .. " "):rep(500) } end })
      reqs = m:requests()
    end)
    assert.equal("done", state)
    local statuses = {}
    for i = 2, #reqs do statuses[#statuses + 1] = reqs[i].status end
    assert.same({ 200, 200, 200, 400, 200 }, statuses) -- the 4th refused once; its retry accepted
    for _, r in ipairs(reqs) do assert.is_not_true(r.matched) end -- no summary was asked for
    local results = {}
    for _, msg in ipairs(reqs[6].body.messages) do
      for _, b in ipairs(type(msg.content) == "table" and msg.content or {}) do
        if b.type == "tool_result" then results[#results + 1] = b.content end
      end
    end
    assert.equal(3, #results)
    assert.matches("^%[elided to keep the conversation within the model's window", results[1])
    assert.matches("^%[elided to keep the conversation within the model's window", results[2])
    assert.matches("^result 3 ", results[3]) -- the newest (the one the model has not seen) kept
    local compaction
    for _, rec in ipairs(lines) do if rec.type == "compaction" then assert.is_nil(compaction); compaction = rec end end
    assert.equal("elide", compaction.how)
    assert.equal(2, compaction.results)
    assert.is_true(compaction.forced)
    -- real sizes: the API's count before, the bytes the messages took before and after
    assert.is_true(compaction.before > 0 and compaction.after > 0 and compaction.after < compaction.before, tostring(compaction.after))
    assert.is_true(compaction.bytes_after > 0 and compaction.bytes_after < compaction.bytes_before - 5000)
  end)

  it("shows on the card that the model is thinking while thinking streams", function()
    local shown = {}
    core.run(function()
      m = model.start()
      m:script{ { content = { { type = "text", text = "ok" } }, thinking = ("hmm "):rep(20) } }
      local orig = run_card.new
      run_card.new = function(f)
        local c = orig(f)
        local think = c.thinking
        c.thinking = function(self) shown[#shown + 1] = true; return think(self) end
        return c
      end
      local ok, e = pcall(one_run, snap_with{}, { accounts = spend.new_accounts() })
      run_card.new = orig
      assert(ok, e)
    end)
    assert.is_true(#shown > 0)
  end)
end)

describe("agent/context", function()
  it("puts at most two cache marks, on the latest user turns, without changing the conversation", function()
    local msgs = {
      { role = "user", content = "ask" },
      { role = "assistant", content = { { type = "text", text = "a" } } },
      { role = "user", content = { { type = "tool_result", tool_use_id = "x", content = "r1" } } },
      { role = "assistant", content = { { type = "text", text = "b" } } },
      { role = "user", content = { { type = "tool_result", tool_use_id = "y", content = "r2" } } },
    }
    local out = context.with_breakpoints(msgs)
    assert.is_nil(out[1].content.cache_control)
    assert.equal("ask", msgs[1].content)
    assert.same({ type = "ephemeral" }, out[3].content[1].cache_control)
    assert.same({ type = "ephemeral" }, out[5].content[1].cache_control)
    assert.is_nil(msgs[5].content[1].cache_control)
  end)

  it("elides older tool results to a line naming the call and how to get it again", function()
    local big = ("x"):rep(5000)
    local msgs = {
      { role = "user", content = "ask" },
      { role = "assistant", content = { { type = "tool_use", id = "a", name = "bash", input = { command = "seq 1 9" } } } },
      { role = "user", content = { { type = "tool_result", tool_use_id = "a", content = big } } },
      { role = "assistant", content = { { type = "tool_use", id = "b", name = "bash", input = { command = "ls" } } } },
      { role = "user", content = { { type = "tool_result", tool_use_id = "b", content = big } } },
    }
    local before = msgs[3]
    local conv = context.new(msgs)
    conv:answered{ input_tokens = 3000, output_tokens = 10 }
    local n, freed = conv:elide(1, function(use) return "the result of `$ " .. use.input.command .. "` — make the call again to see it" end)
    assert.equal(1, n)
    assert.is_true(freed > 4000)
    assert.matches("^%[elided to keep the conversation within the model's window: the result of `%$ seq 1 9` — make the call again to see it %(5000 bytes%)%.%]$",
      msgs[3].content[1].content)
    assert.equal(big, msgs[5].content[1].content)
    -- replaced, not changed in place (the thread's record rewrites a changed conversation)
    assert.are_not.equal(before, msgs[3])
    assert.equal(big, before.content[1].content)
    assert.is_true(conv:estimate() < 3010)
  end)
end)

describe("read_file of an image", function()
  local tools = require("switchboard.agent.tools")
  local text = require("switchboard.agent.text")
  local function png(w, h) return "\x89PNG\r\n\x1a\n\0\0\0\rIHDR" .. string.pack(">I4>I4", w, h) .. "\8\6\0\0\0" end
  local function read(bytes)
    local ex = { read_file = function() return bytes end }
    return tools.call(ex, shipped, policy.agent(shipped, "coding"),
      { id = "x", name = "read_file", input = { path = "pic" } }, { signal = core.signal(), remaining_ms = 1000 })
  end

  it("reads the size from PNG, GIF, JPEG and WebP headers", function()
    assert.same({ 30, 20 }, { text.image_size(png(30, 20), "image/png") })
    assert.same({ 30, 20 }, { text.image_size("GIF89a\30\0\20\0", "image/gif") })
    local jpeg = "\xFF\xD8\xFF\xE0\0\16JFIF\0\1\1\0\0\1\0\1\0\0\xFF\xC2\0\17\8\0\20\0\30\3"
    assert.equal("image/jpeg", text.image_type(jpeg))
    assert.same({ 30, 20 }, { text.image_size(jpeg, "image/jpeg") })
    local webp = "RIFF\0\0\0\0WEBPVP8X\10\0\0\0\0\0\0\0" .. "\29\0\0" .. "\19\0\0"
    assert.equal("image/webp", text.image_type(webp))
    assert.same({ 30, 20 }, { text.image_size(webp, "image/webp") })
  end)

  it("gives the image within the API's limits, and says how to shrink one beyond them", function()
    local ok = read(png(30, 20))
    assert.equal("image", ok.content[1].type)
    assert.equal("pic: image/png, 30×20 pixels, 29 bytes", ok.content[2].text)
    local wide = read(png(9000, 20))
    assert.matches("^pic is an image %(image/png, 29 bytes%) whose size is 9000×20 pixels, more than the API takes; "
      .. "make a copy at most 8000 pixels a side", wide.content)
    local heavy = read(png(30, 20) .. ("\0"):rep(4 * 1024 * 1024))
    assert.matches("larger than the 3840000 bytes an image may have here (tool_output.max_image_bytes)", heavy.content, 1, true)
  end)
end)

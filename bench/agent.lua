-- The agent run's own cost, against references measured in the same run:
--
--   turn   the run loop per turn, at turn 1 and at turn 60 of a 60-turn run whose command
--          prints ~9 KB each turn (`seq 1 2000`), so the conversation grows to ~550 KB — parse
--          a streamed answer (core.sse + agent/stream.lua), call the tool through the executor
--          stack (tracing → health → local executor), bound and check its output, build and
--          encode the next request — excluding the model (its answer is pre-recorded and fed
--          through on_chunk in 1 KiB pieces; its usage reports the request's real size, 1
--          token per 4 bytes) and the command (time inside the local executor's exec is
--          subtracted). References: the command itself (`bash -c true` through core.spawn),
--          and cjson encoding the turn's request body (serialisation: what must grow with the
--          conversation). Goal (issues 11, 24): ≤ 2 ms per turn at the median, and turn 60's
--          extra over turn 1 not beyond the growth of serialisation.
--   bytes  bytes sent per request at turns 1, 30 and 60, and in all, for the same run with a
--          200,000-token window (no compaction) and with a 40,000-token one (compaction:
--          elided results, then the model's summary — its extra requests counted too).
--   sse    bytes of a recorded answer stream through core.sse alone, and through core.sse +
--          the event decoding, in 16 KiB chunks. Reference: Lua's string.find scanning the same
--          bytes for the blank lines that end events. Goal: ≥ 50 MB/s.
--
--   lua5.4 bench/agent.lua [runs=5] [turns=60] [sse_mb=32]     (SB_BUILD_DIR: another build)
local build = os.getenv("SB_BUILD_DIR") or "./build"
package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
package.cpath = build .. "/lua/?.so;" .. package.cpath
local loadavg = require("bench.stats").loadavg

local core = require("switchboard.core")
local cjson = require("cjson")
local policy = require("switchboard.policy")
-- the backends' and fronts' settings in the policy schema, as the binary loads them
require("switchboard.exec.backends")
require("switchboard.fronts.registry")
local stack = require("switchboard.exec.stack")
local client = require("switchboard.agent.client")
local stream = require("switchboard.agent.stream")
local run = require("switchboard.agent.run")
local run_card = require("switchboard.dispatch.run_card")

local runs, turns, sse_mb = tonumber(arg[1] or 5), tonumber(arg[2] or 60), tonumber(arg[3] or 32)

local function sse(event, doc) return ("event: %s\ndata: %s\n\n"):format(event, cjson.encode(doc)) end

-- A recorded answer: a paragraph of text and one bash call, its input in 8-byte fragments.
-- input_tokens: what the API would report for the request (the run's size figure).
local function answer(i, final, input_tokens, command)
  local s = {
    sse("message_start", { type = "message_start", message = { id = "msg_" .. i, model = "m", usage = { input_tokens = input_tokens or 2000, output_tokens = 1 } } }),
    sse("ping", { type = "ping" }),
    sse("content_block_start", { type = "content_block_start", index = 0, content_block = { type = "text", text = "" } }),
  }
  local text = ("I will look at the failing test and run it again to see the output. "):rep(4)
  for k = 1, #text, 12 do
    s[#s + 1] = sse("content_block_delta", { type = "content_block_delta", index = 0, delta = { type = "text_delta", text = text:sub(k, k + 11) } })
  end
  s[#s + 1] = sse("content_block_stop", { type = "content_block_stop", index = 0 })
  if not final then
    s[#s + 1] = sse("content_block_start", { type = "content_block_start", index = 1, content_block = { type = "tool_use", id = "toolu_" .. i, name = "bash", input = {} } })
    local json = cjson.encode({ command = command or "true", timeoutMs = 60000 })
    for k = 1, #json, 8 do
      s[#s + 1] = sse("content_block_delta", { type = "content_block_delta", index = 1, delta = { type = "input_json_delta", partial_json = json:sub(k, k + 7) } })
    end
    s[#s + 1] = sse("content_block_stop", { type = "content_block_stop", index = 1 })
  end
  s[#s + 1] = sse("message_delta", { type = "message_delta", delta = { stop_reason = final and "end_turn" or "tool_use" }, usage = { output_tokens = 150 } })
  s[#s + 1] = sse("message_stop", { type = "message_stop" })
  return table.concat(s)
end

local function median(xs)
  table.sort(xs)
  return xs[(#xs + 1) // 2]
end

-- The shipped snapshot without spend caps (the pre-recorded usage bills every turn in full)
-- and, given tokens, with the coding model's window replaced.
local function bench_snap(snap, tokens)
  local fields = { spend = {} }
  if tokens then
    fields.models = setmetatable({ ["claude-sonnet-4-5"] = setmetatable({ context_tokens = tokens },
      { __index = snap.agents.models["claude-sonnet-4-5"] }) }, { __index = snap.agents.models })
  end
  return setmetatable({ agents = setmetatable(fields, { __index = snap.agents }) }, { __index = snap })
end

local SEQ = "seq 1 2000"

-- One run of `turns` turns with a tool call, and a last one that answers. Returns per turn k
-- the loop's own ms from request k to request k + 1 (the answer parsed, the call made, the
-- next request built and encoded); per request: bytes sent, and the ms cjson takes to encode
-- it (the serialisation reference).
local function one_run(snap, root, r)
  local env = { PATH = "/usr/local/bin:/usr/bin:/bin" }
  local built = assert(stack.build({ policy = function() return snap end, workspace_root = root,
    getenv = function(name) return env[name] end }, { thread_key = "bench-" .. r, agent = "coding" }))
  local inner = built.tracker.inner
  local in_exec = 0
  local real_exec = inner.exec
  inner.exec = function(self, command, opts)
    local t0 = core.now_ms()
    local a, b = real_exec(self, command, opts)
    in_exec = in_exec + (core.now_ms() - t0)
    return a, b
  end
  local summary = snap.agents.context.summary_prompt
  local marks, sent, encode = {}, {}, {}
  local i = 0
  local c = client.new{ api_key = "sk-bench-000000", settings = snap.agents.model_api, redact = function() end,
    request = function(req)
      sent[#sent + 1] = #req.body
      local is_summary = req.body:find(summary:sub(1, 60), 1, true) ~= nil
      if is_summary then sent.summaries = (sent.summaries or 0) + 1 end
      if not is_summary then
        -- the serialisation reference, in the same run (its time is excluded from the loop's)
        local body = cjson.decode(req.body)
        local t0 = core.now_ms()
        local xs = {}
        for k = 1, 3 do
          local t = core.now_ms()
          cjson.encode(body)
          xs[k] = core.now_ms() - t
        end
        encode[#encode + 1] = median(xs)
        in_exec = in_exec + (core.now_ms() - t0)
      end
      local s
      if is_summary then
        s = answer(0, true, #req.body // 4)
      else
        i = i + 1
        marks[i] = { t = core.now_ms(), exec = in_exec }
        s = answer(i, i == turns + 1, #req.body // 4, SEQ)
      end
      for k = 1, #s, 1024 do req.on_chunk(s:sub(k, k + 1023)) end
      return 200, {}, ""
    end }
  local card = run_card.new{ thread = "b", agent = "coding", ask = "x" }
  local state = run.run{ snap = snap, def = policy.agent(snap, "coding"), agent = "coding",
    executor = built.executor, tracker = built.tracker, client = c, events = run_card.events(card, core.now_ms),
    signal = core.signal(), deadline_ms = core.now_ms() + 3600000, ask = "fix the tests",
    accounts = require("switchboard.agent.spend").new_accounts() }
  marks[#marks + 1] = { t = core.now_ms(), exec = in_exec }
  assert(state == "done", state)
  local own = {}
  for k = 1, #marks - 2 do -- the last interval is the final answer's: no call, no next request
    own[k] = (marks[k + 1].t - marks[k].t) - (marks[k + 1].exec - marks[k].exec)
  end
  return own, sent, encode, card
end

local function bench_turns(snap, root)
  local first, last, cmd_ref, enc1, enc60 = {}, {}, {}, {}, {}
  local env = { PATH = "/usr/local/bin:/usr/bin:/bin" }
  for r = 1, runs do
    local own, _, encode = one_run(snap, root, r)
    first[#first + 1], last[#last + 1] = own[1], own[turns]
    enc1[#enc1 + 1], enc60[#enc60 + 1] = encode[1], encode[turns]
    local t0 = core.now_ms()
    for _ = 1, 20 do core.spawn{ argv = { "bash", "-c", SEQ .. " >/dev/null" }, env = env }:wait() end
    cmd_ref[#cmd_ref + 1] = (core.now_ms() - t0) / 20
  end
  return median(first), median(last), median(cmd_ref), median(enc1), median(enc60)
end

local function bench_bytes(snap, root)
  local out = {}
  for _, w in ipairs({ { "no compaction (a window of 2,000,000 tokens)", 2000000 },
                       { "the shipped window (200,000 tokens)", 200000 },
                       { "a window of 40,000 tokens", 40000 } }) do
    local _, sent, _, card = one_run(bench_snap(policy.shipped(), w[2]), root, "bytes-" .. w[2])
    local total = 0
    for _, n in ipairs(sent) do total = total + n end
    local compaction
    for _, note in ipairs(card.notes) do compaction = note:match("context compacted %d+ times?") or compaction end
    out[#out + 1] = ("bytes: %s — request 1 %d B, 30 %d B, last %d B; %d requests (%d summaries), %.1f MB in all, %.0f KB per request; %s")
      :format(w[1], sent[1], sent[30] or 0, sent[#sent], #sent, sent.summaries or 0, total / 1e6, total / 1e3 / #sent,
        compaction or "not compacted")
  end
  return out
end

local function bench_sse(snap)
  local one = answer(1, false)
  local big = one:rep(math.ceil(sse_mb * 1024 * 1024 / #one))
  local chunks = {}
  for k = 1, #big, 16384 do chunks[#chunks + 1] = big:sub(k, k + 16383) end
  local mb = #big / 1e6
  local function rate(fn)
    local xs = {}
    for _ = 1, 5 do
      local t0 = core.now_ms()
      fn()
      xs[#xs + 1] = mb / ((core.now_ms() - t0) / 1000)
    end
    return median(xs)
  end
  local scan = rate(function()
    local n, at = 0, 1
    while true do
      local j = big:find("\n\n", at, true)
      if not j then break end
      n, at = n + 1, j + 2
    end
  end)
  local parse = rate(function()
    local p = core.sse.parser(snap.agents.model_api.max_event_bytes)
    for _, c in ipairs(chunks) do p:feed(c) end
  end)
  local decode = rate(function()
    local p = core.sse.parser(snap.agents.model_api.max_event_bytes)
    local a = stream.new()
    for _, c in ipairs(chunks) do
      local ev = p:feed(c)
      for k = 1, #ev, 2 do
        if ev[k] == "message_start" then a = stream.new() end -- one answer after another
        a:event(ev[k], ev[k + 1])
      end
    end
  end)
  return scan, parse, decode, mb
end

core.run(function()
  -- the loop's cost where the conversation only grows: a window it never fills
  local snap = bench_snap(policy.shipped(), 2000000)
  local root = os.tmpname()
  os.remove(root)
  print("load average before: " .. loadavg())
  local own1, own60, cmd, enc1, enc60 = bench_turns(snap, root)
  print(("turn: loop's own cost at turn 1 %.3f ms, at turn %d %.3f ms (medians of %d runs); the command "
    .. "(%s via core.spawn) %.3f ms; encoding the request %.3f ms at turn 1, %.3f ms at turn %d; turn %d's "
    .. "extra %.3f ms against serialisation's %.3f ms; goal ≤ 2 ms: %s")
    :format(own1, turns, own60, runs, SEQ, cmd, enc1, enc60, turns, turns, own60 - own1, enc60 - enc1,
      (own1 <= 2 and own60 <= 2) and "met" or "NOT met"))
  for _, line in ipairs(bench_bytes(snap, root)) do print(line) end
  local scan, parse, decode, mb = bench_sse(snap)
  print(("sse: %.1f MB of events in 16 KiB chunks — core.sse %.0f MB/s, core.sse + decoding %.0f MB/s; "
    .. "reference string.find scan %.0f MB/s (parse %.2f× the scan); goal ≥ 50 MB/s: %s")
    :format(mb, parse, decode, scan, parse / scan, parse >= 50 and "met" or "NOT met"))
  print("load average after: " .. loadavg())
  core.fs.remove_tree(root)
end)

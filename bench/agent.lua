-- The agent run's own cost, against references measured in the same run:
--
--   turn   the run loop per turn — parse a streamed answer (core.sse + agent/stream.lua), call
--          the tool through the executor stack (tracing → health → local executor), build and
--          encode the next request — excluding the model (its answer is pre-recorded and fed
--          through on_chunk in 1 KiB pieces) and excluding the command (time inside the
--          local executor's exec is subtracted). Reference: the command itself, `bash -c true`
--          through core.spawn. Goal (issue 11): ≤ 2 ms per turn at the median.
--   sse    bytes of a recorded answer stream through core.sse alone, and through core.sse +
--          the event decoding, in 16 KiB chunks. Reference: Lua's string.find scanning the same
--          bytes for the blank lines that end events. Goal: ≥ 50 MB/s.
--
--   lua5.4 bench/agent.lua [runs=15] [turns=20] [sse_mb=32]     (SB_BUILD_DIR: another build)
local build = os.getenv("SB_BUILD_DIR") or "./build"
package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
package.cpath = build .. "/lua/?.so;" .. package.cpath

local core = require("switchboard.core")
local cjson = require("cjson")
local policy = require("switchboard.policy")
local stack = require("switchboard.exec.stack")
local client = require("switchboard.agent.client")
local stream = require("switchboard.agent.stream")
local run = require("switchboard.agent.run")
local run_card = require("switchboard.dispatch.run_card")

local runs, turns, sse_mb = tonumber(arg[1] or 15), tonumber(arg[2] or 20), tonumber(arg[3] or 32)

local function sse(event, doc) return ("event: %s\ndata: %s\n\n"):format(event, cjson.encode(doc)) end

-- A recorded answer: a paragraph of text and one bash call, its input in 8-byte fragments.
local function answer(i, final)
  local s = {
    sse("message_start", { type = "message_start", message = { id = "msg_" .. i, model = "m", usage = { input_tokens = 2000, output_tokens = 1 } } }),
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
    local json = cjson.encode({ command = "true", timeoutMs = 60000 })
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

local function bench_turns(snap, root)
  local answers = {}
  for i = 1, turns do answers[i] = answer(i, i == turns) end
  local own, cmd_ref = {}, {}
  local env = { PATH = "/usr/local/bin:/usr/bin:/bin" }
  for r = 1, runs do
    local built = assert(stack.build({ policy = function() return snap end, workspace_root = root,
      getenv = function(name) return env[name] end }, { thread_key = "bench-" .. r, agent = "coding" }))
    -- time spent inside the backend's exec (the command's own cost) is excluded
    local inner = built.tracker.inner
    local in_exec = 0
    local real_exec = inner.exec
    inner.exec = function(self, command, opts)
      local t0 = core.now_ms()
      local a, b = real_exec(self, command, opts)
      in_exec = in_exec + (core.now_ms() - t0)
      return a, b
    end
    local i = 0
    local c = client.new{ api_key = "sk-bench-000000", settings = snap.agents.model_api, redact = function() end,
      request = function(req)
        i = i + 1
        local s = answers[i]
        for k = 1, #s, 1024 do req.on_chunk(s:sub(k, k + 1023)) end
        return 200, {}, ""
      end }
    local card = run_card.new{ thread = "b", agent = "coding", ask = "x" }
    local t0 = core.now_ms()
    local state = run.run{ snap = snap, def = policy.agent(snap, "coding"), agent = "coding",
      executor = built.executor, tracker = built.tracker, client = c, card = card,
      signal = core.signal(), deadline_ms = core.now_ms() + 3600000, ask = "fix the tests",
      transcript = { write = function() end } }
    local total = core.now_ms() - t0
    assert(state == "done", state)
    own[#own + 1] = (total - in_exec) / turns
    -- the reference: the same command straight through the engine, as many times
    t0 = core.now_ms()
    for _ = 1, turns - 1 do core.spawn{ argv = { "bash", "-c", "true" }, env = env }:wait() end
    cmd_ref[#cmd_ref + 1] = (core.now_ms() - t0) / (turns - 1)
  end
  return median(own), median(cmd_ref)
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
  local snap = policy.shipped()
  local root = os.tmpname()
  os.remove(root)
  local own, cmd = bench_turns(snap, root)
  print(("turn: loop's own cost %.3f ms per turn (median of %d runs of %d turns); the command "
    .. "(bash -c true via core.spawn) %.3f ms; ratio %.2f; goal ≤ 2 ms: %s")
    :format(own, runs, turns, cmd, own / cmd, own <= 2 and "met" or "NOT met"))
  local scan, parse, decode, mb = bench_sse(snap)
  print(("sse: %.1f MB of events in 16 KiB chunks — core.sse %.0f MB/s, core.sse + decoding %.0f MB/s; "
    .. "reference string.find scan %.0f MB/s (parse %.2f× the scan); goal ≥ 50 MB/s: %s")
    :format(mb, parse, decode, scan, parse / scan, parse >= 50 and "met" or "NOT met"))
  core.fs.remove_tree(root)
end)

-- A thread that remembers, measured (issue 23):
--
--   latency  a Slack mention's arrival → the model request, for a new thread and for a
--            follow-up in a warm thread (its conversation in the record and in memory): the
--            real `switchboard slack` between the Slack stand-in (which stamps when it sent the
--            envelope) and the Messages API stand-in (which stamps when the request was read
--            whole — an upper bound on its first byte); both stamp CLOCK_MONOTONIC, shared by
--            the processes. Agent `general` (no repository, no tools), so nothing but the bot's
--            own path is timed. Reference: the same envelope's ack (envelope → ack over the
--            WebSocket), measured in the same run. Goal: ≤ 50 ms for a follow-up.
--   store    the record's cost per turn: save_conversation appending a turn's two messages
--            (an answer with a tool call, its result; ~2 KiB each) plus the turn's two event
--            rows, committed (WAL, synchronous=NORMAL) off the loop, on a thread that grows to
--            `turns` turns. Reference: the transcript's own cost for the same turn (the same
--            JSON lines written and flushed to a file).
--
--   lua5.4 bench/thread_bench.lua [rounds=15] [turns=200]      (SB_BUILD_DIR: another build)
local build = os.getenv("SB_BUILD_DIR") or "./build"
package.path = "./lua/?.lua;./lua/?/init.lua;./tests/lua/?.lua;./tests/?.lua;" .. package.path
package.cpath = build .. "/lua/?.so;" .. package.cpath

local core = require("switchboard.core")
local cjson = require("cjson")
local record = require("switchboard.store.record")

local rounds, turns = tonumber(arg[1] or 15), tonumber(arg[2] or 200)

local function median(xs)
  local c = {}
  for i, v in ipairs(xs) do c[i] = v end
  table.sort(c)
  return c[(#c + 1) // 2]
end

local function tmpdir()
  local p = assert(io.popen("mktemp -d"))
  local d = p:read("l")
  p:close()
  return d
end

local function load_avg()
  local f = io.open("/proc/loadavg")
  local s = f and f:read("l") or "?"
  if f then f:close() end
  return s:match("^(%S+ %S+ %S+)")
end

local function bench_latency()
  local SL = require("support.slack")
  local model = require("support.model")
  local dir = tmpdir()
  local m = model.start()
  local st = SL.standin()
  local bot = SL.bot(st, { state_dir = dir .. "/st", env = { ANTHROPIC_BASE_URL = m.url, ANTHROPIC_API_KEY = m.key },
                           args = { "--log-level", "info" } })
  local new_ms, follow_ms, ack_ms = {}, {}, {}
  local seen = 0
  local function one(ts, thread_ts)
    local sent = st:envelope("events_api", SL.mention{ ts = ts, thread_ts = thread_ts, text = "agent:general say hi" })
    local reqs = SL.wait(function()
      local r = m:requests()
      if #r > seen then return r end
    end, "the model request")
    seen = #reqs
    local s = st:state()
    local at = s.sent[sent.envelope_id].at
    for _, a in ipairs(s.acks) do
      if a.envelope_id == sent.envelope_id then ack_ms[#ack_ms + 1] = a.latency_ms end
    end
    local root = thread_ts or ts
    SL.wait(function()
      for _, c in ipairs(st:cards(root)) do
        if SL.is_final(c) and c.updates and SL.card_text(c):find("say hi", 1, true) then
          local n = 0
          for _, c2 in ipairs(st:cards(root)) do if SL.is_final(c2) then n = n + 1 end end
          if n >= (thread_ts and 2 or 1) then return true end
        end
      end
    end, "the final card")
    return reqs[#reqs].t * 1000 - at
  end
  -- one warm-up thread (the first run loads what a process loads once)
  one("1700009999.000100")
  for i = 1, rounds do
    local root = ("17000%05d.000100"):format(i)
    new_ms[#new_ms + 1] = one(root)
    follow_ms[#follow_ms + 1] = one(("17000%05d.000200"):format(i), root)
  end
  bot:signal("TERM")
  bot:wait()
  st:close()
  m.stop()
  os.execute("rm -rf '" .. dir .. "'")
  return median(new_ms), median(follow_ms), median(ack_ms)
end

local function bench_store()
  local dir = tmpdir()
  local rec = assert(record.open(dir .. "/r.db"))
  local tf = assert(io.open(dir .. "/transcript.jsonl", "ab"))
  local filler = ("The test fails because the timeout is read before the config is loaded. "):rep(28)
  local messages, mark = {}, nil
  local run = assert(rec:run_start{ thread = "bench", ask = "x", agent = "coding", model = "m" })
  local store_ms, file_ms = {}, {}
  for t = 1, turns do
    local answer = { role = "assistant", content = { { type = "text", text = filler },
      { type = "tool_use", id = "toolu_" .. t, name = "bash", input = { command = "npm test -- --grep timeout" } } } }
    local result = { role = "user", content = { { type = "tool_result", tool_use_id = "toolu_" .. t, content = filler } } }
    local ev1 = { type = "answer", turn = t, content = answer.content, usage = { input_tokens = 1, output_tokens = 1 } }
    local ev2 = { type = "tool_result", turn = t, id = "toolu_" .. t, name = "bash", content = filler, duration_ms = 10 }
    messages[#messages + 1] = answer
    messages[#messages + 1] = result
    local t0 = core.now_ms()
    assert(rec:event(run, ev1))
    assert(rec:event(run, ev2))
    mark = assert(rec:save_conversation("bench", messages, mark))
    store_ms[#store_ms + 1] = core.now_ms() - t0
    t0 = core.now_ms()
    for _, line in ipairs({ cjson.encode(ev1), cjson.encode(ev2) }) do
      tf:write(core.log_scrub(line), "\n")
      tf:flush()
    end
    file_ms[#file_ms + 1] = core.now_ms() - t0
  end
  tf:close()
  local hop_ms = {}
  for _ = 1, 101 do
    local t0 = core.now_ms()
    assert(rec.db:run("SELECT 1"))
    hop_ms[#hop_ms + 1] = core.now_ms() - t0
  end
  rec:close()
  local f = io.popen("du -k " .. dir .. "/r.db* | awk '{s+=$1} END {print s}'")
  local kib = f:read("l")
  f:close()
  os.execute("rm -rf '" .. dir .. "'")
  return median(store_ms), median(file_ms), kib, median(hop_ms)
end

core.run(function()
  local s_ms, f_ms, kib, hop = bench_store()
  print(("store: %.3f ms per turn (median of %d turns: 2 events + 2 messages appended, 3 commits) — "
    .. "the transcript's file write of the same lines %.3f ms (%.1f×); one thread-pool round trip "
    .. "(SELECT 1) %.3f ms (a turn is %.1f of them); %s KiB on disk"):format(
    s_ms, turns, f_ms, s_ms / f_ms, hop, s_ms / hop, kib))
  local new, follow, ack = bench_latency()
  print(("latency (median of %d): mention → model request: new thread %.1f ms, warm follow-up %.1f ms "
    .. "(goal ≤ 50 ms); reference: envelope → ack %.1f ms (follow-up %.1f× it)"):format(
    rounds, new, follow, ack, follow / ack))
  print("load average: " .. tostring(load_avg()))
end)

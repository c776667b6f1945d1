-- The Slack front under load (issue 12): `switchboard slack` against the Slack stand-in, 20
-- commands running at once in 20 threads while more envelopes keep arriving.
--
--   ack   envelope sent by the stand-in → its ack received (the stand-in's clock), for every
--         envelope; reference: WebSocket ping → pong on the same connection, taken between
--         the envelopes under the same load (lws answers pongs in C, so the difference is the
--         bot's own work). Goal: p99 ≤ 50 ms.
--   final a command's end (it prints its wall clock as its last act) → the stand-in receiving
--         the card's final chat.update; reference: slack.card.update_every_ms (1 s), the rate
--         limit the final update may have to wait out. Goal: p99 ≤ 1.2 s.
--
-- Usage (repository root, after a build): lua5.4 bench/slack_bench.lua [commands=20] [extra=300]
package.path = "./lua/?.lua;./lua/?/init.lua;./tests/lua/?.lua;./tests/?.lua;" .. package.path
package.cpath = (os.getenv("SB_BUILD_DIR") or "build") .. "/lua/?.so;" .. package.cpath
if not os.getenv("SWITCHBOARD_BIN") then
  -- support.bin reads it at load
  require("switchboard.core") -- loads the engine first
end
local core = require("switchboard.core")
local cjson = require("cjson")
local SL = require("support.slack")

local N = tonumber(arg[1]) or 20
local EXTRA = tonumber(arg[2]) or 300

local function pct(list, p)
  local s = {}
  for i, v in ipairs(list) do s[i] = v end
  table.sort(s)
  if #s == 0 then return 0 end
  return s[math.max(1, math.ceil(#s * p))]
end

local function run()
  local st = SL.standin()
  local state_dir = os.tmpname()
  os.remove(state_dir)
  local bot = SL.bot(st, { state_dir = state_dir, args = {} })
  -- N commands that end at spread times, each printing its end time last
  for i = 1, N do
    local secs = 3 + (i % 10) * 0.37
    st:envelope("events_api", SL.mention{ ts = ("1700001%03d.000100"):format(i),
      text = ("run `sleep %.2f; date +%%s.%%N`"):format(secs) })
  end
  -- more envelopes while they run: events the bot reads, acks and ignores (a bot's message)
  local t0 = core.now_ms()
  local pongs = {}
  for i = 1, EXTRA do
    st:envelope("events_api", SL.mention{ ts = ("1700002%03d.000100"):format(i % 1000), text = "x", bot_id = "B1" })
    if i % 5 == 0 then -- the reference, taken under the same load
      local _, p = st:control("ping", { count = 1 })
      pongs[#pongs + 1] = p.rtt_ms[1]
    end
    core.sleep(10)
  end
  local sent_ms = core.now_ms() - t0
  local finals = {}
  SL.wait(function()
    local n = 0
    for i = 1, N do
      local cards = st:cards(("1700001%03d.000100"):format(i))
      if cards[1] and SL.is_final(cards[1]) then n = n + 1 end
    end
    return n == N
  end, "every final card", 120000)
  local ping = { rtt_ms = pongs }
  local s = st:state()
  local acks = {}
  for _, a in ipairs(s.acks) do acks[#acks + 1] = a.latency_ms end
  -- the final update of each card: the last chat.update for its ts
  local last_update = {}
  for _, c in ipairs(s.calls) do
    if c.method == "chat.update" then last_update[c.args.ts] = c end
  end
  local lags = {}
  for ts, m in pairs(s.messages) do
    local c = last_update[ts]
    if c and m.thread_ts and m.thread_ts:match("^1700001") then
      local text = SL.card_text(c.args)
      local ended = tonumber(text:match("```(%d+%.%d+)```"))
      if ended then lags[#lags + 1] = c.wall - ended * 1000 end
    end
  end
  bot:signal("TERM")
  bot:wait()
  st:close()
  os.execute("rm -rf '" .. state_dir .. "'")
  return {
    commands = N, envelopes = #acks, extra_envelopes_over_ms = math.floor(sent_ms),
    ack_p50_ms = pct(acks, 0.5), ack_p99_ms = pct(acks, 0.99), ack_max_ms = pct(acks, 1),
    pong_p50_ms = pct(ping.rtt_ms, 0.5), pong_p99_ms = pct(ping.rtt_ms, 0.99),
    ack_p99_over_pong_p99 = pct(acks, 0.99) / math.max(pct(ping.rtt_ms, 0.99), 0.001),
    final_cards = #lags, final_p50_ms = pct(lags, 0.5), final_p99_ms = pct(lags, 0.99),
    final_max_ms = pct(lags, 1), final_p99_over_rate_limit = pct(lags, 0.99) / 1000,
  }
end

local res = core.run(run)
print(cjson.encode(res))
print(("ack:   p50 %.1f ms, p99 %.1f ms (pong p99 %.1f ms; %.1f×) — goal p99 ≤ 50 ms: %s")
  :format(res.ack_p50_ms, res.ack_p99_ms, res.pong_p99_ms, res.ack_p99_over_pong_p99,
          res.ack_p99_ms <= 50 and "met" or "NOT met"))
print(("final: p50 %.0f ms, p99 %.0f ms, max %.0f ms over %d cards (%.2f× the 1 s update interval) — goal p99 ≤ 1200 ms: %s")
  :format(res.final_p50_ms, res.final_p99_ms, res.final_max_ms, res.final_cards,
          res.final_p99_over_rate_limit, res.final_p99_ms <= 1200 and "met" or "NOT met"))

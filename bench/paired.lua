-- The paired benchmark of issue 28 (bench/README.md "sandboxd against its Node peer and raw
-- spawns"): walled sandboxd, the Node peer of the same protocol (bench/sandboxd_node.js) and raw
-- posix_spawn of the same command, one request to each in turn (bench_paired, one keep-alive
-- connection per contender and client), so that load changes hit every contender alike; then
-- 2,000 concurrent walled commands (bench/sandbox_bench.lua concurrent, with its overlay).
-- Two more contenders bound what any server could do here (issue 43's floor): `floor`, a minimal
-- C server of the same protocol (bench/floor_server.c: llhttp, bearer, posix_spawn, one JSON
-- document; no loop, no Lua, no walls), and `nowalls`, the same sandboxd binary with --no-walls
-- (the server's own cost without the walls' hop). sandboxd − nowalls is what the walls cost,
-- nowalls − floor what the server costs over the floor, floor − raw what HTTP and a spawning
-- server cost at least. The 1 MB part's reference is raw `cat` to /dev/null (big_vs_cat, the
-- row); beside it, for information only, `catpipe`: the same raw command whose megabyte the
-- client drains through a pipe (big_catpipe_vs_sandboxd: the bytes delivered, nothing else).
-- What bounds the 1 MB row (information, never the row; bench/README.md "What bounds the 1 MB
-- row"): `catwide`, catpipe with its pipe widened to 1 MiB before the spawn, and the floor
-- server's relays (`relay`, `relayjson`, `relaysplice`: the command spawned raw with its stdout
-- pipe widened, each read sent on at once in sandboxd's 32 KiB chunks, as is, escaped with
-- sandboxd's encoder, or spliced to the socket without a copy): big_vs_cat_<name> = cat ÷ each,
-- and their CPU per request in big_server_cpu_us.
--
--   lua5.4 bench/paired.lua [SEQ_N=300] [SLICE_S=2] [PAIRS=5] [BIG_N=20] [CONC=2000] [CONC_SLEEP_S=20]
--
-- BENCH_LANE_OFF=1 turns the walled sandboxd's exec lane off (timeouts sandbox.exec_lane).
-- SWITCHBOARD_BIN selects the sandboxd binary (another checkout's build measures its code with
-- this bench); SB_BUILD_DIR the build of this checkout (bench_paired, core.so). One JSON line
-- with every figure and the load average beside each part.
local build = os.getenv("SB_BUILD_DIR") or "./build"
package.path = "./lua/?.lua;./lua/?/init.lua;./tests/lua/?.lua;" .. package.path
package.cpath = build .. "/lua/?.so;" .. package.cpath
local loadavg = require("bench.stats").loadavg
local cpu_ns = require("bench.stats").cpu_ns

local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")

core.log_format("text", "warn")

local SEQ_N, SLICE_S, PAIRS = tonumber(arg[1]) or 300, tonumber(arg[2]) or 2, tonumber(arg[3]) or 5
local BIG_N, CONC, CONC_SLEEP = tonumber(arg[4]) or 20, tonumber(arg[5]) or 2000, tonumber(arg[6]) or 20
local CLIENTS = 8
-- 1 MB of text on stdout (no quotes: the client sends the command as a JSON string as is)
local BIG = "yes aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa | head -c 1000000"

local function round(x, d) local m = 10 ^ (d or 2) return math.floor(x * m + 0.5) / m end

local function client(args)
  local argv = { build .. "/bench/bench_paired" }
  for _, a in ipairs(args) do argv[#argv + 1] = a end
  local r = assert(core.spawn{ argv = argv, env = S.base_env(), max_output = 1 << 20 }):wait()
  assert(r.exit == 0, "bench_paired failed: " .. tostring(r.stderr) .. tostring(r.stdout))
  return cjson.decode(r.stdout)
end

-- the floor server; relay_mode ("relay" | "relay-json") makes it one of the 1 MB row's relays
local function start_floor(dir, relay_mode)
  local port_file = dir .. "/" .. (relay_mode or "floor") .. ".port"
  local env = S.base_env()
  env.SANDBOX_TOKEN = S.TOKEN
  local p = assert(core.spawn{ argv = { build .. "/bench/bench_floor_server", port_file, relay_mode }, env = env })
  local port = S.wait_for(function() return S.read(port_file) end, 30000)
  return p, tonumber(port)
end

local function start_node(dir)
  local port_file = dir .. "/node.port"
  local env = S.base_env()
  env.SANDBOX_TOKEN = S.TOKEN
  local p = assert(core.spawn{ argv = { "node", "bench/sandboxd_node.js", port_file, "15000" }, env = env })
  -- a number, not the file: node's writeFileSync makes the file before it writes the port, so a
  -- read between the two gets "" (bench_smoke beside stress-ng failed on a nil node_port: that
  -- read, or the 30 s bound this wait had)
  local port = S.wait_for(function() return tonumber(S.read(port_file) or "") end, 60000)
  return p, port
end

local out = { load_start = loadavg(), bin = S.BIN }
core.run(function()
  local dir = S.tmpdir()
  -- BENCH_LANE_OFF=1: the walled sandboxd with its exec lane off (docs/sandboxd.md "The exec
  -- lane"), every /exec through the Lua path: the lane's gain, measured by the same bench
  local lane_off = os.getenv("BENCH_LANE_OFF") == "1" and require("support.policies").dir{
    timeouts = function(src) return src .. "\nsandbox.exec_lane = false\n" end } or nil
  local h = S.start_sandboxd{ args = { "--max-instances", tostring(CLIENTS + 8) }, policies = lane_off }
  local bare = S.start_sandboxd{ args = { "--no-walls", "--max-instances", tostring(CLIENTS + 8) } }
  local node, node_port = start_node(dir)
  local floor, floor_port = start_floor(dir)
  local relay, relay_port = start_floor(dir, "relay")
  local relayjson, relayjson_port = start_floor(dir, "relay-json")
  local relaysplice, relaysplice_port = start_floor(dir, "relay-splice")
  local contenders = { "http:sandboxd:" .. h.port, "http:node:" .. node_port,
    "http:nowalls:" .. bare.port, "http:floor:" .. floor_port }

  out.load_seq = loadavg()
  local servers = { sandboxd = h.pid, nowalls = bare.pid, node = node.pid }
  local function cpu_all()
    local t = {}
    for name, pid in pairs(servers) do t[name] = cpu_ns(pid) end
    -- the floor's connection threads end with bench_paired, before the second look: it says its
    -- process's CPU itself (CLOCK_PROCESS_CPUTIME_ID counts ended threads)
    for name, port in pairs{ floor = floor_port, relay = relay_port, relayjson = relayjson_port,
      relaysplice = relaysplice_port } do
      local status, _, body = S.call("http://127.0.0.1:" .. port, "/cpu", { method = "GET" })
      t[name] = status == 200 and cjson.decode(body).cpu_ns or 0
    end
    return t
  end
  -- each server's own CPU per request (µs) between two looks, over n requests
  local function cpu_per_request(before, n)
    local after, per = cpu_all(), {}
    for name, ns in pairs(after) do per[name] = round((ns - before[name]) / 1000 / n, 1) end
    return per
  end
  local cpu0 = cpu_all()
  local seq = client{ "seq", S.TOKEN, "true", tostring(SEQ_N), contenders[1], contenders[2], contenders[3],
    contenders[4], "raw:raw:true" }
  out.seq = seq
  -- the server process's own CPU per request (µs; the warm-up request included): sandboxd's
  -- instance spawner and every contender's children are other processes, not counted
  out.server_cpu_us = cpu_per_request(cpu0, SEQ_N + 1)
  out.seq_vs_node = round(seq.node.median_us / seq.sandboxd.median_us)
  local function added_ms(name) return round((seq[name].median_us - seq.raw.median_us) / 1000, 3) end
  out.cost_over_raw_ms = added_ms("sandboxd")
  out.node_cost_over_raw_ms = added_ms("node")
  out.nowalls_cost_over_raw_ms = added_ms("nowalls")
  out.floor_cost_over_raw_ms = added_ms("floor")
  -- issue 43's row: the Node peer's added cost ÷ sandboxd's (and what the floor itself reaches)
  local function node_over(cost) return cost > 0 and round(out.node_cost_over_raw_ms / cost) or nil end
  out.node_added_vs_sandboxd_added = node_over(out.cost_over_raw_ms)
  out.node_added_vs_nowalls_added = node_over(out.nowalls_cost_over_raw_ms)
  out.node_added_vs_floor_added = node_over(out.floor_cost_over_raw_ms)
  -- sandboxd's added cost split: the walls' hop, the server over the floor, the floor
  out.walls_share_ms = round(out.cost_over_raw_ms - out.nowalls_cost_over_raw_ms, 3)
  out.server_share_ms = round(out.nowalls_cost_over_raw_ms - out.floor_cost_over_raw_ms, 3)

  out.load_rate = loadavg()
  local rate = client{ "rate", S.TOKEN, "true", tostring(SLICE_S), tostring(CLIENTS), tostring(PAIRS),
    contenders[1], contenders[2], contenders[3], contenders[4], "raw:raw:true" }
  out.rate = rate
  out.rate8_vs_node = round(rate.sandboxd.median_per_s / rate.node.median_per_s)
  out.rate8_vs_raw8 = round(rate.sandboxd.median_per_s / rate.raw.median_per_s)
  out.rate8_nowalls_vs_raw8 = round(rate.nowalls.median_per_s / rate.raw.median_per_s)
  out.rate8_floor_vs_raw8 = round(rate.floor.median_per_s / rate.raw.median_per_s)

  out.load_big = loadavg()
  local cpu_big = cpu_all()
  local big = client{ "seq", S.TOKEN, BIG, tostring(BIG_N), contenders[1], contenders[2], contenders[3],
    contenders[4], "raw:cat:" .. BIG .. " > /dev/null", "raw:catpipe:" .. BIG, "rawwide:catwide:" .. BIG,
    "http:relay:" .. relay_port, "http:relayjson:" .. relayjson_port, "http:relaysplice:" .. relaysplice_port }
  out.big = big
  out.big_server_cpu_us = cpu_per_request(cpu_big, BIG_N + 1)
  out.big_vs_cat = round(big.cat.median_us / big.sandboxd.median_us)
  out.big_node_vs_cat = round(big.cat.median_us / big.node.median_us)
  out.big_nowalls_vs_cat = round(big.cat.median_us / big.nowalls.median_us)
  out.big_floor_vs_cat = round(big.cat.median_us / big.floor.median_us)
  -- information beside the row, never the row: raw `cat` whose megabyte the client drains
  -- through a pipe (the same bytes delivered; no HTTP, no JSON, no walls) ÷ sandboxd
  out.big_catpipe_vs_sandboxd = round(big.catpipe.median_us / big.sandboxd.median_us)
  -- the bound (information): cat ÷ what no server, or the least server, makes of the megabyte
  for _, name in ipairs{ "catpipe", "catwide", "relay", "relayjson", "relaysplice" } do
    out["big_vs_cat_" .. name] = round(big.cat.median_us / big[name].median_us)
  end

  for _, p in ipairs{ node, floor, relay, relayjson, relaysplice } do
    p:kill("TERM")
    p:wait()
  end
  for _, server in ipairs{ h, bare } do
    server:stop("TERM")
    server:wait()
  end
  S.cleanup_servers()
  S.rm(dir)
end)

if CONC > 0 then
  out.load_concurrent = loadavg()
  local p = assert(io.popen(("lua5.4 bench/sandbox_bench.lua concurrent %d %d 1000 2>/dev/null"):format(CONC, CONC_SLEEP)))
  local text = p:read("a")
  p:close()
  local line = text:match("(%b{})%s*$")
  out.concurrent = line and cjson.decode(line) or { error = text:sub(-400) }
end
out.load_end = loadavg()
io.write(cjson.encode(out), "\n")

-- Issue 43's 1 MB row, two sandboxd binaries side by side (bench/README.md "A long answer as
-- it comes"): a walled sandboxd of BEFORE_BIN and one of SWITCHBOARD_BIN, and raw `cat`, one
-- request to each in turn (bench_paired seq, one keep-alive connection per contender), so that
-- the machine's load hits both alike; then each server's own CPU per 1 MB request
-- (/proc/PID/task/*/schedstat), the figure the load moves least. Each binary runs with the
-- shipped policies of its own tree (BIN's ../../policies when BIN is <tree>/build/switchboard):
-- an older tree's schema refuses a newer policy's fields.
--
-- The row is raw `cat` with its stdout on /dev/null ÷ sandboxd (cat_vs_after). Beside it, for
-- information only, `catpipe`: the same raw command with its stdout drained through a pipe by
-- the client (the same megabyte delivered to the client, no HTTP, no JSON, no walls):
-- catpipe_vs_after says what is left once the bytes' delivery itself is counted.
--
-- What bounds the row on this machine (bench/README.md "What bounds the 1 MB row"), also
-- information only: `catwide`, catpipe with its pipe widened to 1 MiB before the spawn; `relay`,
-- `relayjson` and `relaysplice`, bench_floor_server's relays (a server that spawns the command
-- raw with its stdout pipe widened and sends each read on at once in a chunked answer, as is,
-- escaped with sandboxd's encoder, or spliced from the pipe to the socket without a copy: the
-- least any server could do). cat_vs_<name> for each; server_cpu_us and server_wakeups (voluntary
-- switches) per request for each server.
--
--   BEFORE_BIN=/path/to/old/switchboard SWITCHBOARD_BIN=build/switchboard \
--     lua5.4 bench/big_paired.lua [ROUNDS=40] [BYTES=1000000]
local build = os.getenv("SB_BUILD_DIR") or "./build"
package.path = "./lua/?.lua;./lua/?/init.lua;./tests/lua/?.lua;" .. package.path
package.cpath = build .. "/lua/?.so;" .. package.cpath
local loadavg = require("bench.stats").loadavg
local cpu_ns = require("bench.stats").cpu_ns
local voluntary_switches = require("bench.stats").voluntary_switches

local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")

core.log_format("text", "warn")

local ROUNDS, BYTES = tonumber(arg[1]) or 40, tonumber(arg[2]) or 1000000
-- BIG_TO_DEVNULL=1: every contender's command sends its bytes to /dev/null (the walls' share of
-- the megabyte: the command's own time inside the instance, no output path); BYTES=0: the same
-- pipeline with no bytes (each contender's cost per request without the megabyte)
local BIG = "yes aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa | head -c " .. BYTES
  .. (os.getenv("BIG_TO_DEVNULL") == "1" and " > /dev/null" or "")
local before_bin = assert(os.getenv("BEFORE_BIN"), "BEFORE_BIN: the sandboxd binary to compare with")

local P = require("support.policies")

-- bench_floor_server in a relay mode ("relay" | "relay-json"), and its port
local function start_relay(dir, relay_mode)
  local port_file = dir .. "/" .. relay_mode .. ".port"
  local env = S.base_env()
  env.SANDBOX_TOKEN = S.TOKEN
  local p = assert(core.spawn{ argv = { build .. "/bench/bench_floor_server", port_file, relay_mode }, env = env })
  return p, tonumber(S.wait_for(function() return S.read(port_file) end, 30000))
end

-- a sandboxd of bin, with the shipped policies of bin's own tree when it has one
local function start(bin)
  local saved_bin, saved_policies = S.BIN, P.SHIPPED
  local tree = bin:match("^(.*)/build/switchboard$")
  S.BIN = bin
  P.SHIPPED = tree and (tree .. "/policies") or P.SHIPPED
  local h = S.start_sandboxd{}
  S.BIN, P.SHIPPED = saved_bin, saved_policies
  return h
end

local out = { load_start = loadavg(), before_bin = before_bin, after_bin = S.BIN, rounds = ROUNDS, bytes = BYTES }
core.run(function()
  local before = start(before_bin)
  local after = start(S.BIN)
  local dir = S.tmpdir()
  local relay, relay_port = start_relay(dir, "relay")
  local relayjson, relayjson_port = start_relay(dir, "relay-json")
  local relaysplice, relaysplice_port = start_relay(dir, "relay-splice")
  -- a relay says its process's CPU itself (its connection threads end with the client)
  local function relay_cpu(port, field)
    local status, _, body = S.call("http://127.0.0.1:" .. port, "/cpu", { method = "GET" })
    return status == 200 and cjson.decode(body)[field or "cpu_ns"] or 0
  end
  local cpu0 = { before = cpu_ns(before.pid), after = cpu_ns(after.pid), relay = relay_cpu(relay_port),
    relayjson = relay_cpu(relayjson_port), relaysplice = relay_cpu(relaysplice_port) }
  local sleeps0 = { before = voluntary_switches(before.pid), after = voluntary_switches(after.pid),
    relay = relay_cpu(relay_port, "sleeps"), relayjson = relay_cpu(relayjson_port, "sleeps"),
    relaysplice = relay_cpu(relaysplice_port, "sleeps") }
  local argv = { build .. "/bench/bench_paired", "seq", S.TOKEN, BIG, tostring(ROUNDS),
    "http:before:" .. before.port, "http:after:" .. after.port, "raw:cat:" .. BIG .. " > /dev/null",
    "raw:catpipe:" .. BIG, "rawwide:catwide:" .. BIG, "http:relay:" .. relay_port,
    "http:relayjson:" .. relayjson_port, "http:relaysplice:" .. relaysplice_port }
  local r = assert(core.spawn{ argv = argv, env = S.base_env(), max_output = 1 << 20 }):wait()
  assert(r.exit == 0, "bench_paired failed: " .. tostring(r.stderr) .. tostring(r.stdout))
  local seq = cjson.decode(r.stdout)
  out.seq = seq
  -- ROUNDS + 1 requests each (the warm-up's included: it goes through Lua on both)
  out.server_cpu_us = {
    before = math.floor((cpu_ns(before.pid) - cpu0.before) / 1000 / (ROUNDS + 1) + 0.5),
    after = math.floor((cpu_ns(after.pid) - cpu0.after) / 1000 / (ROUNDS + 1) + 0.5),
    relay = math.floor((relay_cpu(relay_port) - cpu0.relay) / 1000 / (ROUNDS + 1) + 0.5),
    relayjson = math.floor((relay_cpu(relayjson_port) - cpu0.relayjson) / 1000 / (ROUNDS + 1) + 0.5),
    relaysplice = math.floor((relay_cpu(relaysplice_port) - cpu0.relaysplice) / 1000 / (ROUNDS + 1) + 0.5),
  }
  -- each server's wakeups per request: how often its loop slept and was woken for the megabyte
  out.server_wakeups = {
    before = math.floor((voluntary_switches(before.pid) - sleeps0.before) / (ROUNDS + 1) + 0.5),
    after = math.floor((voluntary_switches(after.pid) - sleeps0.after) / (ROUNDS + 1) + 0.5),
    -- (a relay says its own: its connection's thread ends with the client)
    relay = math.floor((relay_cpu(relay_port, "sleeps") - sleeps0.relay) / (ROUNDS + 1) + 0.5),
    relayjson = math.floor((relay_cpu(relayjson_port, "sleeps") - sleeps0.relayjson) / (ROUNDS + 1) + 0.5),
    relaysplice = math.floor((relay_cpu(relaysplice_port, "sleeps") - sleeps0.relaysplice) / (ROUNDS + 1) + 0.5),
  }
  local function ratio(name) return math.floor(seq.cat.median_us / seq[name].median_us * 100 + 0.5) / 100 end
  out.cat_vs_before, out.cat_vs_after = ratio("before"), ratio("after")
  -- information beside the row, never the row: the megabyte drained through a pipe by the client
  local function pipe_ratio(name) return math.floor(seq.catpipe.median_us / seq[name].median_us * 100 + 0.5) / 100 end
  out.catpipe_vs_before, out.catpipe_vs_after = pipe_ratio("before"), pipe_ratio("after")
  -- the bound: cat ÷ each of the least a server (or no server) could do with the megabyte
  out.cat_vs_catpipe, out.cat_vs_catwide = ratio("catpipe"), ratio("catwide")
  out.cat_vs_relay, out.cat_vs_relayjson = ratio("relay"), ratio("relayjson")
  out.cat_vs_relaysplice = ratio("relaysplice")
  for _, p in ipairs{ relay, relayjson, relaysplice } do
    p:kill("TERM")
    p:wait()
  end
  S.rm(dir)
  for _, h in ipairs{ before, after } do
    h:stop("TERM")
    h:wait()
  end
  S.cleanup_servers()
end)
out.load_end = loadavg()
io.write(cjson.encode(out), "\n")

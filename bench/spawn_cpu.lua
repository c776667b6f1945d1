-- The whole CPU a walled request costs the host, against a raw spawn of the same command
-- (bench/README.md "The instance side of a walled /exec"): issue 43's 8-client row is set on two
-- cores by the total CPU per request — sandboxd, the instance's spawner and the command inside
-- its walls, kernel work included — not by sandboxd alone. Needs root and cgroup v1's cpuacct
-- hierarchy (this host's): each contender's walled `switchboard sandboxd` is moved into a
-- cpuacct group of its own before its instance starts, so everything it forks (holder, bwrap,
-- spawner, every command: the walls make pids/cpu/memory groups, never cpuacct ones) is counted
-- there to the nanosecond; the raw reference (bench_paired's `raw:` contender: posix_spawn of
-- `bash -c CMD`, pipes drained, waitpid) runs in a group of its own.
--
--   lua5.4 bench/spawn_cpu.lua [N=300] [ROUNDS=4] [name=binary ...]
--
-- The C client sends N sequential `true` over one keep-alive connection to one contender, then
-- the next, then N raw spawns, ROUNDS times in turn (load changes hit all alike). Per round and
-- contender: the group's CPU per request (all of it), sandboxd's own (its threads' schedstat),
-- the spawner's (with the instance's other long-lived processes: their schedstat), the rest —
-- the command itself from its vfork to its reaping, kernel work included — and the client's
-- median latency; the raw group's CPU per spawn (client + bash) beside them. Also per request:
-- how long sandboxd and the spawner waited, runnable, for a CPU (schedstat's run_delay) — the
-- spawner lives in the instance's cpu cgroup, sandboxd in the server's. BENCH_COMMAND sets
-- the command (default `true`); BENCH_RATE_PAIRS=P adds issue 43's 8-client row (P rounds of
-- 2 s slices per contender, raw's among them, as bench/paired.lua runs it). One JSON line.
local build = os.getenv("SB_BUILD_DIR") or "./build"
package.path = "./lua/?.lua;./lua/?/init.lua;./tests/lua/?.lua;" .. package.path
package.cpath = build .. "/lua/?.so;" .. package.cpath
local loadavg = require("bench.stats").load1

local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")
local stats = require("bench.stats")

core.log_format("text", "warn")

local N, ROUNDS = tonumber(arg[1]) or 300, tonumber(arg[2]) or 4
local RATE_PAIRS = tonumber(os.getenv("BENCH_RATE_PAIRS") or "0")
local COMMAND = os.getenv("BENCH_COMMAND") or "true"
local CPUACCT = "/sys/fs/cgroup/cpuacct"
local contenders = stats.contenders(arg, 3, S.BIN)

local function read(path)
  local f = assert(io.open(path))
  local s = f:read("a")
  f:close()
  return s
end

local function write(path, s)
  local f = assert(io.open(path, "w"))
  f:write(s)
  assert(f:close())
end

local top = ("%s/sb-spawn-cpu-%d"):format(CPUACCT, os.time())
local function group(name)
  local dir = top .. "/" .. name
  assert(os.execute("mkdir -p " .. dir))
  return dir
end
local function usage_ns(dir) return tonumber(read(dir .. "/cpuacct.usage")) end

-- every thread's time on a CPU (ns), its times switched in and its time waiting for a CPU
-- while runnable (ns): each task's schedstat gives all three (its first, third and second fields)
local function threads_ns(pid)
  local sum, switches, waited = 0, 0, 0
  local p = io.popen("cat /proc/" .. pid .. "/task/*/schedstat 2>/dev/null")
  for line in p:lines() do
    local ns, delay, slices = line:match("^(%d+) (%d+) (%d+)")
    sum, switches, waited = sum + tonumber(ns), switches + tonumber(slices), waited + tonumber(delay)
  end
  p:close()
  return sum, switches, waited
end

-- the server's long-lived descendants (holder and spawner, bwrap, the instance's init, pasta):
-- pid -> CPU ns so far; a command started and ended within the round is not among them
local function residents(dir, server)
  local t = {}
  for pid in read(dir .. "/cgroup.procs"):gmatch("%d+") do
    if tonumber(pid) ~= server then t[pid] = { threads_ns(pid) } end
  end
  return t
end
local function residents_ns(before)
  local sum, switches, waited = 0, 0, 0
  for pid, was in pairs(before) do
    local f = io.open("/proc/" .. pid .. "/schedstat")
    if f then
      f:close()
      local ns, slices, delay = threads_ns(pid)
      sum, switches, waited = sum + ns - was[1], switches + slices - was[2], waited + delay - was[3]
    end
  end
  return sum, switches, waited
end

-- BENCH_PERF=DIR: the first round's clients run under `perf record -a -g` (DIR/<name>.data), so
-- that the host's work for walled and raw commands can be told apart by symbol
local PERF = os.getenv("BENCH_PERF")
local function perf_prefix(name, first)
  if not (PERF and first) then return "" end
  return ("perf record -q -a -g -o %s/%s.data -- "):format(PERF, name)
end

local function seq(contender, n, name, first)
  local argv = { build .. "/bench/bench_paired", "seq", S.TOKEN, COMMAND, tostring(n), contender }
  if PERF and first then
    argv = { "sh", "-c", perf_prefix(name, first) .. table.concat(argv, " ") }
  end
  local r = assert(core.spawn{ argv = argv, env = S.base_env(), max_output = 1 << 20 }):wait()
  assert(r.exit == 0, "bench_paired failed: " .. tostring(r.stderr) .. tostring(r.stdout))
  local doc = cjson.decode(r.stdout)
  assert(doc.s.errors == 0, "requests failed: " .. r.stdout)
  return doc.s.median_us
end

-- the raw reference in its group: a shell joins it, then becomes the client
local function raw_round(dir, n, first)
  local before = usage_ns(dir)
  local cmd = ("echo $$ > %s/cgroup.procs && exec " .. perf_prefix("raw", first) .. "%s/bench/bench_paired seq %s %q %d raw:raw:%s"):format(
    dir, build, S.TOKEN, COMMAND, n, COMMAND)
  local r = assert(core.spawn{ argv = { "sh", "-c", cmd }, env = S.base_env(), max_output = 1 << 20 }):wait()
  assert(r.exit == 0, "raw client failed: " .. tostring(r.stderr))
  local doc = cjson.decode(r.stdout)
  assert(doc.raw.errors == 0, "raw spawns failed: " .. r.stdout)
  return (usage_ns(dir) - before) / (n + 1) / 1e3, doc.raw.median_us
end

local out = { n = N, rounds = ROUNDS, command = COMMAND, load_start = loadavg() }
core.run(function()
  local raw = { dir = group("raw"), cpu = {}, latency = {} }
  for _, c in ipairs(contenders) do
    c.dir = group(c.name)
    -- the server joins its group before it starts anything (its spares start at once): a
    -- shell joins, then becomes the server (same pid; the helper is found next to the binary)
    S.BIN = os.tmpname()
    local bin = c.bin:sub(1, 1) == "/" and c.bin or (os.getenv("PWD") .. "/" .. c.bin)
    write(S.BIN, ("#!/bin/sh\necho $$ > %s/cgroup.procs && exec %s \"$@\"\n"):format(c.dir, bin))
    assert(os.execute("chmod +x " .. S.BIN))
    c.script = S.BIN
    c.h = S.start_sandboxd{ args = { "--max-instances", "16" } }
    seq("http:s:" .. c.h.port, 20) -- the instance wakes, the code paths warm
    c.total, c.server, c.resident, c.rest, c.latency, c.load = {}, {}, {}, {}, {}, {}
    c.server_switches, c.resident_switches = {}, {}
    c.server_wait, c.resident_wait = {}, {} -- µs per request waiting for a CPU (schedstat run_delay)
  end
  for round = 1, ROUNDS do
    for _, c in ipairs(contenders) do
      c.load[#c.load + 1] = loadavg()
      local r0 = residents(c.dir, c.h.pid)
      local g0 = usage_ns(c.dir)
      local s0, w0, d0 = threads_ns(c.h.pid)
      c.latency[#c.latency + 1] = seq("http:s:" .. c.h.port, N, c.name, round == 1)
      local s1, w1, d1 = threads_ns(c.h.pid)
      local g, s = (usage_ns(c.dir) - g0) / (N + 1) / 1e3, (s1 - s0) / (N + 1) / 1e3
      local r_ns, r_switches, r_waited = residents_ns(r0)
      c.server_wait[#c.server_wait + 1] = math.floor((d1 - d0) / (N + 1) / 1e3 + 0.5)
      c.resident_wait[#c.resident_wait + 1] = math.floor(r_waited / (N + 1) / 1e3 + 0.5)
      local r = r_ns / (N + 1) / 1e3
      c.server_switches[#c.server_switches + 1] = math.floor((w1 - w0) / (N + 1) * 100 + 0.5) / 100
      c.resident_switches[#c.resident_switches + 1] = math.floor(r_switches / (N + 1) * 100 + 0.5) / 100
      c.total[#c.total + 1] = math.floor(g + 0.5)
      c.server[#c.server + 1] = math.floor(s + 0.5)
      c.resident[#c.resident + 1] = math.floor(r + 0.5)
      c.rest[#c.rest + 1] = math.floor(g - s - r + 0.5)
    end
    local cpu, lat = raw_round(raw.dir, N, round == 1)
    raw.cpu[#raw.cpu + 1] = math.floor(cpu + 0.5)
    raw.latency[#raw.latency + 1] = lat
  end
  -- issue 43's 8-client row beside them: one C client, 8 threads per contender, the
  -- contenders' 2 s slices in turn (bench_paired rate, as bench/paired.lua runs it)
  if RATE_PAIRS > 0 then
    local argv = { build .. "/bench/bench_paired", "rate", S.TOKEN, COMMAND, "2", "8", tostring(RATE_PAIRS) }
    for _, c in ipairs(contenders) do argv[#argv + 1] = ("http:%s:%d"):format(c.name, c.h.port) end
    argv[#argv + 1] = "raw:raw:" .. COMMAND
    out.load_rate = loadavg()
    local r = assert(core.spawn{ argv = argv, env = S.base_env(), max_output = 1 << 20 }):wait()
    assert(r.exit == 0, "bench_paired rate failed: " .. tostring(r.stderr))
    local rate = cjson.decode(r.stdout)
    for _, c in ipairs(contenders) do
      c.rate8 = rate[c.name].median_per_s
      c.rate8_vs_raw8 = math.floor(rate[c.name].median_per_s / rate.raw.median_per_s * 1000 + 0.5) / 1000
      assert(rate[c.name].errors == 0, "rate requests failed: " .. r.stdout)
    end
    out.raw_rate8 = rate.raw.median_per_s
  end
  out.raw = { cpu_us_per_spawn = raw.cpu, cpu_median_us = stats.median(raw.cpu),
    latency_median_us = stats.median(raw.latency) }
  for _, c in ipairs(contenders) do
    out[c.name] = { total_us = c.total, total_median_us = stats.median(c.total),
      sandboxd_us = c.server, sandboxd_median_us = stats.median(c.server),
      spawner_us = c.resident, spawner_median_us = stats.median(c.resident),
      sandboxd_switches_in = c.server_switches, spawner_switches_in = c.resident_switches,
      sandboxd_wait_us = c.server_wait, spawner_wait_us = c.resident_wait,
      command_us = c.rest, command_median_us = stats.median(c.rest),
      added_cpu_over_raw_us = stats.median(c.total) - stats.median(raw.cpu),
      latency_median_us = stats.median(c.latency), load = c.load,
      rate8 = c.rate8, rate8_vs_raw8 = c.rate8_vs_raw8 }
    c.h:stop("TERM")
    c.h:wait()
    os.remove(c.script)
  end
  S.cleanup_servers()
  -- the groups are empty now (every process in them ended): gone with the top one
  for _, c in ipairs(contenders) do os.execute("rmdir " .. c.dir) end
  os.execute("rmdir " .. raw.dir .. " " .. top)
end)
out.load_end = loadavg()
io.write(cjson.encode(out), "\n")

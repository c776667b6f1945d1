-- sandboxd's own CPU time per walled request (bench/README.md "Per request"): the figure the
-- machine's load moves least, since it counts the server's work and not its waits. Each
-- contender is a walled `switchboard sandboxd` (shipped policies) started from its own binary;
-- the C client (bench_paired seq) sends N sequential `true` over one keep-alive connection to
-- one contender, then the next, ROUNDS times in turn, and the time on a CPU of its threads from
-- /proc/<pid>/task/*/schedstat (time on a CPU, in ns) before and after each batch gives its CPU
-- per request.
--
--   lua5.4 bench/sandboxd_cpu.lua [N=500] [ROUNDS=4] [name=binary ...]
--
-- BENCH_COMMAND sets the command (default `true`); `big` is bench/paired.lua's 1 MB of output.
--
-- With no name=binary the contender is SWITCHBOARD_BIN (else ./build/switchboard) named "this".
-- A binary followed by "@lane-off" runs with timeouts sandbox.exec_lane = false (docs/sandboxd.md
-- "The exec lane"): `on=build/switchboard off=build/switchboard@lane-off` compares the two paths.
-- "@log-unbatched" runs with sandbox.log_batch_ms = 0 (every log line written at once);
-- "@no-log-batch" without the field (a binary older than it refuses it).
-- Another checkout's binary measures that checkout's Lua (its source directory is built in).
-- One JSON line: per contender the CPU µs per request of each round, their median, and the
-- client's median latency, with the load average beside each round; reader_*: this process's
-- own CPU per request (it reads the servers' stderr: the log's reader, as journald is).
local build = os.getenv("SB_BUILD_DIR") or "./build"
package.path = "./lua/?.lua;./lua/?/init.lua;./tests/lua/?.lua;" .. package.path
package.cpath = build .. "/lua/?.so;" .. package.cpath
local loadavg = require("bench.stats").load1

local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")
local policies = require("support.policies")
local stats = require("bench.stats")

core.log_format("text", "warn")

local N, ROUNDS = tonumber(arg[1]) or 500, tonumber(arg[2]) or 4
local BIG = "yes aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa | head -c 1000000"
local COMMAND = os.getenv("BENCH_COMMAND") or "true"
if COMMAND == "big" then COMMAND = BIG end
local contenders = stats.contenders(arg, 3, S.BIN)

local CLK_TCK = 100 -- sysconf(_SC_CLK_TCK) on Linux

-- utime + stime of a process, in µs (fields 14 and 15 of /proc/<pid>/stat, after the comm)
local function stat_cpu_us(pid)
  local f = assert(io.open("/proc/" .. pid .. "/stat"))
  local s = f:read("a")
  f:close()
  local rest = s:match("%) (.*)$")
  local fields = {}
  for w in rest:gmatch("%S+") do fields[#fields + 1] = w end
  -- rest starts at field 3 (state): utime is field 14, stime 15
  return (tonumber(fields[12]) + tonumber(fields[13])) * 1e6 / CLK_TCK
end

-- The time on a CPU of every thread of a process, in µs: the first field of each
-- /proc/<pid>/task/<tid>/schedstat, in ns — not counted in 10 ms ticks as /proc/<pid>/stat is.
-- (A thread that ended between two looks takes its time with it: sandboxd's threads live as
-- long as it does.) Falls back to the ticks when schedstat is not there.
local function cpu_us(pid)
  local ls = io.popen("ls /proc/" .. pid .. "/task 2>/dev/null")
  local total, any = 0, false
  for tid in ls:lines() do
    local f = io.open("/proc/" .. pid .. "/task/" .. tid .. "/schedstat")
    if f then
      total, any = total + (tonumber(f:read("a"):match("^(%d+)")) or 0), true
      f:close()
    end
  end
  ls:close()
  if not any then return stat_cpu_us(pid) end
  return total / 1000
end

-- This process's own time on a CPU (its loop's thread), in µs: it reads every sandboxd's stderr
-- (support/sandbox.lua on_output), so a log line's wakeup of its reader is counted here.
local function own_cpu_us()
  local f = assert(io.open("/proc/self/schedstat"))
  local ns = tonumber(f:read("a"):match("^(%d+)"))
  f:close()
  return ns / 1000
end

local function seq(port, n)
  local argv = { build .. "/bench/bench_paired", "seq", S.TOKEN, COMMAND, tostring(n),
    "http:s:" .. port }
  local r = assert(core.spawn{ argv = argv, env = S.base_env(), max_output = 1 << 20 }):wait()
  assert(r.exit == 0, "bench_paired failed: " .. tostring(r.stderr) .. tostring(r.stdout))
  local doc = cjson.decode(r.stdout)
  assert(doc.s.errors == 0, "requests failed: " .. r.stdout)
  return doc.s.median_us
end

local out = { n = N, rounds = ROUNDS, command = COMMAND, load_start = loadavg() }
core.run(function()
  for _, c in ipairs(contenders) do
    local bin, suffix = c.bin:match("^(.-)@([%w-]+)$")
    S.BIN = bin or c.bin
    local edit = ({
      ["lane-off"] = function(src) return src .. "\nsandbox.exec_lane = false\n" end,
      ["log-unbatched"] = function(src) return src .. "\nsandbox.log_batch_ms = 0\n" end,
      -- a binary older than the field (its schema refuses it): the shipped file without it
      ["no-log-batch"] = function(src) return (src:gsub("\n%s*log_batch_ms = [^\n]*", "\n")) end,
    })[suffix]
    assert(suffix == nil or edit, "unknown contender suffix @" .. tostring(suffix))
    local dir = edit and policies.dir{ timeouts = edit } or nil
    c.h = S.start_sandboxd{ args = { "--max-instances", "8" }, policies = dir }
    seq(c.h.port, 20) -- the instance wakes, the code paths warm
    c.cpu, c.latency, c.load, c.reader = {}, {}, {}, {}
  end
  for _ = 1, ROUNDS do
    for _, c in ipairs(contenders) do
      c.load[#c.load + 1] = loadavg()
      local before, reader_before = cpu_us(c.h.pid), own_cpu_us()
      c.latency[#c.latency + 1] = seq(c.h.port, N)
      c.cpu[#c.cpu + 1] = math.floor((cpu_us(c.h.pid) - before) / (N + 1) + 0.5)
      c.reader[#c.reader + 1] = math.floor((own_cpu_us() - reader_before) / (N + 1) * 10 + 0.5) / 10
    end
  end
  for _, c in ipairs(contenders) do
    out[c.name] = { cpu_us_per_request = c.cpu, cpu_median_us = stats.median(c.cpu),
      latency_median_us = stats.median(c.latency), load = c.load,
      reader_us_per_request = c.reader, reader_median_us = stats.median(c.reader) }
    c.h:stop("TERM")
    c.h:wait()
  end
  S.cleanup_servers()
end)
out.load_end = loadavg()
io.write(cjson.encode(out), "\n")

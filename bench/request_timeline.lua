-- One walled request's timeline, hop by hop (bench/README.md "A walled request hop by hop"):
-- a walled `switchboard sandboxd` (shipped policies) answers N sequential `true` from the C
-- client (bench_paired seq, one keep-alive connection) while `perf record -a` takes every
-- system call's entry and exit and every exec and exit; each request's hops are then found in
-- order (client write → sandboxd's read → the spawn frame's sendmsg → the spawner's recvmsg →
-- vfork → exec of the command → its exit_group → the spawner's wait4 → the exit frame's send →
-- sandboxd's wakeup and reads → the answer's write → the client's read) and the median time of
-- each since the client's write printed, with the median system calls and wakeups of sandboxd
-- and of the spawner per request.
--
--   lua5.4 bench/request_timeline.lua [N=300] [name=binary ...]
--
-- Needs root (perf record -a). With no name=binary the contender is SWITCHBOARD_BIN (else
-- ./build/switchboard) named "this"; another checkout's binary measures that checkout's Lua.
-- The machine's other processes are in the trace too: only the client, sandboxd, the spawner
-- and the commands are read (by pid, and the command by its comm).
local build = os.getenv("SB_BUILD_DIR") or "./build"
package.path = "./lua/?.lua;./lua/?/init.lua;./tests/lua/?.lua;" .. package.path
package.cpath = build .. "/lua/?.so;" .. package.cpath

local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")
local stats = require("bench.stats")

core.log_format("text", "warn")

local N = tonumber(arg[1]) or 300
local contenders = stats.contenders(arg, 2, S.BIN)

-- x86_64 system call numbers of the hops
local NR = { read = 0, write = 1, poll = 7, pread = 17, writev = 20, sendto = 44, recvfrom = 45,
  sendmsg = 46, recvmsg = 47, clone = 56, vfork = 58, wait4 = 61, kill = 62, exit_group = 231,
  epoll_wait = 232, epoll_pwait = 281, ppoll = 271, clone3 = 435 }

-- One parsed line of `perf script`: {comm, pid, tid, t (µs), kind, nr, ret, fd}.
local function parse(line)
  local comm, pid, tid, secs, event, rest =
    line:match("^%s*(.-)%s+(%d+)/(%d+)%s+(%d+%.%d+):%s+(%S+):%s*(.*)$")
  if not comm then return nil end
  local e = { comm = comm, pid = tonumber(pid), tid = tonumber(tid), t = tonumber(secs) * 1e6 }
  if event == "raw_syscalls:sys_enter" then
    local nr, fd = rest:match("^NR (%d+) %(([%x]+)")
    e.kind, e.nr, e.fd = "enter", tonumber(nr), fd and tonumber(fd, 16)
  elseif event == "raw_syscalls:sys_exit" then
    local nr, ret = rest:match("^NR (%d+) = (%-?%d+)")
    e.kind, e.nr, e.ret = "exit", tonumber(nr), tonumber(ret)
  elseif event == "sched:sched_process_exec" then
    e.kind = "exec"
  else
    return nil
  end
  return e
end

local function trace(port, dir)
  local data = dir .. "/perf.data"
  local argv = { "perf", "record", "-q", "-a", "-m", "2048", "-o", data, "-e", "raw_syscalls:sys_enter",
    "-e", "raw_syscalls:sys_exit", "-e", "sched:sched_process_exec", "--exclude-perf", "--",
    build .. "/bench/bench_paired", "seq", S.TOKEN, "true", tostring(N), "http:s:" .. port }
  local r = assert(core.spawn{ argv = argv, env = S.base_env(), max_output = 1 << 20 }):wait()
  assert(r.exit == 0, "perf record failed: " .. tostring(r.stderr))
  return data
end

-- The processes under `root` now (its instance's bwrap, pasta, spawner...), by /proc's ppid: the
-- machine's other processes that start a bash (other servers' spawners among them) are not ours.
local function descendants(root)
  local parent = {}
  local ls = io.popen("ls /proc")
  for name in ls:lines() do
    local pid = tonumber(name)
    local f = pid and io.open("/proc/" .. pid .. "/stat")
    if f then
      local ppid = (f:read("a") or ""):match("%) %S+ (%d+)")
      f:close()
      parent[pid] = tonumber(ppid)
    end
  end
  ls:close()
  local under = {}
  for pid in pairs(parent) do
    local p, hops = parent[pid], 0
    while p and p ~= root and p > 1 and hops < 64 do p, hops = parent[p], hops + 1 end
    if p == root then under[pid] = true end
  end
  return under
end

-- Every event of the client, sandboxd (server_pid), its instance's spawner (under sandboxd, and
-- the parent of a bash exec'd) and the commands, in time order.
local function events_of(data, server_pid, under)
  local p = io.popen("perf script -i " .. data .. " --ns -F comm,pid,tid,time,event,trace 2>/dev/null")
  local all, client_pid, parent_of, spawner, command = {}, nil, {}, {}, {}
  for line in p:lines() do
    local e = parse(line)
    if e then
      -- the client: the first bench_paired exec'd in the trace, perf's own workload (other
      -- benches on the machine may run one too)
      if e.kind == "exec" and e.comm == "bench_paired" and client_pid == nil then client_pid = e.pid end
      if e.kind == "exit" and (e.nr == NR.vfork or e.nr == NR.clone or e.nr == NR.clone3)
        and e.ret > 0 then parent_of[e.ret] = e.pid end
      if e.kind == "exec" and e.comm == "bash" and under[parent_of[e.pid] or 0] then
        spawner[parent_of[e.pid]], command[e.pid] = true, true
      end
      all[#all + 1] = e
    end
  end
  p:close()
  local mine = {}
  for _, e in ipairs(all) do
    local who = (e.pid == client_pid and "client") or (e.pid == server_pid and "sandboxd")
      or (spawner[e.pid] and "spawner") or (command[e.pid] and "command") or nil
    if who then e.who = who; mine[#mine + 1] = e end
  end
  -- (perf script gives them in time order already: no sort, which would not keep ties in order)
  return mine
end

-- The hops, in order: {name, who, kind, test(e, ctx)}; each is the first event after the last.
local function is(nr) return function(e) return e.nr == nr end end
local function one_of(...)
  local set = {}
  for _, n in ipairs{ ... } do set[n] = true end
  return function(e) return set[e.nr] end
end
local HOPS = {
  { "client write", "client", "enter", function(e) return e.nr == NR.write end },
  { "sandboxd reads the request", "sandboxd", "exit", function(e, c)
      if (e.nr == NR.read or e.nr == NR.recvfrom) and e.ret > 0 then return true end end },
  { "spawn frame sendmsg", "sandboxd", "enter", is(NR.sendmsg) },
  { "spawner recvmsg", "spawner", "exit", is(NR.recvmsg) },
  { "vfork", "spawner", "enter", one_of(NR.vfork, NR.clone, NR.clone3) },
  { "execve of the command", "command", "exec", function() return true end },
  { "command's exit_group", "command", "enter", is(NR.exit_group) },
  { "spawner wakes (SIGCHLD)", "spawner", "exit", is(NR.poll) },
  { "spawner's wait4 (reaped)", "spawner", "exit", function(e) return e.nr == NR.wait4 and e.ret > 0 end },
  { "exit frame sent", "spawner", "enter", is(NR.sendto) },
  { "sandboxd wakes", "sandboxd", "exit", one_of(NR.epoll_wait, NR.epoll_pwait) },
  { "exit frame read", "sandboxd", "exit", is(NR.recvfrom) },
  { "counters read (after)", "sandboxd", "enter", is(NR.pread) },
  { "answer written", "sandboxd", "enter", one_of(NR.write, NR.writev) },
  { "client reads the answer", "client", "exit", function(e) return e.nr == NR.read and e.ret > 0 end },
}

local function timelines(mine)
  local per_hop, calls, wakeups = {}, { sandboxd = {}, spawner = {}, command = {} }, {}
  for i = 1, #HOPS do per_hop[i] = {} end
  local i = 1
  while i <= #mine do
    local e = mine[i]
    if e.who == "client" and e.kind == "enter" and e.nr == NR.write then
      local t0, hop, at, count = e.t, 2, {}, { sandboxd = 0, spawner = 0, command = 0 }
      local wakes, j = 0, i + 1
      while j <= #mine and hop <= #HOPS do
        local x, h = mine[j], HOPS[hop]
        if x.kind == "enter" and count[x.who] then count[x.who] = count[x.who] + 1 end
        if x.who == "sandboxd" and x.kind == "exit" and (x.nr == NR.epoll_wait or x.nr == NR.epoll_pwait)
          and hop < #HOPS then -- until the answer is written
          wakes = wakes + 1
        end
        if x.who == "client" and x.kind == "enter" and x.nr == NR.write then break end
        if x.who == h[2] and x.kind == h[3] and h[4](x) then
          at[hop] = x.t - t0
          hop = hop + 1
        end
        j = j + 1
      end
      if hop > #HOPS then
        for k = 2, #HOPS do per_hop[k][#per_hop[k] + 1] = at[k] end
        for who, n in pairs(count) do calls[who][#calls[who] + 1] = n end
        wakeups[#wakeups + 1] = wakes
      end
      i = j
    else
      i = i + 1
    end
  end
  return per_hop, calls, wakeups
end

local out = { n = N, load_start = stats.loadavg() }
core.run(function()
  for _, c in ipairs(contenders) do
    S.BIN = c.bin
    local h = S.start_sandboxd{ args = { "--max-instances", "8" } }
    local warm = { build .. "/bench/bench_paired", "seq", S.TOKEN, "true", "50", "http:s:" .. h.port }
    assert(core.spawn{ argv = warm, env = S.base_env(), max_output = 1 << 20 }):wait()
    local under = descendants(h.pid)
    local dir = S.tmpdir()
    local data = trace(h.port, dir)
    local per_hop, calls, wakeups = timelines(events_of(data, h.pid, under))
    S.rm(dir)
    local rows = {}
    for k = 2, #HOPS do
      rows[#rows + 1] = { hop = HOPS[k][1], median_us = math.floor(stats.median(per_hop[k]) + 0.5) }
    end
    out[c.name] = { requests = #wakeups, hops = rows, sandboxd_wakeups = stats.median(wakeups),
      syscalls = { sandboxd = stats.median(calls.sandboxd), spawner = stats.median(calls.spawner),
        command = stats.median(calls.command) }, load = stats.loadavg() }
    h:stop("TERM")
    h:wait()
  end
  S.cleanup_servers()
end)
out.load_end = stats.loadavg()
io.write(cjson.encode(out), "\n")

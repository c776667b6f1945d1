-- What an awake walled instance costs the host's memory (issue 43; bench/README.md "An awake
-- instance's memory"): a real walled sandboxd on the concurrent bench's overlay (16 MiB
-- workspaces, no spare), STEPS threads woken one `true` each (8 at a time), and at each step:
-- /proc/meminfo (MemAvailable, Slab and its unreclaimable part, page tables, kernel stacks,
-- Cached), /proc/cgroups' counts, the instances' processes by name (RSS and PSS from
-- smaps_rollup: the holder and spawner, bwrap, the instance's init, pasta — passt.avx2 — all in
-- the instance's cgroups) and the memory
-- cgroups' own charge (usage and kernel memory). Then TERM, and the same figures after.
--
--   SB_BUILD_DIR=build SWITCHBOARD_BIN=build/switchboard lua5.4 bench/instance_memory.lua [STEPS=100,200]
--   (SB_MEM_NETWORK=none: the instances' network "none", no pasta each)
--
-- One JSON document on stdout. MemAvailable moves with everything else the host does; the
-- per-process and per-cgroup figures do not.
local build = os.getenv("SB_BUILD_DIR") or "./build"
package.path = "./lua/?.lua;./lua/?/init.lua;./tests/lua/?.lua;" .. package.path
package.cpath = build .. "/lua/?.so;" .. package.cpath

local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")
local policies = require("support.policies")
local overlay = dofile("bench/sandbox_bench_overlay.lua")

core.log_format("text", "warn")

local function read(path) return (core.fs.read_file(path)) end

local function meminfo()
  local t = {}
  for k, v in (read("/proc/meminfo") or ""):gmatch("([%w_()]+):%s+(%d+) kB") do t[k] = tonumber(v) * 1024 end
  return { available = t.MemAvailable, slab = t.Slab, sunreclaim = t.SUnreclaim, page_tables = t.PageTables,
    kernel_stack = t.KernelStack, cached = t.Cached, buffers = t.Buffers, shmem = t.Shmem }
end

local function num_cgroups()
  local t = {}
  for name, n in (read("/proc/cgroups") or ""):gmatch("\n(%w+)%s+%d+%s+(%d+)") do t[name] = tonumber(n) end
  return { memory = t.memory, pids = t.pids, cpu = t.cpu }
end

local function own_parent(c)
  local own = read("/proc/self/cgroup") or ""
  local path = own:match("%d+:[^:\n]*%f[%w]" .. c .. "%f[^%w][^:\n]*:([^\n]*)") or ""
  return ("/sys/fs/cgroup/" .. c .. path):gsub("/+$", "")
end

-- The instances' processes by name, and their memory cgroups' charge.
local function instances(server_pid)
  local by, n = {}, 0
  local tree = own_parent("pids") .. "/switchboard-" .. server_pid
  local mtree = own_parent("memory") .. "/switchboard-" .. server_pid
  local usage, kmem = 0, 0
  for _, name in ipairs(core.fs.list(tree) or {}) do
    if name:match("^i%d+$") then
      n = n + 1
      for pid in (read(tree .. "/" .. name .. "/cgroup.procs") or ""):gmatch("%d+") do
        local comm = (read("/proc/" .. pid .. "/comm") or "?"):gsub("\n", "")
        local roll = read("/proc/" .. pid .. "/smaps_rollup") or ""
        local e = by[comm] or { count = 0, rss = 0, pss = 0 }
        e.count = e.count + 1
        e.rss = e.rss + (tonumber(roll:match("\nRss:%s+(%d+)")) or 0) * 1024
        e.pss = e.pss + (tonumber(roll:match("\nPss:%s+(%d+)")) or 0) * 1024
        by[comm] = e
      end
      usage = usage + (tonumber(read(mtree .. "/" .. name .. "/memory.usage_in_bytes")) or 0)
      kmem = kmem + (tonumber(read(mtree .. "/" .. name .. "/memory.kmem.usage_in_bytes")) or 0)
    end
  end
  return { cgroups = n, by_name = by, memcg_usage = usage, memcg_kmem = kmem }
end

local function rss(pid)
  return (tonumber((read("/proc/" .. pid .. "/status") or ""):match("VmRSS:%s+(%d+)")) or 0) * 1024
end

local function snapshot(h, label)
  core.sleep(3000) -- the host settles (the last starts' transient pages)
  return { label = label, meminfo = meminfo(), num_cgroups = num_cgroups(), sandboxd_rss = rss(h.pid),
    instances = instances(h.pid), load = (read("/proc/loadavg") or ""):match("^(%S+)") }
end

local function wake(h, from, to)
  local next_i, done = from, 0
  local failed = 0
  local workers = {}
  for w = 1, 8 do
    workers[w] = core.go(function()
      while next_i <= to do
        local i = next_i
        next_i = next_i + 1
        local status = S.call(h.url, "/exec", { thread = "M" .. i, deadline_ms = 300000,
          body = { command = "true", timeoutMs = 60000 } })
        if status ~= 200 then failed = failed + 1 end
        done = done + 1
      end
    end)
  end
  S.wait_for(function() return done >= to - from + 1 end, 1200000)
  return failed
end

-- SB_MEM_NETWORK=none: instances without outbound (no pasta each), for the difference
local NETWORK = os.getenv("SB_MEM_NETWORK") or "host"

local function main(steps_arg)
  local steps = {}
  for n in (steps_arg or "100,200"):gmatch("%d+") do steps[#steps + 1] = tonumber(n) end
  local top = steps[#steps]
  local dir = policies.dir{
    timeouts = function(src) return src .. "\n" .. S.FAST .. '\nsandbox.sleep_after = "30m"\n' end,
    isolation = function(src)
      return src .. "\n" .. overlay.CONCURRENT_ISOLATION .. "\n" .. ("network = %q\n"):format(NETWORK)
    end,
  }
  local h = S.start_sandboxd{ policies = dir, args = { "--max-instances", tostring(top + 8) } }
  local out = { steps = {}, network = NETWORK }
  out.steps[1] = snapshot(h, "0")
  local at = 0
  for _, n in ipairs(steps) do
    local failed = wake(h, at + 1, n)
    at = n
    local s = snapshot(h, tostring(n))
    s.failed = failed
    out.steps[#out.steps + 1] = s
  end
  h:stop("TERM")
  h:wait()
  out.after_term = { meminfo = meminfo(), num_cgroups = num_cgroups() }
  core.sleep(3000)
  out.after_term_3s = { meminfo = meminfo(), num_cgroups = num_cgroups() }
  S.rm(h.root)
  return out
end

local result = core.run(function() return main(arg[1]) end)
print(cjson.encode(result))
S.cleanup()

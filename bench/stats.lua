-- What the benches compute from their samples, written once (run from the repository root:
-- `require("bench.stats")`).
local M = {}

-- The median of a list of numbers (0 for none); the list is left as it was.
function M.median(xs)
  local t = {}
  for i, x in ipairs(xs) do t[i] = x end
  table.sort(t)
  local n = #t
  if n == 0 then return 0 end
  if n % 2 == 1 then return t[(n + 1) // 2] end
  return (t[n // 2] + t[n // 2 + 1]) / 2
end

-- The load averages "1 5 15" now (/proc/loadavg), written beside a figure the load moves.
function M.loadavg()
  local f = io.open("/proc/loadavg")
  local s = f and f:read("l") or ""
  if f then f:close() end
  return s:match("^(%S+ %S+ %S+)") or s
end

-- The one-minute load average alone, as text.
function M.load1() return (M.loadavg():match("^(%S+)")) end

-- The sum over a process's threads of the number `pattern` captures in each line of their
-- /proc/PID/task/*/FILE.
local function threads_sum(pid, file, pattern)
  local p = io.popen("cat /proc/" .. pid .. "/task/*/" .. file .. " 2>/dev/null")
  local total = 0
  for l in p:lines() do total = total + (tonumber(l:match(pattern)) or 0) end
  p:close()
  return total
end

-- CPU time (ns) a process has run so far, its threads summed (/proc/PID/task/*/schedstat, the
-- first field: time on a CPU): a figure the machine's load moves little, unlike wall time.
-- Threads that end inside a window are missed: measure processes whose threads outlive it.
function M.cpu_ns(pid) return threads_sum(pid, "schedstat", "^(%d+)") end

-- Times a process went to sleep waiting so far (its threads' voluntary_ctxt_switches summed):
-- each one a wakeup to come, the figure that says how often a server is woken for its bytes.
function M.voluntary_switches(pid) return threads_sum(pid, "status", "^voluntary_ctxt_switches:%s*(%d+)") end

-- The benches' contenders from their arguments from `first` on, each `name=binary`; none given:
-- {{name = "this", bin = default_bin}}.
function M.contenders(args, first, default_bin)
  local out = {}
  for i = first, #args do
    local name, bin = args[i]:match("^([%w_-]+)=(.+)$")
    assert(name, "contenders are name=binary: " .. args[i])
    out[#out + 1] = { name = name, bin = bin }
  end
  if #out == 0 then out[1] = { name = "this", bin = default_bin } end
  return out
end

return M

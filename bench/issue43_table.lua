-- Issue 43's table from bench/issue43.sh's JSON lines: a row per figure of the issue, a column
-- per run and binary, the goal, met or not per cell, and in how many runs it was met.
--
--   lua5.4 bench/issue43_table.lua FILE
local cjson = require("cjson")

local function num(x) return type(x) == "number" and x or nil end

local function fmt(x, digits)
  if x == nil then return "—" end
  if type(x) ~= "number" then return tostring(x) end
  local s = ("%." .. (digits or 2) .. "f"):format(x)
  if s:find(".", 1, true) then s = s:gsub("0+$", ""):gsub("%.$", "") end
  return s
end

-- Each row: the part it reads, its label, value(result) → number|nil, shown(result) → text,
-- goal's words and met(value, result) → boolean (nil: a figure without a goal).
local function at_most(limit) return function(v) return v <= limit end end
local function at_least(limit) return function(v) return v >= limit end end
local function all_in(r) return r.completed_within_goal == r.commands end

local ROWS = {
  { part = "paired", label = "sandboxd's added cost over a raw spawn (ms)", goal = "≤ +0.5",
    value = function(r) return num(r.cost_over_raw_ms) end, met = at_most(0.5) },
  { part = "paired", label = "Node's added cost ÷ sandboxd's", goal = "≥ 8×",
    value = function(r) return num(r.node_added_vs_sandboxd_added) end, met = at_least(8) },
  { part = "paired", label = "— the floor's added cost (bench_floor_server, ms)",
    value = function(r) return num(r.floor_cost_over_raw_ms) end },
  { part = "paired", label = "— Node's added cost ÷ the floor's",
    value = function(r) return num(r.node_added_vs_floor_added) end },
  { part = "paired", label = "— sandboxd --no-walls' added cost (ms)",
    value = function(r) return num(r.nowalls_cost_over_raw_ms) end },
  { part = "paired", label = "8 clients, rate ÷ raw spawns at 8", goal = "≥ 0.9",
    value = function(r) return num(r.rate8_vs_raw8) end, met = at_least(0.9) },
  { part = "paired", label = "— the floor's rate ÷ raw at 8",
    value = function(r) return num(r.rate8_floor_vs_raw8) end },
  { part = "paired", label = "1 MB of output, `cat` ÷ sandboxd", goal = "≥ 0.8×",
    value = function(r) return num(r.big_vs_cat) end, met = at_least(0.8) },
  { part = "paired", label = "— `cat` ÷ the floor",
    value = function(r) return num(r.big_floor_vs_cat) end },
  { part = "paired", label = "— information: `cat` drained through a pipe by the client ÷ sandboxd",
    value = function(r) return num(r.big_catpipe_vs_sandboxd) end },
  { part = "paired", label = "— information, the row's bound: `cat` ÷ catpipe / catwide (pipe widened) / relay / relayjson / relaysplice",
    shown = function(r)
      return ("%s / %s / %s / %s / %s"):format(fmt(r.big_vs_cat_catpipe), fmt(r.big_vs_cat_catwide),
        fmt(r.big_vs_cat_relay), fmt(r.big_vs_cat_relayjson), fmt(r.big_vs_cat_relaysplice))
    end },
  { part = "paired", label = "— requests that failed, every contender (seq, 8 clients, 1 MB)", goal = "0",
    value = function(r)
      local n = 0
      for _, part in ipairs{ "seq", "rate", "big" } do
        for _, who in pairs(r[part] or {}) do
          if type(who) == "table" then n = n + (who.errors or 0) end
        end
      end
      return n
    end, met = at_most(0) },
  { part = "paired", label = "— each server's own CPU per request: sandboxd / --no-walls / floor / Node (µs)",
    shown = function(r)
      local c = r.server_cpu_us or {}
      return ("%s / %s / %s / %s"):format(fmt(c.sandboxd, 0), fmt(c.nowalls, 0), fmt(c.floor, 0), fmt(c.node, 0))
    end },
  { part = "paired", label = "— each server's own CPU per 1 MB request: sandboxd / --no-walls / floor / Node (ms)",
    shown = function(r)
      local c = r.big_server_cpu_us or {}
      local function ms(x) return x and fmt(x / 1000, 2) or "—" end
      return ("%s / %s / %s / %s"):format(ms(c.sandboxd), ms(c.nowalls), ms(c.floor), ms(c.node))
    end },
  { part = "paired", label = "— the relays' own CPU per 1 MB request: relay / relayjson / relaysplice (ms)",
    shown = function(r)
      local c = r.big_server_cpu_us or {}
      local function ms(x) return x and fmt(x / 1000, 2) or "—" end
      return ("%s / %s / %s"):format(ms(c.relay), ms(c.relayjson), ms(c.relaysplice))
    end },
  { part = "paired", label = "load average at the paired bench's start → end",
    shown = function(r, line) return (r.load_start or line.load_before):match("^%S+") .. " → "
      .. (r.load_end or line.load_after):match("^%S+") end },
  { part = "threads500", label = "500 threads × `sleep 10`: completed within 60 s", goal = "all",
    shown = function(r) return ("%d of %d"):format(r.completed_within_goal or 0, r.commands or 0) end,
    value = function(r) return num(r.completed_within_goal) end, met = function(_, r) return all_in(r) end },
  { part = "threads500", label = "— failures", goal = "0",
    value = function(r) return num(r.failures) end, met = at_most(0) },
  { part = "threads500", label = "— longest heartbeat gap (ms, interval 1,000)", goal = "≤ 2,000",
    value = function(r) return num(r.longest_heartbeat_gap_ms) end, met = at_most(2000) },
  { part = "threads500", label = "— sandboxd's loop lag p99, /metrics (ms)", goal = "≤ 50",
    value = function(r) return num(r.loop_lag_p99_ms) end, met = at_most(50) },
  { part = "threads500", label = "— load average before → peak",
    shown = function(r) return fmt(r.load1_before) .. " → " .. fmt(r.load1_peak) end },
  { part = "concurrent", label = "2,000 threads × `sleep 20`: completed within 5 min", goal = "all",
    shown = function(r) return ("%d of %d"):format(r.completed_within_goal or 0, r.commands or 0) end,
    value = function(r) return num(r.completed_within_goal) end, met = function(_, r) return all_in(r) end },
  { part = "concurrent", label = "— longest heartbeat gap (ms, interval 1,000)", goal = "≤ 2,000",
    value = function(r) return num(r.longest_heartbeat_gap_ms) end, met = at_most(2000) },
  { part = "concurrent", label = "— server RSS peak, VmHWM (MiB)", goal = "≤ 64",
    value = function(r) return num(r.server_vmhwm_mib) end, met = at_most(64) },
  { part = "concurrent", label = "— sandboxd's loop lag p99, /metrics (ms)", goal = "≤ 50",
    value = function(r) return num(r.loop_lag_p99_ms) end, met = at_most(50) },
  { part = "concurrent", label = "— load average before → peak",
    shown = function(r) return fmt(r.load1_before) .. " → " .. fmt(r.load1_peak) end },
}

local lines, columns, seen = {}, {}, {}
local file = assert(arg[1], "usage: lua5.4 bench/issue43_table.lua FILE")
for l in io.lines(file) do
  if l:sub(1, 1) == "{" then
    local line = cjson.decode(l)
    lines[#lines + 1] = line
    local key = line.run .. " " .. line.bin
    if not seen[key] then
      seen[key] = true
      columns[#columns + 1] = { run = line.run, bin = line.bin }
    end
  end
end

local bins, bin_index = {}, {}
for _, c in ipairs(columns) do
  if not bin_index[c.bin] then
    bins[#bins + 1] = c.bin
    bin_index[c.bin] = #bins
  end
end

local function find(part, col)
  for _, line in ipairs(lines) do
    if line.part == part and line.run == col.run and line.bin == col.bin then return line end
  end
end

local head = { "figure", "goal" }
for _, c in ipairs(columns) do
  head[#head + 1] = #bins > 1 and ("run %d, bin %s"):format(c.run, string.char(64 + bin_index[c.bin]))
    or ("run %d"):format(c.run)
end
head[#head + 1] = "met in"
local out = { "| " .. table.concat(head, " | ") .. " |", "|" .. (" --- |"):rep(#head) }

for _, row in ipairs(ROWS) do
  local cells, met_n, runs_n = { row.label, row.goal or "" }, {}, {}
  local present = false
  for _, c in ipairs(columns) do
    local line = find(row.part, c)
    local cell = "—"
    if line and line.result ~= nil and line.result ~= cjson.null then
      present = true
      local r = line.result
      local v = row.value and row.value(r)
      cell = row.shown and row.shown(r, line) or fmt(v)
      if row.met then
        runs_n[c.bin] = (runs_n[c.bin] or 0) + 1
        if v ~= nil and row.met(v, r) then
          met_n[c.bin] = (met_n[c.bin] or 0) + 1
          cell = cell .. " met"
        else
          cell = "**" .. cell .. " not met**"
        end
      end
    elseif line and line.error then
      present = true
      cell = "failed"
      if row.met then runs_n[c.bin] = (runs_n[c.bin] or 0) + 1 end
    end
    cells[#cells + 1] = cell
  end
  local tally = {}
  if row.met then
    for i, b in ipairs(bins) do
      local t = ("%d of %d"):format(met_n[b] or 0, runs_n[b] or 0)
      tally[#tally + 1] = #bins > 1 and (string.char(64 + i) .. " " .. t) or t
    end
  end
  cells[#cells + 1] = table.concat(tally, ", ")
  if present then out[#out + 1] = "| " .. table.concat(cells, " | ") .. " |" end
end

print(table.concat(out, "\n"))
if #bins > 1 then
  for i, b in ipairs(bins) do print(("\nbin %s: %s"):format(string.char(64 + i), b)) end
end
for _, line in ipairs(lines) do
  if line.error then
    print(("\nrun %d, %s, %s failed: %s"):format(line.run, line.part, line.bin, line.error))
  end
end

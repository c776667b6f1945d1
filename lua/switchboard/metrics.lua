-- The process's metrics in the Prometheus text exposition format (version 0.0.4): counters
-- with labels, gauges read when scraped, histograms. One registry per process (the module);
-- the places that count call inc/observe, `GET /metrics` calls render().
--
--   metrics.inc("switchboard_commands_total", {outcome = "exit"} [, n])
--   metrics.observe("switchboard_command_duration_seconds", seconds)
--   metrics.gauge("switchboard_instances", {state = "awake"}, function() return n end)
--   metrics.collector(owner, fn)   -- fn(owner) before each render (counts kept in batches)
--   metrics.render() → text
--
-- Every family is declared in FAMILIES below (its type and help), so a scrape shows every
-- family from the start, at zero, and a typo in a name raises instead of inventing a metric.

local M = {}

-- Durations of commands: from a second to the shipped 20-minute ceiling.
local DURATION_BUCKETS = { 0.1, 0.5, 1, 5, 15, 30, 60, 120, 300, 600, 1200 }

local FAMILIES = {
  { name = "switchboard_commands_total", type = "counter",
    help = "Commands by outcome: exit (ran to its end), 124 (its deadline killed it), stopped, infra, capacity.",
    zero = { { outcome = "exit" }, { outcome = "124" }, { outcome = "stopped" }, { outcome = "infra" },
             { outcome = "capacity" } } },
  { name = "switchboard_command_duration_seconds", type = "histogram",
    help = "How long commands ran.", buckets = DURATION_BUCKETS },
  { name = "switchboard_instances", type = "gauge",
    help = "Sandbox instances by state (awake, sleeping: put to sleep and not woken since)." },
  { name = "switchboard_background_processes", type = "gauge",
    help = "sandboxd's background processes running (POST /processes), all threads together." },
  { name = "switchboard_exposed_ports", type = "gauge",
    help = "sandboxd's exposed ports (POST /ports), all threads together." },
  { name = "switchboard_exec_lane_total", type = "counter",
    help = "Commands sandboxd's exec lane ran, by how they were answered: answered (by the lane), handed_back (to Lua: not ordinary).",
    zero = { { outcome = "answered" }, { outcome = "handed_back" } } },
  { name = "switchboard_fleet_busy_total", type = "counter",
    help = "Requests answered fleet-busy (every instance awake and in use)." },
  { name = "switchboard_policy_reloads_total", type = "counter",
    help = "Policy reloads by result (ok, failed).", zero = { { result = "ok" }, { result = "failed" } } },
  { name = "switchboard_heartbeat_gaps_total", type = "counter",
    help = "Heartbeats sent later than 1.5 heartbeat intervals after the previous one (a busy loop)." },
  { name = "switchboard_instance_starts", type = "gauge",
    help = "Instance starts by state: waiting (for a slot of policies/isolation.lua starts_at_once; the request keeps its heartbeats), running." },
  { name = "switchboard_loop_lag_seconds", type = "gauge",
    help = "How late the event loop ran a timer due every 100 ms, over the last minute, by quantile (0.5, 0.99; 1 is the minute's largest)." },
  { name = "switchboard_lua_heap_bytes", type = "gauge",
    help = "The Lua heap's size (collectgarbage count: live data and garbage not yet collected)." },
  { name = "switchboard_proc_lua_objects", type = "gauge",
    help = "Lua objects the process supervisor made since the start, by kind: record (a core.spawn's), result (proc:wait's table). A command the exec lane answers makes neither." },
  { name = "switchboard_github_token_mints_total", type = "counter",
    help = "GitHub installation tokens minted, by result (ok, failed).",
    zero = { { result = "ok" }, { result = "failed" } } },
}

local by_name = {}
for _, f in ipairs(FAMILIES) do by_name[f.name] = f end

local values = {}   -- name → label text → number (counters)
-- owner → fn(owner), called before each render: a source that counts in batches (sandboxd's
-- exec lane) brings its counts in. Weak: a source gone is forgotten.
local collectors = setmetatable({}, { __mode = "k" })
local gauges = {}   -- name → label text → fn
local hists = {}    -- name → {counts = {per bucket}, sum, count}

local function escape(v)
  return (tostring(v):gsub("\\", "\\\\"):gsub("\n", "\\n"):gsub('"', '\\"'))
end

-- The text of one label, kept per name and value: a series counted per request (a command's
-- outcome) is not formatted and escaped again each time. At most ONE_LABEL_KEPT values per
-- name are kept (a label with many values is formatted each time).
local ONE_LABEL_KEPT = 256
local one_label, one_label_n = {}, {} -- name → value → text; name → how many kept
local function one_label_text(k, v)
  local kept = one_label[k]
  if kept == nil then kept = {} one_label[k], one_label_n[k] = kept, 0 end
  local text = kept[v]
  if text then return text end
  text = ('%s="%s"'):format(k, escape(v))
  if one_label_n[k] < ONE_LABEL_KEPT then kept[v], one_label_n[k] = text, one_label_n[k] + 1 end
  return text
end

-- {a = "x", b = "y"} → 'a="x",b="y"' (sorted, so one series has one text).
local function label_text(labels)
  if labels == nil then return "" end
  local k1, v1 = next(labels)
  if k1 ~= nil and type(v1) == "string" and next(labels, k1) == nil then
    return one_label_text(k1, v1)
  end
  local keys = {}
  for k in pairs(labels) do keys[#keys + 1] = k end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do parts[#parts + 1] = ('%s="%s"'):format(k, escape(labels[k])) end
  return table.concat(parts, ",")
end

local function family(name, want)
  local f = by_name[name]
  if f == nil then error("unknown metric " .. tostring(name), 3) end
  if want and f.type ~= want then error(("metric %s is a %s"):format(name, f.type), 3) end
  return f
end

function M.inc(name, labels, n)
  family(name, "counter")
  local series = values[name] or {}
  values[name] = series
  local key = label_text(labels)
  series[key] = (series[key] or 0) + (n or 1)
end

function M.collector(owner, fn)
  collectors[owner] = fn
end

function M.gauge(name, labels, fn)
  family(name, "gauge")
  gauges[name] = gauges[name] or {}
  gauges[name][label_text(labels)] = fn
end

function M.observe(name, v)
  local f = family(name, "histogram")
  local h = hists[name]
  if h == nil then
    h = { counts = {}, sum = 0, count = 0 }
    for i = 1, #f.buckets do h.counts[i] = 0 end
    hists[name] = h
  end
  for i, le in ipairs(f.buckets) do
    if v <= le then h.counts[i] = h.counts[i] + 1 end
  end
  h.sum = h.sum + v
  h.count = h.count + 1
end

-- For specs: forget every value.
function M.reset()
  values, gauges, hists = {}, {}, {}
end

local function num(v)
  if v ~= v then return "NaN" end
  if v == math.huge then return "+Inf" end
  if v == -math.huge then return "-Inf" end
  if math.type(v) == "integer" or (v == math.floor(v) and math.abs(v) < 2^53) then
    return string.format("%d", v)
  end
  local s = string.format("%.15g", v)
  if tonumber(s) ~= v then s = string.format("%.17g", v) end
  return s
end

local function series_line(out, name, labels, v)
  if labels == "" then
    out[#out + 1] = ("%s %s"):format(name, num(v))
  else
    out[#out + 1] = ("%s{%s} %s"):format(name, labels, num(v))
  end
end

local function sorted(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys
end

function M.render()
  for owner, fn in pairs(collectors) do
    local ok, err = pcall(fn, owner)
    if not ok then require("switchboard.core").log("error", "metrics.collector_failed", { error = tostring(err) }) end
  end
  local out = {}
  for _, f in ipairs(FAMILIES) do
    out[#out + 1] = ("# HELP %s %s"):format(f.name, escape(f.help))
    out[#out + 1] = ("# TYPE %s %s"):format(f.name, f.type)
    if f.type == "counter" then
      local series = {}
      for _, z in ipairs(f.zero or { {} }) do series[label_text(z)] = 0 end
      for k, v in pairs(values[f.name] or {}) do series[k] = v end
      for _, k in ipairs(sorted(series)) do series_line(out, f.name, k, series[k]) end
    elseif f.type == "gauge" then
      local g = gauges[f.name] or {}
      for _, k in ipairs(sorted(g)) do
        local ok, v = pcall(g[k])
        if ok and type(v) == "number" then series_line(out, f.name, k, v) end
      end
    else
      local h = hists[f.name] or { counts = {}, sum = 0, count = 0 }
      for i, le in ipairs(f.buckets) do
        series_line(out, f.name .. "_bucket", ('le="%s"'):format(num(le)), h.counts[i] or 0)
      end
      series_line(out, f.name .. "_bucket", 'le="+Inf"', h.count)
      series_line(out, f.name .. "_sum", "", h.sum)
      series_line(out, f.name .. "_count", "", h.count)
    end
  end
  return table.concat(out, "\n") .. "\n"
end

M.CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

-- The answer to GET /metrics through an engine response.
function M.answer(res)
  return res:send(200, { ["content-type"] = M.CONTENT_TYPE }, M.render())
end

-- GET /metrics without a bearer on an address of its own (`--metrics-listen`: keep it on the
-- scraper's private network). Nothing else is served there. → server | nil, err
function M.serve(host, port)
  local core = require("switchboard.core")
  return core.http.serve{
    host = host, port = port,
    limits = { max_header_bytes = 16 * 1024, max_body_bytes = 1024, request_timeout_ms = 10000,
      idle_timeout_ms = 60000, max_connections = 64 },
    handler = function(req, res)
      if req.path == "/metrics" and req.method == "GET" then return M.answer(res) end
      res:send(404, { ["content-type"] = "text/plain" }, "only GET /metrics is served here\n")
    end,
  }
end

return M

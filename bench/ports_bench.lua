-- sandboxd's background processes and port proxy (bench/README.md "Background processes and
-- the port proxy"). Run from the repository root, as root (the walls):
--
--   lua5.4 bench/ports_bench.lua [STARTS=7] [REQUESTS=200] [ROUNDS=7]
--
-- Starts the real walled `switchboard sandboxd` (SWITCHBOARD_BIN, default ./build/switchboard)
-- on loopback and measures:
--   start    POST /processes of a Node HTTP server → its first 200 through the preview URL
--            (polled every 5 ms), STARTS times (each killed before the next), against the same
--            server started on the host by core.spawn → its first 200 on loopback;
--   proxy    REQUESTS keep-alive GETs (one curl, one connection) through the preview URL, and
--            the same to the same server code on the host directly, alternating per round; per
--            round the median per-request time (curl's time_total) of each. To tell the proxy's
--            own part from the upstream's: the same curl run inside the instance (/exec)
--            against the server there, keep-alive and with a connection per request (the proxy
--            opens one upstream connection per request).
-- One JSON document on stdout.
local build = os.getenv("SB_BUILD_DIR") or "./build"
package.path = "./lua/?.lua;./lua/?/init.lua;./tests/lua/?.lua;" .. package.path
package.cpath = build .. "/lua/?.so;" .. package.cpath

local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")

core.log_format("text", "warn")

local STARTS = tonumber(arg[1]) or 7
local REQUESTS = tonumber(arg[2]) or 200
local ROUNDS = tonumber(arg[3]) or 7

local function median(xs)
  local t = {}
  for i, x in ipairs(xs) do t[i] = x end
  table.sort(t)
  local n = #t
  if n % 2 == 1 then return t[(n + 1) // 2] end
  return (t[n // 2] + t[n // 2 + 1]) / 2
end

local function round(x, digits)
  local m = 10 ^ (digits or 3)
  return math.floor(x * m + 0.5) / m
end

-- A small keep-alive HTTP server (the same code inside the instance and on the host).
local function node_server(port)
  return ("exec node -e \"require('http').createServer((q,s)=>{s.setHeader('content-type','text/plain');"
    .. "s.end('hello '+q.url)}).listen(%d,'127.0.0.1')\""):format(port)
end

local function call(h, method, path, body)
  local status, _, raw = S.call(h.url, path, { method = method, body = body, thread = "bench" })
  local text = (raw or ""):gsub("^%s+", "")
  return status, text:sub(1, 1) == "{" and cjson.decode(text) or nil
end

local function first_ok(url, t0, bound_ms)
  while core.now_ms() - t0 < bound_ms do
    local status = core.http.request{ url = url, deadline_ms = 5000 }
    if status == 200 then return core.now_ms() - t0 end
    core.sleep(5)
  end
  error("no answer from " .. url)
end

local function curl_argv(url, close)
  local argv = { "curl", "-s", "-w", "%{time_total} %{num_connects}\\n" }
  if close then argv[#argv + 1] = "-H"; argv[#argv + 1] = "Connection: close" end
  for _ = 1, REQUESTS do
    argv[#argv + 1] = "-o"; argv[#argv + 1] = "/dev/null"; argv[#argv + 1] = url
  end
  return argv
end

local function curl_median(out, close)
  local times, connects = {}, 0
  for t, c in out:gmatch("([%d.]+) (%d+)") do
    times[#times + 1] = tonumber(t) * 1000
    connects = connects + tonumber(c)
  end
  assert(#times == REQUESTS, "curl: " .. out)
  assert(close or connects == 1, "curl did not keep the connection alive (" .. connects .. " connects)")
  return median(times)
end

-- Per-request medians (ms) of REQUESTS keep-alive GETs of url by one curl.
local function curl_round(url)
  local p = assert(core.spawn{ argv = curl_argv(url), env = S.base_env(), max_output = 1 << 20, deadline_ms = 120000 })
  local r = p:wait()
  return curl_median(r.stdout)
end

-- The same inside the instance, through /exec (close: a connection per request).
local function inside_round(h, url, close)
  local words = {}
  for i, a in ipairs(curl_argv(url, close)) do words[i] = "'" .. a .. "'" end
  local _, doc = call(h, "POST", "/exec", { command = table.concat(words, " "), timeoutMs = 120000 })
  return curl_median(doc.stdout, close)
end

core.run(function()
  local h = S.start_sandboxd{ policies = S.policy_dir("sandbox.sleep_after = \"10m\"\n") }
  assert(call(h, "POST", "/exec", { command = "true" }) == 200)
  -- start
  local starts, host_starts = {}, {}
  for i = 1, STARTS do
    local port = 9100 + i
    local _, exposed = call(h, "POST", "/ports", { port = port })
    local t0 = core.now_ms()
    local status, p = call(h, "POST", "/processes", { command = node_server(port) })
    assert(status == 201, "POST /processes: " .. tostring(status))
    starts[#starts + 1] = first_ok(exposed.url, t0, 30000)
    call(h, "DELETE", "/processes/" .. p.id)
    call(h, "DELETE", "/ports/" .. port)
    local hport = 9200 + i
    t0 = core.now_ms()
    local hp = assert(core.spawn{ argv = { "bash", "-c", node_server(hport) }, env = S.base_env() })
    host_starts[#host_starts + 1] = first_ok(("http://127.0.0.1:%d/"):format(hport), t0, 30000)
    hp:kill("KILL")
    hp:wait()
  end
  -- proxy overhead
  local _, p = call(h, "POST", "/processes", { command = node_server(9300) })
  local _, exposed = call(h, "POST", "/ports", { port = 9300 })
  first_ok(exposed.url, core.now_ms(), 30000)
  local hp = assert(core.spawn{ argv = { "bash", "-c", node_server(9301) }, env = S.base_env() })
  local direct_url = "http://127.0.0.1:9301/x"
  first_ok(direct_url, core.now_ms(), 30000)
  local proxied, direct, inside_keep, inside_close = {}, {}, {}, {}
  for _ = 1, ROUNDS do
    proxied[#proxied + 1] = curl_round(exposed.url .. "x")
    direct[#direct + 1] = curl_round(direct_url)
    inside_keep[#inside_keep + 1] = inside_round(h, "http://127.0.0.1:9300/x", false)
    inside_close[#inside_close + 1] = inside_round(h, "http://127.0.0.1:9300/x", true)
  end
  hp:kill("KILL")
  hp:wait()
  call(h, "DELETE", "/processes/" .. p.id)
  h:stop()
  h:wait()
  print(cjson.encode({
    start_ms = { median = round(median(starts), 1), all = starts,
                 host_median = round(median(host_starts), 1) },
    proxy = { requests = REQUESTS, rounds = ROUNDS,
              proxied_ms = round(median(proxied), 4), direct_ms = round(median(direct), 4),
              added_ms = round(median(proxied) - median(direct), 4),
              inside_keepalive_ms = round(median(inside_keep), 4),
              inside_new_connection_ms = round(median(inside_close), 4),
              per_round = { proxied = proxied, direct = direct } },
  }))
end)

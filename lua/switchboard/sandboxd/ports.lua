-- sandboxd's exposed ports (docs/sandboxd.md "Ports"): POST /ports {port} gives a URL that
-- reaches that port inside the thread's instance from outside, through sandboxd's own HTTP
-- server: http://HOST:PORT/ports/<token>/… (HOST:PORT the address the caller reached sandboxd
-- at, so it works with no DNS), or under timeouts sandbox.ports_base_url when policy names one,
-- or a host per port, https://<token>.preview.example.com/…, when sandbox.ports_host_url names
-- that form ("https://{token}.preview.example.com": a wildcard name that reaches sandboxd).
-- The token is 128 random bits; only its SHA-256 is kept, and a preview request is let in by
-- the token alone (no bearer: a preview URL is meant to be shared).
--
-- How a request reaches the port: the instance has a network namespace of its own (src/walls),
-- so sandboxd makes the upstream socket inside it (core.http.request's netns: the loop thread
-- steps into /proc/<instance init>/ns/net for the socket(2) alone) and connects it to
-- 127.0.0.1:<port> there. Only that instance's namespace is reached; a connection is never
-- reused for another request (a cached one could belong to another instance's namespace).
--
--   local reg = ports.new()
--   reg:expose(snap, key, port, base) → url | nil, status, why, reason
--   reg:unexpose(key, port)           → true | nil (not exposed)
--   reg:find(token)                   → {key, port} | nil   (constant-time compare of the hash)
--   ports.token_of(path)              → token, rest | nil   (a preview path)
--   ports.proxy(ctx, snap, entry, req, res)                 answers the preview request
local core = require("switchboard.core")

local M = {}

local TOKEN_HEX = 32 -- 128 bits

-- A preview path: /ports/<32 hex digits>[/rest]. Returns the token and the rest ("/" at least).
function M.token_of(path)
  local token, rest = path:match("^/ports/(" .. ("%x"):rep(TOKEN_HEX) .. ")(/?.*)$")
  if not token then return nil end
  if rest == "" then rest = "/" end
  return token:lower(), rest
end

-- A preview host: <32 hex digits>.<anything> (the host-per-port form). Returns the token.
function M.token_of_host(host)
  local token = type(host) == "string" and host:match("^(" .. ("%x"):rep(TOKEN_HEX) .. ")%.")
  return token and token:lower() or nil
end

local function hash_of(token) return core.crypto.hex(core.crypto.sha256(token)) end

-- Equal strings of equal length, compared without an early exit.
local function same(a, b)
  if #a ~= #b then return false end
  local diff = 0
  for i = 1, #a do diff = diff | (a:byte(i) ~ b:byte(i)) end
  return diff == 0
end

local Registry = {}
Registry.__index = Registry

function M.new()
  -- by_hash: token hash → {key, port, hash}; threads: key → {port → entry};
  -- idle: upstream connections kept alive between requests, by port entry and instance
  return setmetatable({ by_hash = {}, threads = {}, idle = {} }, Registry)
end

-- Idle upstream connections: at most POOL_MAX per exposed port and instance, each reused only
-- within POOL_IDLE_MS (under the keep-alive timeouts of common dev servers: Node's 5 s), so a
-- connection the upstream closed meanwhile is rarely met — and when it is, a request that may
-- be repeated is sent again once on a fresh one.
local POOL_MAX, POOL_IDLE_MS = 4, 3000

function Registry:take(pool)
  local list = self.idle[pool]
  while list and #list > 0 do
    local item = table.remove(list)
    if core.now_ms() - item.at < POOL_IDLE_MS then return item.up end
    item.up:close()
  end
  return nil
end

-- An idle connection is closed when its time is up even if no request comes to take it: it
-- holds a descriptor and its instance's network namespace.
function Registry:give(pool, up)
  local list = self.idle[pool] or {}
  self.idle[pool] = list
  if #list >= POOL_MAX then return up:close() end
  local item = { up = up, at = core.now_ms() }
  list[#list + 1] = item
  core.go(function()
    core.sleep(POOL_IDLE_MS)
    local now = self.idle[pool]
    for i, x in ipairs(now or {}) do
      if x == item then
        table.remove(now, i)
        x.up:close()
        if #now == 0 then self.idle[pool] = nil end
        break
      end
    end
  end)
end

local function drop_pools(self, hash)
  for pool, list in pairs(self.idle) do
    if pool:sub(1, #hash) == hash then
      for _, item in ipairs(list) do item.up:close() end
      self.idle[pool] = nil
    end
  end
end

function Registry:expose(snap, key, port, base)
  local max = snap.timeouts.sandbox.max_ports -- a policy that predates it: the schema's default
  local t = self.threads[key] or {}
  self.threads[key] = t
  local old = t[port]
  local count = 0
  for _ in pairs(t) do count = count + 1 end
  if not old and count >= max then
    return nil, 409, ("this thread exposes %d ports already, the most it may (timeouts "
      .. "sandbox.max_ports); remove one first (DELETE /ports/<port>)"):format(max), "too-many-ports"
  end
  if old then -- exposed again: the old URL stops working
    self.by_hash[old.hash] = nil
    drop_pools(self, old.hash)
  end
  local token = core.crypto.hex(core.crypto.random_bytes(TOKEN_HEX // 2))
  local entry = { key = key, port = port, hash = hash_of(token) }
  t[port] = entry
  self.by_hash[entry.hash] = entry
  local host_url = snap.timeouts.sandbox.ports_host_url
  if host_url then return (host_url:gsub("{token}", token):gsub("/+$", "")) .. "/" end
  base = (snap.timeouts.sandbox.ports_base_url or base):gsub("/+$", "")
  return base .. "/ports/" .. token .. "/"
end

function Registry:unexpose(key, port)
  local t = self.threads[key]
  local entry = t and t[port]
  if not entry then return nil end
  t[port] = nil
  self.by_hash[entry.hash] = nil
  drop_pools(self, entry.hash)
  return true
end

function Registry:list(key)
  local out = {}
  for port in pairs(self.threads[key] or {}) do out[#out + 1] = port end
  table.sort(out)
  return out
end

-- Exposed ports of every thread (the switchboard_exposed_ports gauge).
function Registry:count()
  local n = 0
  for _ in pairs(self.by_hash) do n = n + 1 end
  return n
end

function Registry:find(token)
  local hash = hash_of(token)
  local entry = self.by_hash[hash]
  if entry and same(entry.hash, hash) then return entry end
  return nil
end

-- Hop-by-hop headers (RFC 9110 7.6.1) and what the proxy sets itself.
local HOP = {
  connection = true, ["keep-alive"] = true, ["proxy-connection"] = true, te = true,
  trailer = true, ["transfer-encoding"] = true, upgrade = true, ["proxy-authorization"] = true,
  ["proxy-authenticate"] = true, host = true, ["content-length"] = true, expect = true,
}

M.MAX_HEAD = 64 * 1024 -- bytes of an upstream's answer head

local TOKEN = "^[!#$%%&'*+.^_`|~%w-]+$"

-- An upstream's answer head (bytes from inside the instance: nothing trusted). Pure; never
-- raises. Returns {status, head_len, headers = {lower-cased name → value, repeats joined with
-- ", "}, lines = {{name, value}, …}} — or nil while the head is not whole, or false, why.
function M.parse_head(bytes, max)
  max = max or M.MAX_HEAD
  local stop = bytes:find("\r\n\r\n", 1, true)
  if not stop then
    if #bytes > max then return false, "its head is over " .. max .. " bytes" end
    return nil
  end
  if stop + 3 > max then return false, "its head is over " .. max .. " bytes" end
  local head = bytes:sub(1, stop + 1)
  local status_line, rest = head:match("^([^\r\n]*)\r\n(.*)$")
  local status = status_line and tonumber(status_line:match("^HTTP/1%.[01] (%d%d%d)"))
  if not status or status < 100 then return false, "its status line is not HTTP/1.x" end
  local headers, lines = {}, {}
  for line in rest:gmatch("([^\r\n]*)\r\n") do
    local name, value = line:match("^([^:]+):(.*)$")
    if not name or not name:find(TOKEN) then return false, "a header line is malformed" end
    value = value:gsub("^[ \t]+", ""):gsub("[ \t]+$", "")
    if value:find("[%z\r\n]") then return false, "a header value holds a control byte" end
    name = name:lower()
    lines[#lines + 1] = { name, value }
    headers[name] = headers[name] and (headers[name] .. ", " .. value) or value
  end
  local cl = headers["content-length"]
  if cl and not cl:find("^%d+$") then return false, "its content-length is not one number" end
  return { status = status, head_len = stop + 3, headers = headers, lines = lines }
end

-- The head sent upstream: the client's, hop-by-hop headers (and those its Connection names)
-- out, Host the instance's, the body's length its own; an upgrade (WebSocket) keeps its
-- Connection and Upgrade, anything else leaves the connection alive (HTTP/1.1's default).
local function request_head(req, target, port, upgrade)
  local named = {}
  for token in (req.headers.connection or ""):gmatch("[^,%s]+") do named[token:lower()] = true end
  local out = { ("%s %s HTTP/1.1\r\nhost: 127.0.0.1:%d\r\n"):format(req.method, target, port) }
  for name, value in pairs(req.headers) do
    if not HOP[name] and not named[name] and name ~= "x-forwarded-host" and name ~= "x-forwarded-for" then
      out[#out + 1] = name .. ": " .. value .. "\r\n"
    end
  end
  out[#out + 1] = "x-forwarded-host: " .. (req.headers.host or "") .. "\r\n"
  out[#out + 1] = "x-forwarded-for: " .. (req.remote_addr or "") .. "\r\n"
  if upgrade then
    out[#out + 1] = "connection: upgrade\r\nupgrade: " .. upgrade .. "\r\n"
  end
  local body = req.body or ""
  if #body > 0 or req.method == "POST" or req.method == "PUT" or req.method == "PATCH" then
    out[#out + 1] = "content-length: " .. #body .. "\r\n"
  end
  out[#out + 1] = "\r\n"
  return table.concat(out)
end

local function answer(res, status, text)
  return res:send(status, { ["content-type"] = "text/plain; charset=utf-8", ["cache-control"] = "no-store" },
    text .. "\n")
end

-- The answer's head for the client, hop-by-hop headers out (the engine frames the body).
local function response_headers(parsed)
  local out = {}
  for name, value in pairs(parsed.headers) do
    if not HOP[name] then out[name] = value end
  end
  return out
end

-- The answer's head as the upstream sent it, for a relayed answer: Connection and Keep-Alive
-- replaced by "connection: close" (the relay ends with the upstream's close), and no
-- Content-Length beside a Transfer-Encoding.
local function relayed_head(parsed, bytes)
  local out = { bytes:match("^[^\r\n]*\r\n") }
  local chunked = parsed.headers["transfer-encoding"] ~= nil
  for _, line in ipairs(parsed.lines) do
    local name = line[1]
    if name ~= "connection" and name ~= "keep-alive" and not (chunked and name == "content-length") then
      out[#out + 1] = name .. ": " .. line[2] .. "\r\n"
    end
  end
  out[#out + 1] = "connection: close\r\n\r\n"
  return table.concat(out)
end

-- Streams an answer of known length: the engine frames it, so the client's connection stays
-- open for its next request. Returns true when exactly the answer came (the upstream
-- connection may carry another).
local function stream_length(up, res, parsed, leftover, deadline_ms)
  local remaining = tonumber(parsed.headers["content-length"])
  local headers = response_headers(parsed)
  if #leftover >= remaining then -- the whole answer came with its head: one write
    res:send(parsed.status, headers, leftover:sub(1, remaining))
    return #leftover == remaining
  end
  headers["content-length"] = remaining
  -- the head goes out with the first body bytes (one segment, not two)
  if not res:start(parsed.status, headers, { hold = true }) then return end
  local chunk, exact = leftover, true
  while remaining > 0 do
    if chunk == nil then -- the upstream ended short: the engine closes the client's connection
      res:finish()
      return false
    end
    if #chunk > remaining then chunk, exact = chunk:sub(1, remaining), false end
    if #chunk > 0 then
      if not res:write(chunk) or not res:drain() then return false end
      remaining = remaining - #chunk
    end
    if remaining > 0 then chunk = up:read(deadline_ms) end
  end
  res:finish()
  return exact
end

-- Whether the upstream's answer lets its connection carry another request.
local function reusable(parsed, buf)
  if not buf:find("^HTTP/1%.1 ") then return false end
  for token in (parsed.headers.connection or ""):gmatch("[^,%s]+") do
    if token:lower() == "close" then return false end
  end
  return true
end

-- Methods a client may repeat (RFC 9110 9.2.2): sent again once when a kept-alive upstream
-- connection turns out closed before it answered anything.
local IDEMPOTENT = { GET = true, HEAD = true, OPTIONS = true, PUT = true, DELETE = true, TRACE = true }

local function connect(entry, netns)
  local up, err = core.http.connect{ port = entry.port, netns = netns }
  if up then return up end
  if err and err.not_sent then
    return nil, core.error("transport", ("nothing listens on port %d in the sandbox instance"):format(entry.port))
  end
  return nil, core.error("transport", ("port %d in the sandbox instance cannot be reached"):format(entry.port))
end

-- The preview request, answered: the thread's instance must be awake (a preview never wakes
-- one: there is nothing to serve in a new one), and its port listening.
function M.proxy(ctx, snap, entry, rest, req, res)
  local inst = ctx.fleet:get(entry.key)
  if not inst then
    return answer(res, 502, ("the sandbox instance behind this URL is asleep; start the server on port %d again")
      :format(entry.port))
  end
  inst = ctx.fleet:acquire(entry.key) -- awake while the request is proxied
  local held <close> = setmetatable({}, { __close = function() ctx.fleet:release(inst) end })
  local ws = inst.runner.ws
  local netns
  if ws and ws.walls then
    local walled = ws.instance
    if not (walled and walled.pid and walled.state == "ready") then
      return answer(res, 502, "the sandbox instance behind this URL is not running")
    end
    netns = ("/proc/%d/ns/net"):format(walled.pid)
  end
  local upgrade = req.headers.upgrade
  if upgrade == "" then upgrade = nil end
  local reg, pool = ctx.ports, entry.hash .. "@" .. (netns or "")
  local up = not upgrade and IDEMPOTENT[req.method] and reg:take(pool) or nil
  local reused, why = up ~= nil, nil
  if not up then
    up, why = connect(entry, netns)
    if not up then return answer(res, 502, why.message) end
  end
  local keep = false -- set once the answer came whole: the connection goes back to the pool
  local closing <close> = setmetatable({}, { __close = function()
    if keep then reg:give(pool, up) elseif up then up:close() end
  end })
  local target = rest
  if req.query and req.query ~= "" then target = target .. "?" .. req.query end
  local head = request_head(req, target, entry.port, upgrade)
  up:write(head)
  if req.body and #req.body > 0 then up:write(req.body) end
  local deadline_ms = snap.timeouts.sandbox.default_budget_ms
  local buf, parsed = "", nil
  while true do
    local chunk, rerr = up:read(deadline_ms)
    if not chunk and reused and buf == "" and not (rerr and rerr.kind == "timeout") then
      -- the kept-alive connection had been closed by the server: once more on a fresh one
      reused = false
      up:close()
      up, why = connect(entry, netns)
      if not up then return answer(res, 502, why.message) end
      up:write(head)
      if req.body and #req.body > 0 then up:write(req.body) end
      chunk = up:read(deadline_ms)
    end
    if not chunk then
      return answer(res, 502, ("port %d in the sandbox instance closed or timed out before answering"):format(entry.port))
    end
    buf = buf .. chunk
    parsed, why = M.parse_head(buf)
    while parsed and parsed.status < 200 and parsed.status ~= 101 do -- 100, 102, 103: not passed on
      buf = buf:sub(parsed.head_len + 1)
      parsed, why = M.parse_head(buf)
    end
    if parsed == false then
      return answer(res, 502, ("port %d in the sandbox instance answered what is not HTTP/1.x: %s"):format(entry.port, why))
    end
    if parsed then break end
  end
  local leftover = buf:sub(parsed.head_len + 1)
  if parsed.status == 101 then
    if not upgrade then return answer(res, 502, ("port %d switched protocols unasked"):format(entry.port)) end
    return res:relay(up, 101, buf) -- the head as it is (its Connection and Upgrade are the point)
  end
  if req.method == "HEAD" or parsed.status == 204 or parsed.status == 304 then
    res:send(parsed.status, response_headers(parsed), "")
    keep = leftover == "" and reusable(parsed, buf)
    return
  end
  if parsed.headers["transfer-encoding"] == nil and parsed.headers["content-length"] then
    keep = stream_length(up, res, parsed, leftover, deadline_ms) and reusable(parsed, buf)
    return
  end
  -- chunked, or until the upstream closes: passed on as it comes, and the client's connection
  -- ends with it (its head says so: a client closes once the chunked answer is whole)
  return res:relay(up, parsed.status, relayed_head(parsed, buf) .. leftover)
end

return M

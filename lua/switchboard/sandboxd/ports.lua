-- sandboxd's exposed ports (docs/sandboxd.md "Ports"): POST /ports {port} gives a URL that
-- reaches that port inside the thread's instance from outside, through sandboxd's own HTTP
-- server: http://HOST:PORT/ports/<token>/… (HOST:PORT the address the caller reached sandboxd
-- at, so it works with no DNS), or under timeouts sandbox.ports_base_url when policy names one.
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

M.DEFAULT_MAX = 10
local TOKEN_HEX = 32 -- 128 bits

-- A preview path: /ports/<32 hex digits>[/rest]. Returns the token and the rest ("/" at least).
function M.token_of(path)
  local token, rest = path:match("^/ports/(" .. ("%x"):rep(TOKEN_HEX) .. ")(/?.*)$")
  if not token then return nil end
  if rest == "" then rest = "/" end
  return token:lower(), rest
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
  -- by_hash: token hash → {key, port, hash}; threads: key → {port → entry}
  return setmetatable({ by_hash = {}, threads = {} }, Registry)
end

function Registry:expose(snap, key, port, base)
  local max = snap.timeouts.sandbox.max_ports or M.DEFAULT_MAX
  local t = self.threads[key] or {}
  self.threads[key] = t
  local old = t[port]
  local count = 0
  for _ in pairs(t) do count = count + 1 end
  if not old and count >= max then
    return nil, 409, ("this thread exposes %d ports already, the most it may (timeouts "
      .. "sandbox.max_ports); remove one first (DELETE /ports/<port>)"):format(max), "too-many-ports"
  end
  if old then self.by_hash[old.hash] = nil end -- exposed again: the old URL stops working
  local token = core.crypto.hex(core.crypto.random_bytes(TOKEN_HEX // 2))
  local entry = { key = key, port = port, hash = hash_of(token) }
  t[port] = entry
  self.by_hash[entry.hash] = entry
  base = (snap.timeouts.sandbox.ports_base_url or base):gsub("/+$", "")
  return base .. "/ports/" .. token .. "/"
end

function Registry:unexpose(key, port)
  local t = self.threads[key]
  local entry = t and t[port]
  if not entry then return nil end
  t[port] = nil
  self.by_hash[entry.hash] = nil
  return true
end

function Registry:list(key)
  local out = {}
  for port in pairs(self.threads[key] or {}) do out[#out + 1] = port end
  table.sort(out)
  return out
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

local function forwarded_headers(req, port)
  local out = {}
  local named = {}
  for token in (req.headers.connection or ""):gmatch("[^,%s]+") do named[token:lower()] = true end
  for name, value in pairs(req.headers) do
    if not HOP[name] and not named[name] then out[name] = value end
  end
  out.host = "127.0.0.1:" .. port
  out["x-forwarded-host"] = req.headers.host
  out["x-forwarded-for"] = req.remote_addr
  return out
end

local function answer(res, status, text)
  return res:send(status, { ["content-type"] = "text/plain; charset=utf-8", ["cache-control"] = "no-store" },
    text .. "\n")
end

-- The preview request, answered: the thread's instance must be awake (a preview never wakes
-- one: there is nothing to serve in a new one), and its port listening.
function M.proxy(ctx, snap, entry, rest, req, res)
  if (req.headers.upgrade or "") ~= "" then
    return answer(res, 501, "this sandboxd's port proxy does not pass protocol upgrades (WebSocket) yet")
  end
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
  local url = ("http://127.0.0.1:%d%s"):format(entry.port, rest)
  if req.query and req.query ~= "" then url = url .. "?" .. req.query end
  local status, headers, body = core.http.request{
    method = req.method, url = url, headers = forwarded_headers(req, entry.port), body = req.body,
    netns = netns, deadline_ms = snap.timeouts.sandbox.default_budget_ms,
    max_body = snap.timeouts.sandbox.max_answer_bytes,
  }
  if not status then
    local err = headers
    if err and err.not_sent then
      return answer(res, 502, ("nothing listens on port %d in the sandbox instance"):format(entry.port))
    end
    return answer(res, 502, ("port %d in the sandbox instance did not answer: %s"):format(entry.port,
      err and err.kind or "transport"))
  end
  local out = {}
  for name, value in pairs(headers) do
    if not HOP[name] then out[name] = value end
  end
  return res:send(status, out, body)
end

return M

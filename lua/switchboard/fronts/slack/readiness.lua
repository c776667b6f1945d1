-- Whether the bot can do its job now (GET /readyz), apart from whether it is alive (GET
-- /healthz): docs/deploy.md "Health and readiness".
--
--   local r = readiness.new{socket = function() → sm | nil, policy = policy.current,
--                           sandbox_urls = {"http://127.0.0.1:8080"} | nil, sandbox_token,
--                           request}
--   r:check() → ready (boolean), checks {slack = {ok, …}, policies = {ok, …}, sandbox = {ok, …}?}
--
-- slack: a Socket Mode connection is open (none while it is reconnecting, or when reconnecting
-- keeps failing); policies: a validated set is in force; sandbox (only when the bot is pointed
-- at one): every sandboxd listed answers its /healthz. Probes are cached for policies/timeouts.lua
-- readiness.cache_ms so that a probe storm cannot become a storm on sandboxd; each is given
-- readiness.probe_ms (both read at each check: a reload applies at once).
local core = require("switchboard.core")

local M = {}
local R = {}
R.__index = R

function M.new(opts)
  return setmetatable({
    socket = opts.socket, policy = opts.policy, sandbox_urls = opts.sandbox_urls,
    sandbox_token = opts.sandbox_token,
    request = opts.request or core.http.request, cached = nil, cached_at = nil,
  }, R)
end

local function slack_check(self)
  local sm = self.socket and self.socket()
  if not sm then return { ok = true, mode = "events api" } end
  local n = sm:open_connections()
  if n > 0 then return { ok = true, connections = n } end
  return { ok = false, reason = "Socket Mode is disconnected (reconnecting)" }
end

local function policies_check(self)
  local ok, snap = pcall(self.policy)
  if ok and type(snap) == "table" and snap.version then
    return { ok = true, version = snap.version:sub(1, 12) }
  end
  return { ok = false, reason = "no policy set is loaded" }
end

local function probe(self, url)
  -- sandboxd's /healthz needs the bearer like every route: a 401 is a wrong token, not ready
  local status = self.request{ method = "GET", url = url:gsub("/+$", "") .. "/healthz",
    headers = { authorization = "Bearer " .. tostring(self.sandbox_token) },
    deadline_ms = self.policy().timeouts.readiness.probe_ms }
  if status == 200 then return true end
  return false, status and ("answered HTTP " .. tostring(status)) or "unreachable"
end

local function sandbox_check(self)
  local now = core.now_ms()
  if self.cached and now - self.cached_at < self.policy().timeouts.readiness.cache_ms then return self.cached end
  local out = { ok = true }
  for _, url in ipairs(self.sandbox_urls) do
    local ok, why = probe(self, url)
    if not ok then
      out = { ok = false, reason = ("sandboxd %s %s"):format(url, why) }
      break
    end
  end
  self.cached, self.cached_at = out, core.now_ms()
  return out
end

function R:check()
  local checks = { slack = slack_check(self), policies = policies_check(self) }
  if self.sandbox_urls and #self.sandbox_urls > 0 then checks.sandbox = sandbox_check(self) end
  local ready = true
  for _, c in pairs(checks) do ready = ready and c.ok end
  return ready, checks
end

return M

-- The resident's HTTP client (docs/resident.md): where the resident is and how one request to
-- it is made, for everything that talks to it — the resident executor (/attach, /detach,
-- /healthz), the factory's /status probe, a front's `repo onboard`, and `switchboard resident
-- onboard|status`.
--
--   local url, token = client.configured(snap, getenv [, url_override])  -- | nil, the missing setting
--   local c = client.new{url, token, thread_key?, request?}
--   c:call(method, path, body?, deadline_ms, signal?) → status, doc, raw | nil, transport err
--     doc: the answer decoded when it is a JSON object, else nil
local core = require("switchboard.core")
local tracing = require("switchboard.exec.tracing")
local protocol = require("switchboard.shell.protocol")

local M = {}

local Client = {}
Client.__index = Client

-- The resident this process talks to: url, token | nil, the setting that is missing.
function M.configured(snap, getenv, url_override)
  local cfg = snap.execution.resident
  local url = url_override or getenv(cfg.url_env)
  if url == nil or url == "" then url = cfg.base_url end
  if not url or url == "" then return nil, cfg.url_env end
  local token = getenv(cfg.token_env)
  if not token or token == "" then return nil, cfg.token_env end
  return url, token
end

-- An answer's JSON object, or nil.
function M.decode(raw)
  local doc = core.json.decode(raw or "")
  return type(doc) == "table" and doc or nil
end
local decode = M.decode

function M.new(opts)
  assert(type(opts.url) == "string" and opts.url ~= "", "resident client: opts.url is required")
  return setmetatable({
    url = (opts.url:gsub("/+$", "")), token = opts.token, thread_key = opts.thread_key,
    -- each request an http.request child of the operation's span (exec/tracing.lua)
    request = tracing.http(opts.request or core.http.request, "resident"),
  }, Client)
end

-- Every route is authorized by the bearer; a thread's routes name the thread in its header.
function Client:call(method, path, body, deadline_ms, signal)
  local headers = { authorization = "Bearer " .. self.token }
  if body ~= nil then headers["content-type"] = "application/json" end
  if self.thread_key then headers[protocol.THREAD_HEADER] = self.thread_key end
  local status, err, raw = self.request{
    method = method, url = self.url .. path, headers = headers, deadline_ms = deadline_ms,
    signal = signal, body = body ~= nil and core.json.encode(body) or nil,
  }
  if status == nil then return nil, err end
  return status, decode(raw), raw
end

return M

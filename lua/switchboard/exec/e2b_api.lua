-- The e2b executor's control plane (api.<domain>, X-API-Key; docs/e2b.md): the thread's
-- sandbox made, reconnected, kept alive and deleted, and its id remembered across processes —
-- POST /sandboxes {templateID, timeout, autoPause, envVars, metadata}, POST
-- /sandboxes/{id}/connect {timeout}, POST /sandboxes/{id}/timeout {timeout}, DELETE
-- /sandboxes/{id}.
--
-- A thread's sandbox sleeps paused, not killed (issue 37): it is made with autoPause true, so
-- when its timeout passes E2B pauses it — its files (and its memory) kept, nothing billed but
-- the snapshot — and the thread's next command resumes it with the connect it already makes
-- for a sandbox past its timeout (E2B answers 201 for a resumed sandbox, 200 for one still
-- running). A sandbox E2B no longer has (404: its paused retention ran out, or it was killed)
-- is replaced by a fresh one, and the result and the card say its files are gone. The key lives in
-- the bot's environment and in that one header; no message, URL or body ever carries it.
-- Also the messages the envd side shares (a sandbox gone, a refused token, an HTTP status).
--
-- Every function takes the executor (exec/e2b.lua: api_key, key_env, ends, template, agent,
-- thread_key, state_dir, request, sleep, now_ms) and keeps the sandbox in use as ex.sandbox
-- {id, token, domain, expires_ms (our clock)}.
local core = require("switchboard.core")
local budget = require("switchboard.shell.budget")
local errors = require("switchboard.exec.errors")
local workspace = require("switchboard.shell.workspace")

local M = {}

M.DEFAULT_DOMAIN = "e2b.app"
M.QUOTE_BYTES = 200

local json = core.json

-- A hard stop ended the call: not a failure of E2B's; the engine's kind for a fired signal.
function M.stopped() return core.error("aborted", "stopped before E2B answered") end
function M.is_stopped(err) return core.is_error(err) and err.kind == "aborted" end

function M.first_line(s) return (tostring(s or ""):match("^[^\n]*")) end
local first_line = M.first_line
function M.quote(s)
  s = tostring(s or ""):gsub("%s+", " "):gsub("^ ", "")
  return s:sub(1, M.QUOTE_BYTES)
end
local quote = M.quote
local function seconds(ms) return math.floor(ms / 1000 + 0.5) end
function M.whole_seconds_up(ms) return math.tointeger(math.max(1, (ms + 999) // 1000)) end
local whole_seconds_up = M.whole_seconds_up

-- Where E2B lives, from the environment E2B's own SDKs read:
--   E2B_DOMAIN       the domain (default e2b.app): api.<domain>, 49983-<id>.<domain>
--   E2B_API_URL      the control plane's base URL (the SDKs' override; any scheme)
--   E2B_SANDBOX_URL  envd's base URL for every sandbox (the SDKs' override: requests then
--                    name the sandbox in E2b-Sandbox-Id / E2b-Sandbox-Port headers)
--   E2B_DEBUG=true   the SDKs' debug mode: http://localhost:3000 and http://localhost:49983
function M.endpoints(getenv)
  getenv = getenv or os.getenv
  local function env(name)
    local v = getenv(name)
    if v == nil or v == "" then return nil end
    return (v:gsub("/+$", ""))
  end
  local debug = (getenv("E2B_DEBUG") or ""):lower() == "true"
  local domain = env("E2B_DOMAIN") or M.DEFAULT_DOMAIN
  return {
    domain = domain,
    debug = debug,
    api_url = env("E2B_API_URL") or (debug and "http://localhost:3000" or ("https://api." .. domain)),
    sandbox_url = env("E2B_SANDBOX_URL"),
  }
end

---------------------------------------------------------------------------------------------
-- The remembered sandbox id (state_dir/e2b/<thread's directory name>)

local function id_file(self)
  if not self.state_dir then return nil end
  return self.state_dir .. "/e2b/" .. workspace.dir_name(self.thread_key)
end

local function remember(self, id)
  local f = id_file(self)
  if not f then return end
  core.fs.mkdir_p(self.state_dir .. "/e2b", tonumber("700", 8))
  core.fs.write_file(f, id)
end

function M.recalled(self)
  local f = id_file(self)
  if not f then return nil end
  local id = core.fs.read_file(f)
  if type(id) == "string" and id:find("^[%w%-_]+$") then return id end
  return nil
end

function M.forget(self)
  self.sandbox = nil
  local f = id_file(self)
  if f and core.fs.exists(f) then os.remove(f) end
end

---------------------------------------------------------------------------------------------
-- Messages (what the model and the person read)

function M.gone_message(id, route, detail)
  return ("E2B sandbox %s is gone (%s answered: %s) — E2B reclaimed or killed it, and its files "
    .. "are lost; the next command starts a fresh sandbox: re-clone before continuing")
    :format(id, route, detail)
end

function M.key_refused_message(self, status, detail)
  return ("E2B refused the API key (HTTP %d: %s) — check %s in the bot's environment (a key "
    .. "from https://e2b.dev/dashboard?tab=keys)"):format(status, detail, self.key_env or "E2B_API_KEY")
end

function M.token_refused_message(id, route, status, detail)
  return ("E2B sandbox %s refused its access token on %s (HTTP %d: %s) — the sandbox may have "
    .. "been replaced; the next command reconnects"):format(id, route, status, detail)
end

function M.http_message(who, route, status, detail)
  return ("%s %s answered HTTP %d: %s"):format(who, route, status, detail)
end

function M.transport_message(who, route, detail)
  return ("%s %s request failed (%s) — E2B may be unreachable; the command may still be running "
    .. "in the sandbox"):format(who, route, detail)
end

function M.detail_of(raw)
  local doc = json.decode(raw or "")
  if type(doc) == "table" and type(doc.message) == "string" and doc.message:find("%S") then
    return quote(first_line(doc.message))
  end
  raw = quote(raw)
  return raw ~= "" and raw or "no body"
end

function M.infra(message, code) return nil, errors.infra(message, code or "infra") end

---------------------------------------------------------------------------------------------
local recalled, forget = M.recalled, M.forget
local gone_message, key_refused_message, http_message, transport_message, detail_of, infra =
  M.gone_message, M.key_refused_message, M.http_message, M.transport_message, M.detail_of, M.infra

-- Control plane

local function api_headers(self)
  return { ["x-api-key"] = self.api_key, ["content-type"] = "application/json" }
end

-- One control-plane call. Returns status, raw body, or nil, err (infra / stopped).
local function api_call(self, snap, method, path, body, signal)
  local status, headers, raw = self.request{
    method = method, url = self.ends.api_url .. path, headers = api_headers(self),
    body = body and json.encode(body) or nil, deadline_ms = snap.timeouts.e2b.api_timeout_ms,
    signal = signal, max_body = 1 << 20,
  }
  if status == nil then
    local err = headers or {}
    if err.kind == "aborted" or (signal and signal.aborted) then return nil, M.stopped() end
    local route = method .. " " .. path:gsub("^/sandboxes/[^/]+", "/sandboxes/{id}")
    if err.kind == "timeout" then
      return infra(("E2B API %s gave no answer within %ds — E2B may be unreachable")
        :format(route, seconds(snap.timeouts.e2b.api_timeout_ms)), "timeout")
    end
    return infra(transport_message("E2B API", route, first_line(err.message or err.kind)))
  end
  if status == 401 or status == 403 then
    return infra(key_refused_message(self, status, detail_of(raw)), "http " .. status)
  end
  return status, raw
end

local function decode_object(raw)
  local doc = json.decode(raw or "")
  return type(doc) == "table" and doc or nil
end

local function adopt(self, snap, doc, id)
  if type(doc) ~= "table" then return nil end
  local sid = type(doc.sandboxID) == "string" and doc.sandboxID or id
  if type(sid) ~= "string" or not sid:find("^[%w%-_]+$") then return nil end
  local token = doc.envdAccessToken
  self.sandbox = {
    id = sid,
    token = type(token) == "string" and token ~= "" and token or nil,
    domain = type(doc.domain) == "string" and doc.domain ~= "" and doc.domain or self.ends.domain,
    expires_ms = self.now_ms() + snap.timeouts.e2b.sandbox_timeout_ms,
  }
  remember(self, sid)
  return self.sandbox
end

-- POST /sandboxes; a full account (429) waits like a full fleet, then capacity.
local function create(self, snap, wait_for, signal)
  local body = {
    templateID = self.template,
    timeout = whole_seconds_up(snap.timeouts.e2b.sandbox_timeout_ms),
    autoPause = true, -- idle sleep pauses it: the thread's next command resumes it, files intact
    envVars = {}, -- credentials go with each command, never into the sandbox's environment
    metadata = { switchboard_thread = workspace.dir_name(self.thread_key), agent = self.agent },
  }
  local waits, waited, i = nil, 0, 1
  while true do
    local status, raw = api_call(self, snap, "POST", "/sandboxes", body, signal)
    if status == nil then return nil, raw end
    if status == 200 or status == 201 then
      local sb = adopt(self, snap, decode_object(raw))
      if not sb then
        return infra(("E2B API POST /sandboxes answered without a sandbox id (%s)"):format(quote(raw)))
      end
      return sb
    end
    if status ~= 429 then
      return infra(http_message("E2B API", "POST /sandboxes", status, detail_of(raw)), "http " .. status)
    end
    waits = waits or budget.fleet_busy_waits(snap, wait_for)
    local d = waits[i]
    if d == nil then
      return nil, errors.capacity(("E2B sandbox limit reached — no sandbox could be created after "
        .. "waiting %ds (HTTP 429: %s); try again in a few minutes"):format(seconds(waited), detail_of(raw)), waited)
    end
    if not self.sleep(d, signal) then return nil, M.stopped() end
    waited, i = waited + d, i + 1
  end
end

-- The thread's sandbox, alive for at least need_ms more: reuse, reconnect or create.
-- Returns sandbox, notice (a line for the result when a remembered sandbox was reclaimed), or
-- nil, err (kind "aborted" for a hard stop: M.is_stopped).
function M.ensure(self, snap, need_ms, wait_for, signal)
  local t = snap.timeouts.e2b
  local sb = self.sandbox
  if sb and sb.token and self.now_ms() >= sb.expires_ms then
    -- Past its timeout by our clock: E2B has probably reclaimed it, as "if-clean" lets it.
    -- Reconnect if it is still there, else go on in a fresh one (below).
    sb = { id = sb.id, expired = true }
    self.sandbox = sb
  end
  if sb and sb.token then
    if self.now_ms() + need_ms <= sb.expires_ms then return sb end
    local secs = whole_seconds_up(need_ms + t.sandbox_timeout_ms)
    local status, raw = api_call(self, snap, "POST", "/sandboxes/" .. sb.id .. "/timeout", { timeout = secs }, signal)
    if status == nil then return nil, raw end
    if status == 404 then
      -- not running: E2B's clock ran out before ours and paused it (or it is gone) — the
      -- connect below resumes it, or says it is gone (infra: within its time by our clock)
      sb = { id = sb.id }
      self.sandbox = sb
    elseif status >= 300 then
      return infra(http_message("E2B API", "POST /sandboxes/{id}/timeout", status, detail_of(raw)), "http " .. status)
    else
      sb.expires_ms = self.now_ms() + secs * 1000
      return sb
    end
  end
  local id = (sb and sb.id) or recalled(self)
  local notice
  if id then
    local secs = whole_seconds_up(math.max(need_ms, t.sandbox_timeout_ms))
    local status, raw = api_call(self, snap, "POST", "/sandboxes/" .. id .. "/connect", { timeout = secs }, signal)
    if status == nil then return nil, raw end
    if status == 200 or status == 201 then
      local got = adopt(self, snap, decode_object(raw), id)
      if got and got.token then
        got.expires_ms = self.now_ms() + secs * 1000
        -- 201: it was paused (idle), and is resumed with the files it had
        if status == 201 then core.log("info", "e2b.resumed", { sandbox = got.id }) end
        return got
      end
      return infra(("E2B API POST /sandboxes/{id}/connect answered without an access token (%s)"):format(quote(raw)))
    end
    if status ~= 404 then
      return infra(http_message("E2B API", "POST /sandboxes/{id}/connect", status, detail_of(raw)), "http " .. status)
    end
    if sb and not sb.expired then
      forget(self)
      return infra(gone_message(id, "POST /sandboxes/{id}/connect", detail_of(raw)))
    end
    -- A sandbox past its timeout, or remembered from an earlier process, that E2B could not
    -- resume (its paused retention ran out, or it was killed): the thread goes on in a fresh
    -- one, and the result and the card say its workspace was not kept.
    forget(self)
    notice = ("[the thread's previous E2B sandbox %s was reclaimed: E2B could not resume it "
      .. "(HTTP 404: %s); this command runs in a fresh one and earlier files are gone]"):format(id, detail_of(raw))
    M.note(self, ("workspace not kept: E2B could not resume the thread's paused sandbox %s (it no "
      .. "longer has it); this ask runs in a fresh sandbox — earlier files are gone"):format(id))
  end
  local created, err = create(self, snap, wait_for, signal)
  if not created then return nil, err end
  return created, notice
end

-- A line for the card (exec/stack.lua's take_notes): said once, at the ask's end.
function M.note(self, line)
  self.notes = self.notes or {}
  self.notes[#self.notes + 1] = line
end

-- DELETE /sandboxes/{id} (release "always"): true | nil, infra error.
function M.delete(self, snap, id)
  local status = api_call(self, snap, "DELETE", "/sandboxes/" .. id, nil, nil)
  if status == nil or (status ~= 204 and status ~= 200 and status ~= 404) then
    return nil, errors.infra(("E2B sandbox %s could not be deleted (%s); E2B's timeout reclaims it")
      :format(id, status and ("HTTP " .. status) or "no answer"))
  end
  return true
end

return M

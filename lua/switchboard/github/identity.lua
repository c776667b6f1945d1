-- The GitHub identity commands act as (docs/contract.md#credentials), chosen once from the bot's environment:
--
--   GITHUB_APP_ID + GITHUB_APP_PRIVATE_KEY   a GitHub App: installation tokens minted on
--       demand, scoped per agent (policies/github.lua), cached per scope with the reuse margin,
--       concurrent requests sharing one mint. GITHUB_APP_INSTALLATION_ID (optional; else the
--       installation is looked up per repository), GITHUB_API_URL (default api.github.com).
--   GH_TOKEN                                  passed through as it is, whatever the scope.
--   neither                                   commands get no token; describe() says so.
--
--   local id = identity.from_env(os.getenv)
--   id:resolve_envs("read", {repo = "acme/api"}) → {GH_TOKEN = "…"} | {} | nil, err
--   id:describe()  → one line for the status card and the CLI
--   id:notice()    → the "no token" line the first time, nil after (say it once)
--   identity.notice_for(id, agent_def) → that line when the agent has a token scope
--
-- Nothing is minted (no request, no key read) until resolve_envs is called; executors call
-- it for every command, so each command carries the token current at its own start.
local core = require("switchboard.core")
local app = require("switchboard.github.app")
local cache = require("switchboard.github.cache")

local M = {}

M.NONE_LINE = "no GitHub credential: commands get no token"
M.ENV_LINE = "GH_TOKEN from the bot's environment"

local Identity = {}
Identity.__index = Identity

function Identity:describe() return self.line end

-- The REST API's base URL for calls made with this identity's tokens (pull requests):
-- the App's GITHUB_API_URL, else the bot's GITHUB_API_URL, else api.github.com.
function Identity:api_url() return self.api or app.DEFAULT_API_URL end

function Identity:notice()
  if self.kind ~= "none" or self.noticed then return nil end
  self.noticed = true
  return self.line
end

-- The notice for an agent about to run: only an agent with a token scope misses a credential,
-- and the line comes once (creds: an identity, or nil; agent_def: the policy's agent).
function M.notice_for(creds, agent_def)
  if not (agent_def and agent_def.token_scope and creds and creds.notice) then return nil end
  return creds:notice()
end

local function nonempty(v)
  if type(v) == "string" and v:find("%S") then return v end
  return nil
end

local function new(kind, line, fields)
  local self = setmetatable({ kind = kind, line = line }, Identity)
  for k, v in pairs(fields or {}) do self[k] = v end
  return self
end

---------------------------------------------------------------------------------------------
-- No credential, a plain token, a broken configuration

local function none()
  local self = new("none", M.NONE_LINE)
  function self.resolve_envs() return {} end
  return self
end

local function plain(token, redact)
  redact(token)
  local self = new("env", M.ENV_LINE)
  function self.resolve_envs() return { GH_TOKEN = token } end
  return self
end

local function broken(why)
  local self = new("broken", "GitHub App misconfigured: " .. why)
  function self.resolve_envs()
    return app.fail("config", "the GitHub App is misconfigured: " .. why)
  end
  return self
end

---------------------------------------------------------------------------------------------
-- A GitHub App

local AppIdentity = setmetatable({}, { __index = Identity })
AppIdentity.__index = AppIdentity

local function log(self, level, event, fields)
  if self.log then return self.log(level, event, fields) end
end

-- The installation for this request: configured, or looked up (and remembered) per repo.
function AppIdentity:installation(repo)
  if self.installation_id then return self.installation_id end
  if repo == nil then
    return app.fail("config", "GITHUB_APP_INSTALLATION_ID is not set and the command names no "
      .. "repository to look the installation up for; set GITHUB_APP_INSTALLATION_ID, or give the "
      .. "agent a repository (--repo OWNER/NAME)")
  end
  local entry, err = self.lookups:get(repo, function()
    local id, lerr = self.app:installation_for(repo)
    if id == nil then return nil, lerr end
    log(self, "info", "github.installation", { repo = repo, installation = id })
    return { id = id, expires_ms = math.huge }
  end)
  if entry == nil then return nil, err end
  return entry.id, repo
end

function AppIdentity:resolve_envs(scope_name, rctx)
  local snap = self.policy()
  local scope = snap.github.scopes[scope_name]
  if scope == nil then
    return app.fail("config", string.format("token scope %q is not defined in policies/github.lua",
      tostring(scope_name)))
  end
  local repo = type(rctx) == "table" and rctx.repo or nil
  local iid, found_for = self:installation(repo)
  if iid == nil then return nil, found_for end
  local slot = scope_name .. "@" .. tostring(iid)
  local entry, how = self.tokens:get(slot, function()
    local t, err = self.app:mint(iid, scope_name, scope, found_for)
    if t == nil then
      if found_for and err.status == 404 then self.lookups:forget(found_for) end
      return nil, err
    end
    local left_ms = t.expires_ms and (t.expires_ms - self.wall_ms()) or nil
    log(self, "info", "github.token_minted", {
      scope = scope_name, installation = iid, expires_at = t.expires_at or "unknown",
    })
    if left_ms == nil then
      log(self, "warn", "github.token_expiry_unknown", { scope = scope_name, installation = iid,
        note = "GitHub's expires_at could not be read; the token is used for this command only" })
    elseif left_ms < self.tokens.margin_ms() then
      log(self, "warn", "github.token_short_lived", { scope = scope_name, installation = iid,
        left_s = left_ms // 1000, margin_s = self.tokens.margin_ms() // 1000 })
    end
    return t
  end)
  if entry == nil then return nil, how end
  return { GH_TOKEN = entry.token }
end

-- opts: policy (function → snapshot; default policy.current), request, wall_ms, redact,
--       log (function(level, event, fields); default core.log), read_file
local function app_identity(getenv, opts, app_id, key_value)
  local key, kerr = app.key_source(key_value, opts.read_file)
  if key == nil then return broken(kerr.message) end
  local iid_text = nonempty(getenv("GITHUB_APP_INSTALLATION_ID"))
  local iid = nil
  if iid_text then
    iid = math.tointeger(tonumber(iid_text:match("^%s*(%d+)%s*$") or ""))
    if iid == nil then
      return broken("GITHUB_APP_INSTALLATION_ID must be the installation's number (the last part "
        .. "of its settings URL, …/installations/12345678), got " .. string.format("%q", iid_text))
    end
  end
  local api_url = nonempty(getenv("GITHUB_API_URL")) or app.DEFAULT_API_URL
  if not api_url:find("^https?://[^%s]+$") then
    return broken("GITHUB_API_URL must be an http(s) URL, got " .. string.format("%q", api_url))
  end
  api_url = api_url:gsub("/+$", "")
  local policy = opts.policy or require("switchboard.policy").current
  local wall_ms = opts.wall_ms or core.wall_ms
  local line = "GitHub App " .. app_id
  if api_url ~= app.DEFAULT_API_URL then line = line .. " at " .. api_url end
  local self = setmetatable(new("app", line), AppIdentity)
  self.app_id = app_id
  self.api = api_url
  self.installation_id = iid
  self.policy = policy
  self.wall_ms = wall_ms
  self.log = opts.log == nil and core.log or opts.log or nil
  self.app = app.new{
    app_id = app_id, key = key, api_url = api_url, policy = policy,
    request = opts.request, wall_ms = wall_ms, redact = opts.redact,
  }
  self.tokens = cache.new{
    wall_ms = wall_ms,
    margin_ms = function() return policy().timeouts.token.reuse_margin_ms end,
  }
  self.lookups = cache.new{ wall_ms = wall_ms }
  -- The key text itself, line by line, as a second line of defence in the log.
  local redact = opts.redact or core.log_redact
  if not key_value:find("^/") and not key_value:find("^%.%.?/") then redact(key_value) end
  if key_value:find("-----BEGIN", 1, true) then
    for chunk in key_value:gsub("\\n", "\n"):gmatch("[^\n]+") do
      if not chunk:find("-----", 1, true) then redact(chunk) end
    end
  end
  return self
end

-- getenv(name) → value | nil (default os.getenv). Never fails: a broken configuration is an
-- identity whose resolve_envs explains what to fix.
function M.from_env(getenv, opts)
  getenv = getenv or os.getenv
  opts = opts or {}
  local app_id = nonempty(getenv("GITHUB_APP_ID"))
  local key_value = nonempty(getenv("GITHUB_APP_PRIVATE_KEY"))
  if app_id or key_value then
    if not app_id then return broken("GITHUB_APP_PRIVATE_KEY is set but GITHUB_APP_ID is not") end
    if not key_value then return broken("GITHUB_APP_ID is set but GITHUB_APP_PRIVATE_KEY is not") end
    app_id = app_id:match("^%s*(.-)%s*$")
    if not app_id:find("^[%w._-]+$") then
      return broken("GITHUB_APP_ID must be the App's ID (a number) or client ID (Iv1.…)")
    end
    return app_identity(getenv, opts, app_id, key_value)
  end
  local token = nonempty(getenv("GH_TOKEN"))
  local api = nonempty(getenv("GITHUB_API_URL"))
  local id = token and plain(token, opts.redact or core.log_redact) or none()
  if api then id.api = api:gsub("/+$", "") end
  return id
end

return M

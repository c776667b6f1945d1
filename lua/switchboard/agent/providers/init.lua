-- The model providers an agent may name (policies/agents.lua: an agent's `provider`, one of
-- the `providers` entries, each of a `kind`; none: Anthropic's own API). Each kind is a module
-- of agent/providers/ with the shape agent/providers/anthropic.lua describes; this registry
-- builds one from the bot's environment — credentials only ever from there, by the variable
-- names policy gives (docs/agent.md "Model providers").
--
--   local p, err = providers.from_env(getenv, snap, name)   -- err: core.error("no_key", text)
local core = require("switchboard.core")

local M = {}

M.KINDS = { "openai", "bedrock", "vertex" }

local BUILD = {}

local function need(getenv, name, provider, cfg, var, what)
  local v = cfg[var] and getenv(cfg[var])
  if v == nil or v == "" then
    return nil, core.error("no_key", ("no model credential: provider %s (%s) needs %s in switchboard's "
      .. "environment, $%s (policies/agents.lua providers.%s.%s); set it and start switchboard again")
      :format(provider, cfg.kind, what, tostring(cfg[var]), provider, var))
  end
  return v
end
M.need = need

function BUILD.openai(getenv, cfg, name)
  local base = cfg.base_url_env and getenv(cfg.base_url_env)
  if base == nil or base == "" then base = cfg.base_url end
  if base == nil then
    return nil, core.error("no_key", ("provider %s (openai) has no address: set $%s or base_url in "
      .. "policies/agents.lua providers.%s"):format(name, tostring(cfg.base_url_env), name))
  end
  local key = cfg.api_key_env and getenv(cfg.api_key_env) or nil
  return require("switchboard.agent.providers.openai").new{ base_url = base, api_key = key }
end

-- AWS's own variable names for the credentials (as every AWS SDK reads them); the region's
-- and the address's variable names come from policy.
function BUILD.bedrock(getenv, cfg, name)
  local region, why = need(getenv, name, name, cfg, "region_env", "the AWS region")
  if not region then return nil, why end
  local key_id = getenv("AWS_ACCESS_KEY_ID")
  local secret = getenv("AWS_SECRET_ACCESS_KEY")
  if not key_id or key_id == "" or not secret or secret == "" then
    return nil, core.error("no_key", ("no model credential: provider %s (bedrock) needs AWS_ACCESS_KEY_ID and "
      .. "AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary credentials) in switchboard's "
      .. "environment; set them and start switchboard again"):format(name))
  end
  local token = getenv("AWS_SESSION_TOKEN")
  local base = cfg.base_url_env and getenv(cfg.base_url_env)
  if base == nil or base == "" then base = cfg.base_url or ("https://bedrock-runtime.%s.amazonaws.com"):format(region) end
  return require("switchboard.agent.providers.bedrock").new{ base_url = base, region = region,
    key_id = key_id, secret = secret, token = token ~= "" and token or nil }
end

-- The service-account key file's path from the environment; the project from policy's
-- variable, else the key's own project_id.
function BUILD.vertex(getenv, cfg, name)
  local region, why = need(getenv, name, name, cfg, "region_env", "the Vertex AI region")
  if not region then return nil, why end
  local path
  path, why = need(getenv, name, name, cfg, "credentials_env", "a service account key file")
  if not path then return nil, why end
  local vertex = require("switchboard.agent.providers.vertex")
  local text, err = core.fs.read_file(path)
  if not text then
    return nil, core.error("no_key", ("no model credential: the service account key %s cannot be read (%s)")
      :format(path, tostring(err)))
  end
  local key, bad = vertex.read_key(text)
  if not key then return nil, core.error("no_key", ("no model credential: %s %s"):format(path, bad)) end
  core.log_redact(key.private_key)
  local project = cfg.project_env and getenv(cfg.project_env)
  if project == nil or project == "" then project = key.project_id end
  if type(project) ~= "string" or project == "" then
    return nil, core.error("no_key", ("provider %s (vertex) needs a project: $%s, or project_id in the key")
      :format(name, tostring(cfg.project_env)))
  end
  local base = cfg.base_url_env and getenv(cfg.base_url_env)
  if base == "" then base = nil end
  return vertex.new{ key = key, project = project, region = region, base_url = base or cfg.base_url }
end

function M.from_env(getenv, snap, name)
  local cfg = snap.agents.providers and snap.agents.providers[name]
  if cfg == nil then
    return nil, core.error("no_key", ("the agent's provider %q is not in policies/agents.lua providers"):format(tostring(name)))
  end
  return BUILD[cfg.kind](getenv, cfg, name)
end

return M

-- The model providers an agent may name (policies/agents.lua: an agent's `provider`, one of
-- the `providers` entries, each of a `kind`; none: Anthropic's own API). Each kind is a module
-- of agent/providers/ with the shape agent/providers/anthropic.lua describes; this registry
-- builds one from the bot's environment — credentials only ever from there, by the variable
-- names policy gives (docs/agent.md "Model providers").
--
--   local p, err = providers.from_env(getenv, snap, name)   -- err: core.error("no_key", text)
local core = require("switchboard.core")

local M = {}

M.KINDS = { "openai" }

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

function M.from_env(getenv, snap, name)
  local cfg = snap.agents.providers and snap.agents.providers[name]
  if cfg == nil then
    return nil, core.error("no_key", ("the agent's provider %q is not in policies/agents.lua providers"):format(tostring(name)))
  end
  return BUILD[cfg.kind](getenv, cfg, name)
end

return M

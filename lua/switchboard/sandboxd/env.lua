-- envFromRequest (docs/contract.md#credential-transport): the environment a command gets from the request BODY alone.
--
--   * only body.env is read; no other body field, and never a request header;
--   * names are upper-cased (gh_token and GH_TOKEN are one variable) and kept only when they
--     are shell identifiers, ^[A-Z_][A-Z0-9_]*$ — the resident's rule;
--   * only string values are kept (and only those a process environment can hold: no NUL);
--   * an env that is not a plain object, or a body that is not an object, yields {} — this
--     function never throws, whatever it is handed.
-- When two keys name one variable, the first in byte order wins — which is the one already
-- written in upper case, since upper-case ASCII sorts before lower case — so the outcome never
-- depends on table order.
local M = {}

local IDENT = "^[A-Z_][A-Z0-9_]*$"

local function plain_object(v)
  if type(v) ~= "table" then return false end
  local mt = getmetatable(v)
  -- cjson marks decoded arrays with its array metatable when asked to; any metatable means
  -- this is not a plain decoded object.
  return mt == nil
end

function M.from_request(body)
  local out = {}
  if not plain_object(body) then return out end
  local env = rawget(body, "env")
  if not plain_object(env) then return out end
  local keys = {}
  for k, v in next, env do
    if type(k) == "string" and type(v) == "string" then keys[#keys + 1] = k end
  end
  table.sort(keys)
  for _, k in ipairs(keys) do
    local name = k:upper()
    local value = rawget(env, k)
    if out[name] == nil and name:find(IDENT) and not value:find("\0", 1, true) then
      out[name] = value
    end
  end
  return out
end

return M

-- Claude through Google Vertex AI: streamRawPredict (docs/agent.md "Model providers").
--
--   auth      a service-account key (the JSON file GOOGLE_APPLICATION_CREDENTIALS names): a JWT
--             signed RS256 with its private key ({iss = client_email, scope = cloud-platform,
--             aud = token_uri, iat, exp = iat + 1 h}, kid = private_key_id) exchanged at its
--             token_uri (grant_type urn:ietf:params:oauth:grant-type:jwt-bearer) for an OAuth2
--             access token, kept until a minute before it expires
--   request   POST {base}/v1/projects/{project}/locations/{region}/publishers/anthropic/models/
--             {model}:streamRawPredict, base https://{region}-aiplatform.googleapis.com
--             (https://aiplatform.googleapis.com for the "global" region), Authorization: Bearer;
--             the Messages API body without `model` (it is in the path), with
--             anthropic_version "vertex-2023-10-16" and stream true
--   answer    the Messages API's own server-sent events
local core = require("switchboard.core")
local json = core.json
local anthropic = require("switchboard.agent.providers.anthropic")

local M = {}
local P = {}
P.__index = P

M.VERSION = "vertex-2023-10-16"
M.SCOPE = "https://www.googleapis.com/auth/cloud-platform"
M.GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"
M.TOKEN_MS = 3600 * 1000
M.EARLY_MS = 60 * 1000        -- a token this close to its end is replaced first
M.TOKEN_TIMEOUT_MS = 30000    -- the token endpoint's answer

local FIX = {
  [400] = "Vertex AI refused the request as invalid (400 %s: %s) — check the agent's model (a Vertex model id such as claude-sonnet-4-5@20250929) and max_tokens in policies/agents.lua",
  [401] = "Vertex AI refused the access token (401 %s: %s) — check the service account key GOOGLE_APPLICATION_CREDENTIALS names, and restart switchboard",
  [403] = "the service account may not use this model (403 %s: %s) — grant it roles/aiplatform.user in the project and enable the model in Model Garden",
  [404] = "Vertex AI has no such model or endpoint (404 %s: %s) — check the agent's model and the provider's project and region",
}

-- The service-account key's text → its fields, or nil, why (never quoting the key).
function M.read_key(text)
  local doc = json.decode(text or "")
  if type(doc) ~= "table" or doc.type ~= "service_account" then
    return nil, core.error("no_key", "is not a service account key (JSON with \"type\": \"service_account\")")
  end
  for _, field in ipairs({ "client_email", "private_key", "token_uri" }) do
    if type(doc[field]) ~= "string" or doc[field] == "" then return nil, core.error("no_key", "has no " .. field) end
  end
  return doc
end

-- opts: key (read_key's), project, region, base_url?, request?, wall_ms?, redact?
function M.new(opts)
  local base = opts.base_url or (opts.region == "global" and "https://aiplatform.googleapis.com"
    or ("https://%s-aiplatform.googleapis.com"):format(opts.region))
  local self = setmetatable({ key = opts.key, project = opts.project, region = opts.region,
    base = base:gsub("/+$", ""), keys = { opts.key.private_key }, fix = FIX,
    http = opts.request or core.http.request, wall_ms = opts.wall_ms or core.wall_ms,
    redact = opts.redact or core.log_redact }, P)
  return self
end

function P:encode(body)
  local copy = {}
  for k, v in pairs(body) do copy[k] = v end
  copy.model = nil
  copy.stream = true
  copy.anthropic_version = M.VERSION
  return json.encode(copy), body.model
end

local function b64url_json(t) return core.crypto.base64url_encode(json.encode(t)) end

-- The signed assertion for the token endpoint.
function M.assertion(key, now_s)
  local head = b64url_json({ alg = "RS256", typ = "JWT", kid = key.private_key_id })
  local claims = b64url_json({ iss = key.client_email, scope = M.SCOPE, aud = key.token_uri,
    iat = now_s, exp = now_s + M.TOKEN_MS // 1000 })
  local sig, err = core.crypto.rs256_sign(key.private_key, head .. "." .. claims)
  if not sig then return nil, err end
  return head .. "." .. claims .. "." .. core.crypto.base64url_encode(sig)
end

local function form(t)
  local out = {}
  for _, k in ipairs({ "grant_type", "assertion" }) do
    out[#out + 1] = k .. "=" .. t[k]:gsub("[^%w%-%._~]", function(c) return ("%%%02X"):format(c:byte()) end)
  end
  return table.concat(out, "&")
end

-- An access token, from the cache or the token endpoint: token | nil, core.error("retry" |
-- "fatal", message) — the message names the endpoint's status and error, never a token.
function P:access_token()
  local now = self.wall_ms()
  if self.token and now < self.expires_at - M.EARLY_MS then return self.token end
  local jwt, err = M.assertion(self.key, now // 1000)
  if not jwt then
    return nil, core.error("fatal", "the service account key's private_key cannot sign: " .. tostring(err))
  end
  local status, failure, body = self.http{ method = "POST", url = self.key.token_uri, deadline_ms = M.TOKEN_TIMEOUT_MS,
    headers = { ["content-type"] = "application/x-www-form-urlencoded" },
    body = form({ grant_type = M.GRANT, assertion = jwt }) }
  if status == nil then
    return nil, core.error("retry", ("the token endpoint did not answer (%s: %s)"):format(tostring(failure.kind), tostring(failure.message)))
  end
  local doc = json.decode(body or "")
  if status ~= 200 or type(doc) ~= "table" or type(doc.access_token) ~= "string" then
    local why = type(doc) == "table" and (doc.error_description or doc.error) or "(no reason)"
    local kind = (status == 429 or (status and status >= 500)) and "retry" or "fatal"
    return nil, core.error(kind, ("the token endpoint refused the service account key (%s: %s) — check "
      .. "GOOGLE_APPLICATION_CREDENTIALS"):format(tostring(status), tostring(why):sub(1, 300)))
  end
  self.redact(doc.access_token)
  self.keys[#self.keys + 1] = doc.access_token
  local ttl = type(doc.expires_in) == "number" and doc.expires_in * 1000 or M.TOKEN_MS
  self.token, self.expires_at = doc.access_token, now + ttl
  return self.token
end

function P:request(_, model)
  local token, err = self:access_token()
  if not token then return nil, err end
  local url = ("%s/v1/projects/%s/locations/%s/publishers/anthropic/models/%s:streamRawPredict")
    :format(self.base, self.project, self.region, tostring(model))
  return url, { authorization = "Bearer " .. token, ["content-type"] = "application/json",
    accept = "text/event-stream" }
end

function P:decoder(asm, max_event_bytes) return anthropic.sse_decoder(asm, max_event_bytes) end

-- Google's {"error": {"code", "message", "status"}} or, from the model, Anthropic's shape.
function P:api_error(body)
  local doc = json.decode(body or "")
  local e = type(doc) == "table" and doc.error
  if type(e) == "table" and type(e.status) == "string" then
    return e.status, tostring(e.message or "(no message)"):sub(1, 500)
  end
  if type(doc) == "table" and type(doc[1]) == "table" and type(doc[1].error) == "table" then
    return tostring(doc[1].error.status or "error"), tostring(doc[1].error.message or "(no message)"):sub(1, 500)
  end
  return anthropic.api_error(body)
end

return M

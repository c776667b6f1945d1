-- A GitHub App's side of the installation-token protocol (docs/github.md "For developers"): the app JWT, the installation lookup for a repository, and the mint.
-- Caching, reuse and single-flight live in github/cache.lua; choosing the scope and building
-- the command's environment in github/identity.lua.
--
--   local a = app.new{app_id = "12345", key = function() return pem end,
--                     api_url = "https://api.github.com", policy = policy.current}
--   a:installation_for("acme/api")      → installation id | nil, err
--   a:mint(installation_id, "read", scope) → {token, expires_ms, expires_at} | nil, err
--
-- The private key, the JWT and every token are secrets: they never reach a log line, a span,
-- an error message or a process's argv. Each one is also registered with core.log_redact as a
-- second line of defence, and any text GitHub sends back is scrubbed of them before it is
-- quoted in an error.
--
-- Errors are core.error("github", message, {code = "http <status>" | "timeout" | "transport" |
-- "config", status?}); tostring(err) is the message.
local core = require("switchboard.core")
local metrics = require("switchboard.metrics")

local M = {}

M.DEFAULT_API_URL = "https://api.github.com"
M.API_VERSION = "2022-11-28"
M.ACCEPT = "application/vnd.github+json"

-- JWT claims (protocol facts, not operator settings): iat is backdated for clock drift and
-- exp stays inside GitHub's 10-minute limit counted from iat. A JWT is reused for calls
-- until it has less than JWT_RENEW_S left.
M.JWT_BACKDATE_S = 60
M.JWT_AHEAD_S = 9 * 60
M.JWT_RENEW_S = 60

-- How many recent secrets the scrubber remembers (GitHub's texts are scrubbed of them).
local KEEP_SECRETS = 32

---------------------------------------------------------------------------------------------
-- Errors

-- The engine's one error type, kind "github".
local function fail(code, message, fields)
  local f = { code = code }
  for k, v in pairs(fields or {}) do f[k] = v end
  return nil, core.error("github", message, f)
end
M.fail = fail

function M.is_error(e) return core.is_error(e) and e.kind == "github" end

local function seconds(ms)
  if ms % 1000 == 0 then return string.format("%d s", ms // 1000) end
  return string.format("%d ms", ms)
end

---------------------------------------------------------------------------------------------
-- The private key: the PEM itself, or a path to it

local function looks_like_path(value)
  return #value <= 1024 and not value:find("%s") and
    (value:sub(1, 1) == "/" or value:sub(1, 2) == "./" or value:sub(1, 3) == "../")
end

-- value: GITHUB_APP_PRIVATE_KEY. Returns a function that yields the PEM each time it is
-- called (a path is read again, so a rotated key file is picked up without a restart), or
-- nil, err. Accepts the PEM itself (also with its newlines written as \n, as some platforms
-- need), the PEM base64-encoded, or the path of a file holding it. The value is never quoted
-- in a message unless it looks like a path.
function M.key_source(value, read_file)
  read_file = read_file or core.fs.read_file
  if value:find("-----BEGIN", 1, true) then
    local pem = value
    if not pem:find("\n", 1, true) then pem = pem:gsub("\\n", "\n") end
    return function() return pem end
  end
  local decoded = core.crypto.base64_decode((value:gsub("%s", "")))
  if decoded and decoded:find("-----BEGIN", 1, true) then
    return function() return decoded end
  end
  if not looks_like_path(value) then
    return fail("config", "GITHUB_APP_PRIVATE_KEY is neither a PEM (-----BEGIN … PRIVATE KEY-----) "
      .. "nor the absolute path of a file holding one; paste the key the App's settings page "
      .. "generated, or give the path of the downloaded .pem file")
  end
  return function()
    local pem, err = read_file(value)
    if pem == nil then
      return fail("config", string.format("the private key file %s named by GITHUB_APP_PRIVATE_KEY "
        .. "cannot be read (%s); check the path and that the bot's user may read it",
        value, err and err.kind or "unreadable"))
    end
    if not pem:find("-----BEGIN", 1, true) then
      return fail("config", string.format("the private key file %s named by GITHUB_APP_PRIVATE_KEY "
        .. "holds no PEM (-----BEGIN … PRIVATE KEY-----)", value))
    end
    return pem
  end
end

---------------------------------------------------------------------------------------------
-- The app

local App = {}
App.__index = App

-- opts: app_id (string: the App's ID or client ID), key (function → pem | nil, err),
--       api_url (default https://api.github.com), policy (function → snapshot; reads
--       github.request_timeout_ms), request (default core.http.request), wall_ms (default
--       core.wall_ms), redact (default core.log_redact), user_agent
function M.new(opts)
  assert(type(opts.app_id) == "string" and opts.app_id ~= "", "github app: opts.app_id is required")
  assert(type(opts.key) == "function", "github app: opts.key (a function returning the PEM) is required")
  assert(type(opts.policy) == "function", "github app: opts.policy is required")
  local build = core.build and core.build.commit or "unknown"
  return setmetatable({
    app_id = opts.app_id,
    key = opts.key,
    api_url = (opts.api_url or M.DEFAULT_API_URL):gsub("/+$", ""),
    policy = opts.policy,
    request = opts.request or core.http.request,
    wall_ms = opts.wall_ms or core.wall_ms,
    redact = opts.redact or core.log_redact,
    user_agent = opts.user_agent or ("OpenSwitchboard/" .. build),
    secrets = {},
    jwt_cache = nil, -- {jwt, exp_s}
  }, App)
end

-- Remember a secret for the scrubber and register it with the log's redaction.
function App:secret(s)
  self.redact(s)
  table.insert(self.secrets, 1, s)
  if #self.secrets > KEEP_SECRETS then self.secrets[#self.secrets] = nil end
end

-- GitHub's own words, safe to quote: one line, at most 300 bytes, no secret of ours.
function App:scrub(text)
  if type(text) ~= "string" then return nil end
  for _, s in ipairs(self.secrets) do
    if s ~= "" then text = text:gsub(s:gsub("%p", "%%%0"), "[redacted]") end -- every plain occurrence
  end
  text = text:gsub("[\r\n]+", " ")
  if #text > 300 then text = text:sub(1, 300) .. "…" end
  return text
end

local function iss_claim(app_id)
  -- An App ID is a number in GitHub's own examples; a client ID (Iv1.…) is a string.
  return math.tointeger(tonumber(app_id:match("^%d+$") or "")) or app_id
end

-- The app JWT (RS256 over base64url(header).base64url(payload)), reused while it has more
-- than JWT_RENEW_S left. → jwt | nil, err
function App:jwt()
  local now_s = self.wall_ms() // 1000
  local c = self.jwt_cache
  if c and c.exp_s - now_s > M.JWT_RENEW_S then return c.jwt end
  local pem, kerr = self.key()
  if pem == nil then return nil, kerr end
  local claims = {
    iat = math.tointeger(now_s - M.JWT_BACKDATE_S),
    exp = math.tointeger(now_s + M.JWT_AHEAD_S),
    iss = iss_claim(self.app_id),
  }
  local b64 = core.crypto.base64url_encode
  local signing_input = b64(core.json.encode({ alg = "RS256", typ = "JWT" })) .. "." .. b64(core.json.encode(claims))
  local sig, serr = core.crypto.rs256_sign(pem, signing_input)
  if sig == nil then
    -- The engine's message names the problem (not an RSA key, not a PEM) and never the key.
    return fail("config", "GITHUB_APP_PRIVATE_KEY cannot sign the app's JWT: "
      .. tostring(serr and serr.message or serr):gsub("^rs256_sign: ", ""))
  end
  local jwt = signing_input .. "." .. b64(sig)
  self:secret(jwt)
  self.jwt_cache = { jwt = jwt, exp_s = claims.exp }
  return jwt
end

local function decode(body)
  if type(body) ~= "string" or body == "" then return nil end
  local doc = core.json.decode(body)
  return type(doc) == "table" and doc or nil
end

-- One authenticated call. → status, doc (decoded JSON or nil), endpoint, answer headers
-- | nil, err
function App:call(method, path, body)
  local endpoint = method .. " " .. self.api_url .. path
  local jwt, jerr = self:jwt()
  if jwt == nil then return nil, jerr end
  local headers = {
    ["Accept"] = M.ACCEPT,
    ["X-GitHub-Api-Version"] = M.API_VERSION,
    ["User-Agent"] = self.user_agent,
    ["Authorization"] = "Bearer " .. jwt,
  }
  if body ~= nil then headers["Content-Type"] = "application/json" end
  local timeout_ms = self.policy().github.request_timeout_ms
  local status, answer_headers, resp = self.request{
    method = method, url = self.api_url .. path, headers = headers, body = body,
    deadline_ms = timeout_ms,
  }
  if status == nil then
    local err = answer_headers -- nil, err
    if type(err) == "table" and err.kind == "timeout" then
      return fail("timeout", string.format("GitHub API %s gave no answer within %s "
        .. "(github.request_timeout_ms in policies/github.lua)", endpoint, seconds(timeout_ms)),
        { endpoint = endpoint })
    end
    local why = type(err) == "table" and (err.message or err.kind) or tostring(err)
    return fail("transport", string.format("GitHub API %s is unreachable: %s — check "
      .. "GITHUB_API_URL and this host's network", endpoint, self:scrub(why) or "no detail"),
      { endpoint = endpoint })
  end
  return status, decode(resp), endpoint, answer_headers
end

-- GitHub's message from an error document, quoted safely (scrubbed, one line, capped).
function App:says(doc)
  if type(doc) ~= "table" or type(doc.message) ~= "string" then return "" end
  return " (GitHub said: " .. self:scrub(doc.message) .. ")"
end

-- A status none of the callers explain on their own.
function App:unexpected(status, doc, endpoint)
  if status == 401 then
    return fail("http 401", string.format("GitHub rejected the App's JWT on %s (401)%s — check that "
      .. "GITHUB_APP_ID is this App's ID or client ID, that GITHUB_APP_PRIVATE_KEY is one of its "
      .. "current private keys (Settings → Developer settings → GitHub Apps → the App → Private "
      .. "keys), and that this host's clock is right", endpoint, self:says(doc)), { status = 401 })
  end
  if status == 403 then
    return fail("http 403", string.format("GitHub refused %s (403)%s — the installation may be "
      .. "suspended, or the API rate limit reached", endpoint, self:says(doc)), { status = 403 })
  end
  return fail("http " .. status, string.format("GitHub answered %d to %s%s", status, endpoint,
    self:says(doc)), { status = status })
end

local REPO = "^[%w][%w._-]*/[%w._-]+$"

-- The installation that covers OWNER/REPO. → id (integer) | nil, err
function App:installation_for(repo)
  if type(repo) ~= "string" or not repo:find(REPO) or repo:find("..", 1, true) then
    return fail("config", string.format("cannot look up the GitHub App installation for %q: a "
      .. "repository is named OWNER/NAME", tostring(repo)))
  end
  local status, doc, endpoint = self:call("GET", "/repos/" .. repo .. "/installation")
  if status == nil then return nil, doc end
  if status == 200 and type(doc) == "table" and math.tointeger(doc.id) then
    return math.tointeger(doc.id)
  end
  if status == 404 then
    local owner = repo:match("^([^/]+)/")
    return fail("http 404", string.format("GitHub credentials don't have access to %s — GitHub App "
      .. "%s is not installed on %s, or its installation does not include this repository. Fix: "
      .. "on GitHub open the App's page → Install App → %s → Configure, and choose \"All "
      .. "repositories\" or add %s to the selected ones (or set GITHUB_APP_INSTALLATION_ID to an "
      .. "installation that covers it)", repo, self.app_id, owner, owner, repo),
      { status = 404, repo = repo })
  end
  if status == 200 then
    return fail("http 200", "GitHub's answer to " .. endpoint .. " carries no installation id")
  end
  return self:unexpected(status, doc, endpoint)
end

-- ISO-8601 UTC ("2026-01-02T03:04:05Z", optional fraction, Z or ±hh:mm) → epoch ms | nil
function M.parse_time(s)
  if type(s) ~= "string" then return nil end
  local y, mo, d, h, mi, sec, rest = s:match("^(%d%d%d%d)-(%d%d)-(%d%d)T(%d%d):(%d%d):(%d%d)(.*)$")
  if not y then return nil end
  rest = rest:gsub("^%.%d+", "")
  local offset_s
  if rest == "Z" then
    offset_s = 0
  else
    local sign, oh, om = rest:match("^([+-])(%d%d):?(%d%d)$")
    if not sign then return nil end
    offset_s = (tonumber(oh) * 3600 + tonumber(om) * 60) * (sign == "+" and 1 or -1)
  end
  y, mo, d = tonumber(y), tonumber(mo), tonumber(d)
  -- Days since the epoch (Howard Hinnant's days_from_civil), no dependence on the local zone.
  local yy = mo <= 2 and y - 1 or y
  local era = (yy >= 0 and yy or yy - 399) // 400
  local yoe = yy - era * 400
  local doy = (153 * (mo > 2 and mo - 3 or mo + 9) + 2) // 5 + d - 1
  local doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
  local days = era * 146097 + doe - 719468
  local t = days * 86400 + tonumber(h) * 3600 + tonumber(mi) * 60 + tonumber(sec) - offset_s
  return t * 1000
end

local MONTHS = { Jan = 1, Feb = 2, Mar = 3, Apr = 4, May = 5, Jun = 6, Jul = 7, Aug = 8,
                 Sep = 9, Oct = 10, Nov = 11, Dec = 12 }

-- An HTTP Date header ("Sun, 06 Nov 1994 08:49:37 GMT") → epoch ms | nil
function M.parse_http_date(s)
  if type(s) ~= "string" then return nil end
  local d, mon, y, h, mi, sec = s:match("^%a+, (%d%d) (%a%a%a) (%d%d%d%d) (%d%d):(%d%d):(%d%d) GMT$")
  if not d or not MONTHS[mon] then return nil end
  return M.parse_time(string.format("%s-%02d-%sT%s:%s:%sZ", y, MONTHS[mon], d, h, mi, sec))
end

local RANK = { read = 1, write = 2, admin = 3 }

-- Which of the requested permissions the installation does not grant (at that level).
local function refused(requested, granted)
  local out = {}
  for name, level in pairs(requested) do
    local have = type(granted) == "table" and granted[name]
    if not (have and (RANK[have] or 0) >= (RANK[level] or 99)) then
      out[#out + 1] = string.format("%s:%s (installation has %s)", name, level, have or "none")
    end
  end
  table.sort(out)
  return out
end

local function listed(perms)
  local out = {}
  for name, level in pairs(perms) do out[#out + 1] = name .. ":" .. level end
  table.sort(out)
  return table.concat(out, ", ")
end

-- Mint an installation token for one scope. scope: the policy's scope table ({permissions =
-- {name = "read"|"write"}} or {} for the full grant). → {token, expires_ms, expires_at} | nil, err
-- found_for: the repository the installation was looked up for (nil when it was configured).
-- Every mint counts in switchboard_github_token_mints_total{result}.
function App:mint(installation_id, scope_name, scope, found_for)
  local token, err = self:mint_once(installation_id, scope_name, scope, found_for)
  metrics.inc("switchboard_github_token_mints_total", { result = token and "ok" or "failed" })
  return token, err
end

function App:mint_once(installation_id, scope_name, scope, found_for)
  local perms = nil
  if scope.permissions ~= nil then
    perms = {}
    for name, level in pairs(scope.permissions) do perms[name] = level end -- plain copy for core.json
  end
  local body = perms and core.json.encode({ permissions = perms }) or nil
  local path = string.format("/app/installations/%s/access_tokens", tostring(installation_id))
  local asked_ms = self.wall_ms()
  local status, doc, endpoint, headers = self:call("POST", path, body)
  if status == nil then return nil, doc end
  if status == 201 then
    if type(doc) ~= "table" or type(doc.token) ~= "string" or doc.token == "" then
      return fail("http 201", "GitHub's answer to " .. endpoint .. " carries no token")
    end
    self:secret(doc.token)
    local expires_ms = M.parse_time(doc.expires_at)
    -- expires_at is GitHub's clock; the reuse margin is measured on ours. When the answer's
    -- Date says GitHub's clock is ahead of ours, the token ends that much earlier for us (a
    -- skew inside the 1-s resolution of Date is noise). Never later than GitHub says.
    local their_ms = M.parse_http_date(headers and headers["date"])
    if expires_ms and their_ms then
      local skew_ms = their_ms - asked_ms
      if skew_ms > 1000 then expires_ms = expires_ms - skew_ms end
    end
    return { token = doc.token, expires_at = doc.expires_at, expires_ms = expires_ms }
  end
  if status == 422 and perms then
    local names
    local gstatus, gdoc = self:call("GET", "/app/installations/" .. tostring(installation_id))
    if gstatus == 200 and type(gdoc) == "table" and type(gdoc.permissions) == "table" then
      names = refused(perms, gdoc.permissions)
    end
    local which = (names and #names > 0) and ("the installation does not grant " .. table.concat(names, ", "))
      or ("GitHub did not say which; the scope asks for " .. listed(perms))
    return fail("http 422", string.format("GitHub refused to mint the %s token (422): %s%s. Fix: "
      .. "add these permissions in the App's settings (Permissions & events) and accept them on "
      .. "the installation, or remove them from scopes.%s in policies/github.lua",
      scope_name, which, self:says(doc), scope_name), { status = 422, refused = names })
  end
  if status == 404 then
    local fix = found_for
      and string.format("the App was uninstalled from %s or reinstalled; the next command looks "
        .. "the installation up again", found_for)
      or "check GITHUB_APP_INSTALLATION_ID, or unset it to look the installation up per repository"
    return fail("http 404", string.format("GitHub App %s has no installation %s (%s answered 404)%s "
      .. "— %s", self.app_id, tostring(installation_id), endpoint, self:says(doc), fix),
      { status = 404 })
  end
  return self:unexpected(status, doc, endpoint)
end

return M

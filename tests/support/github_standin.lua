-- A loopback stand-in for GitHub's App endpoints, speaking the real protocol
-- (docs/github.md "For developers"), for specs.
--
--   local standin = require("support.github_standin")
--   local gh = standin.start{public_key = pub, app_id = "12345",
--                            installations = {[678] = {account = "acme", repos = {"acme/api"},
--                                                      permissions = standin.FULL_GRANT}}}
--   identity.from_env(getenv, {request = gh.request})   with GITHUB_API_URL = gh.api_url
--   gh:mints_for("read") … gh:close()
--
-- Every call must carry Accept: application/vnd.github+json, X-GitHub-Api-Version: 2022-11-28
-- and a User-Agent; App calls carry Authorization: Bearer <JWT>, which is verified with the
-- App's PUBLIC key (RS256) and whose claims are checked (iss, iat not in the future and at
-- most a minute or two back, exp after now and at most 10 min after iat). It answers as GitHub
-- does: 201 {token, expires_at, permissions, repository_selection} for a mint, 404 for an
-- installation that does not cover the repository, 422 for a permission the installation
-- does not grant, 401 for a bad JWT or an expired token. What it saw is kept for assertions:
-- .requests, .jwts, .tokens, .mints, .violations (header or claim problems it answered).
--
-- Transport: start() serves on 127.0.0.1 through core.http.serve and hands out
-- core.http.request (answers' Date restamped from the stand-in's clock), so the identity's
-- real HTTP path (libcurl, sockets) is exercised.
local core = require("switchboard.core")
local cjson = require("cjson")

local M = {}

M.API_VERSION = "2022-11-28"
M.ACCEPT = "application/vnd.github+json"
M.DOCS = "https://docs.github.com/rest"

-- What docs/contract.md#credential-scope says a read token asks for, exactly.
M.READ_SET = {
  contents = "read", pull_requests = "read", issues = "read",
  actions = "read", checks = "read", metadata = "read",
}
-- The App's required permissions (docs/github.md): Contents, Pull requests, Issues RW; Actions,
-- Checks, Statuses read; Workflows RW; metadata read as on every installation.
M.FULL_GRANT = {
  contents = "write", pull_requests = "write", issues = "write", actions = "read",
  checks = "read", statuses = "read", workflows = "write", metadata = "read",
}

local RANK = { read = 1, write = 2, admin = 3 }

local Standin = {}
Standin.__index = Standin

local function copy(t)
  local out = {}
  for k, v in pairs(t or {}) do out[k] = v end
  return out
end

local function same_set(a, b)
  for k, v in pairs(a) do if b[k] ~= v then return false end end
  for k, v in pairs(b) do if a[k] ~= v then return false end end
  return true
end

-- opts: public_key (PEM), app_id (string; also accepted as the client_id), client_id?,
--       installations (id → {account, repos = {...} | "all", permissions}), wall_ms (clock,
--       default core.wall_ms), token_ttl_ms (default 1 h), mint_delay_ms (hold each mint),
--       mint_hold (a core.signal: each mint waits until it fires)
function M.new(opts)
  local self = setmetatable({
    public_key = assert(opts.public_key, "standin: public_key"),
    app_id = tostring(assert(opts.app_id, "standin: app_id")),
    client_id = opts.client_id,
    installations = opts.installations or {},
    wall_ms = opts.wall_ms or core.wall_ms,
    token_ttl_ms = opts.token_ttl_ms or 3600 * 1000,
    mint_delay_ms = opts.mint_delay_ms or 0,
    mint_hold = opts.mint_hold,
    skew_ms = 0,
    requests = {}, jwts = {}, tokens = {}, mints = {}, violations = {},
    pulls = {}, -- repo → list of {number, head, base, title, body, state, html_url, updates, bodies}
    tokens_file = opts.tokens_file, -- each mint appends "SCOPE TOKEN\n" (the git stand-in reads it)
    repos_root = opts.repos_root,   -- bare repositories ROOT/OWNER/NAME.git: a PR's head must exist
    pr_calls = {},                  -- {method, path, scope} of every pull-request call
    issues = {},      -- repo → number → {title, body}: issues comments may be made on
    comment_by_id = {}, reviews = {}, -- repo → number → list of reviews (issue comments: .comments)
    diff_lines = {},  -- repo → number → path → line → true: the lines a pull request's diff shows
    forced = {}, -- route → list of {status, body} to answer instead, in order
    stop = core.signal(),
  }, Standin)
  return self
end

-- GitHub's clock: the shared one plus skew_ms (a GitHub whose clock is ahead of the bot's).
function Standin:now_s() return (self.wall_ms() + self.skew_ms) // 1000 end

-- Answer the next call to route (status 0: never answer) ("POST /app/installations/{id}/access_tokens" style: method
-- and path with ids) with status and body instead of the real answer.
function Standin:force(route, status, body)
  self.forced[route] = self.forced[route] or {}
  table.insert(self.forced[route], { status = status, body = body })
end

-- Mints counted per scope: "read" (exactly READ_SET), "write" (no permissions asked: the full
-- grant) or "custom"; installation narrows the count to one installation.
function Standin:mints_for(scope, installation)
  local n = 0
  for _, m in ipairs(self.mints) do
    if m.scope == scope and (installation == nil or m.installation == installation) then n = n + 1 end
  end
  return n
end

local function json(status, doc)
  return status, { ["content-type"] = "application/json; charset=utf-8" }, cjson.encode(doc)
end

local function http_date(secs) return os.date("!%a, %d %b %Y %H:%M:%S GMT", secs) end

local function gh_error(status, message)
  return json(status, { message = message, documentation_url = M.DOCS, status = tostring(status) })
end

function Standin:violation(what)
  self.violations[#self.violations + 1] = what
end

-- Headers every request needs. → nil | status, headers, body
function Standin:check_headers(req)
  local h = req.headers
  if h["user-agent"] == nil or h["user-agent"] == "" then
    self:violation("no User-Agent")
    return gh_error(403, "Request forbidden by administrative rules. Please make sure your request "
      .. "has a User-Agent header (https://docs.github.com/en/rest/overview/resources-in-the-rest-api#user-agent-required)")
  end
  if h["accept"] ~= M.ACCEPT then
    self:violation("Accept is " .. tostring(h["accept"]))
    return gh_error(415, "stand-in: Accept must be " .. M.ACCEPT)
  end
  if h["x-github-api-version"] ~= M.API_VERSION then
    self:violation("X-GitHub-Api-Version is " .. tostring(h["x-github-api-version"]))
    return gh_error(400, "API version " .. tostring(h["x-github-api-version"]) .. " is not supported.")
  end
  return nil
end

local function b64url_json(part)
  local raw = core.crypto.base64url_decode(part)
  if raw == nil then return nil end
  local ok, doc = pcall(cjson.decode, raw)
  if ok and type(doc) == "table" then return doc end
  return nil
end

-- Verify the App JWT. → claims | nil, status, headers, body
function Standin:check_jwt(req)
  local auth = req.headers["authorization"] or ""
  local jwt = auth:match("^Bearer (.+)$")
  if jwt == nil then
    self:violation("no Bearer JWT")
    return nil, gh_error(401, "A JSON web token could not be decoded")
  end
  self.jwts[#self.jwts + 1] = jwt
  local h64, p64, s64 = jwt:match("^([%w_-]+)%.([%w_-]+)%.([%w_-]+)$")
  local header, claims = h64 and b64url_json(h64), p64 and b64url_json(p64)
  local sig = s64 and core.crypto.base64url_decode(s64)
  if not (header and claims and sig) then
    self:violation("malformed JWT")
    return nil, gh_error(401, "A JSON web token could not be decoded")
  end
  if header.alg ~= "RS256" then
    self:violation("alg " .. tostring(header.alg))
    return nil, gh_error(401, "A JSON web token could not be decoded")
  end
  if not core.crypto.rs256_verify(self.public_key, h64 .. "." .. p64, sig) then
    self:violation("bad signature")
    return nil, gh_error(401, "A JSON web token could not be decoded")
  end
  local now = self:now_s()
  -- JSON numbers decode as floats: read the claims' integers from the payload text itself.
  local payload = core.crypto.base64url_decode(p64)
  local iat = math.tointeger(tonumber(payload:match('"iat":(%-?%d+)[,}]') or ""))
  local exp = math.tointeger(tonumber(payload:match('"exp":(%-?%d+)[,}]') or ""))
  if iat == nil or iat > now + 5 or iat < now - 3600 then
    self:violation("iat " .. tostring(iat))
    return nil, gh_error(401, "'Issued at' claim ('iat') must be an Integer representing the time "
      .. "that the assertion was issued.")
  end
  if exp == nil or exp <= now then
    self:violation("exp " .. tostring(exp))
    return nil, gh_error(401, "'Expiration time' claim ('exp') must be a numeric value "
      .. "representing the future time at which the assertion expires.")
  end
  if exp - iat > 600 or exp > now + 600 then
    self:violation("exp too far ahead")
    return nil, gh_error(401, "'Expiration time' claim ('exp') is too far in the future.")
  end
  local iss = math.tointeger(claims.iss) and tostring(math.tointeger(claims.iss)) or tostring(claims.iss)
  if iss ~= self.app_id and iss ~= self.client_id then
    self:violation("iss " .. iss)
    return nil, gh_error(401, "Integration not found")
  end
  return claims
end

local function covers(inst, repo)
  if inst.repos == "all" then return repo:match("^([^/]+)/") == inst.account end
  for _, r in ipairs(inst.repos or {}) do if r == repo then return true end end
  return false
end

local function iso(secs) return os.date("!%Y-%m-%dT%H:%M:%SZ", secs) end

function Standin:mint(id, req)
  local inst = self.installations[id]
  if inst == nil then return gh_error(404, "Not Found") end
  local asked = nil
  if req.body ~= nil and req.body ~= "" then
    local ok, doc = pcall(cjson.decode, req.body)
    if not ok or type(doc) ~= "table" then return gh_error(400, "Problems parsing JSON") end
    if doc.permissions ~= nil then asked = doc.permissions end
  end
  if asked then
    for name, level in pairs(asked) do
      local have = inst.permissions[name]
      if RANK[level] == nil or have == nil or RANK[have] < RANK[level] then
        return gh_error(422, "The permissions requested are not granted to this installation.")
      end
    end
  end
  if self.mint_delay_ms > 0 then core.sleep(self.mint_delay_ms) end
  if self.mint_hold then core.sleep(60000, self.mint_hold) end
  local scope = asked == nil and "write" or (same_set(asked, M.READ_SET) and "read" or "custom")
  local token = "ghs_" .. core.crypto.hex(core.crypto.random_bytes(18))
  local expires_s = self:now_s() + self.token_ttl_ms // 1000
  local perms = asked and copy(asked) or copy(inst.permissions)
  self.tokens[token] = { installation = id, permissions = perms, expires_s = expires_s, scope = scope }
  if self.tokens_file then
    local f = assert(io.open(self.tokens_file, "a"))
    f:write(scope, " ", token, "\n")
    f:close()
  end
  self.mints[#self.mints + 1] = {
    installation = id, scope = scope, token = token, asked = asked and copy(asked) or nil,
    body = (req.body ~= "" and req.body) or nil, expires_at = iso(expires_s),
  }
  return json(201, {
    token = token, expires_at = iso(expires_s), permissions = perms,
    repository_selection = inst.repos == "all" and "all" or "selected",
  })
end

-- A call made with an installation token (what gh does inside the sandbox).
function Standin:with_token(req)
  local auth = req.headers["authorization"] or ""
  local token = auth:match("^[Bb]earer (.+)$") or auth:match("^token (.+)$")
  local t = token and self.tokens[token]
  if t == nil or t.expires_s <= self:now_s() then return gh_error(401, "Bad credentials") end
  local repos = {}
  local inst = self.installations[t.installation]
  if type(inst.repos) == "table" then
    for _, r in ipairs(inst.repos) do repos[#repos + 1] = { full_name = r } end
  end
  return json(200, { total_count = #repos, repositories = repos, permissions = t.permissions })
end

-- The installation token of a call (Authorization: Bearer|token), or nil.
function Standin:token_of(req)
  local auth = req.headers["authorization"] or ""
  local token = auth:match("^[Bb]earer (.+)$") or auth:match("^token (.+)$")
  local t = token and self.tokens[token]
  if t == nil or t.expires_s <= self:now_s() then return nil end
  return t
end

local function branch_exists(root, repo, branch)
  if root == nil then return true end
  local cmd = ("git --git-dir='%s/%s.git' rev-parse -q --verify 'refs/heads/%s' >/dev/null 2>&1")
    :format(root, repo, branch:gsub("'", ""))
  return os.execute(cmd) == true
end

local function unescape(s)
  return (s:gsub("+", " "):gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
end

-- GitHub's pull-request routes, with an installation token: list (by head, state), create,
-- update. A token without pull_requests:write gets 403 for create and update, as GitHub answers.
function Standin:pull_request(req, repo, number)
  local t = self:token_of(req)
  if t == nil then return gh_error(401, "Bad credentials") end
  self.pr_calls[#self.pr_calls + 1] = { method = req.method, path = req.path, scope = t.scope }
  local inst = self.installations[t.installation]
  if not covers(inst, repo) then return gh_error(404, "Not Found") end
  local list = self.pulls[repo] or {}
  self.pulls[repo] = list
  local query = (req.query or ""):gsub("^%?", "")
  if req.method == "GET" and number == nil then
    local q = {}
    for k, v in query:gmatch("([^&=]+)=([^&]*)") do q[unescape(k)] = unescape(v) end
    local out = {}
    for _, pr in ipairs(list) do
      local head_ok = q.head == nil or q.head == (repo:match("^([^/]+)/") .. ":" .. pr.head)
      local state_ok = (q.state or "open") == "all" or pr.state == (q.state or "open")
      if head_ok and state_ok then out[#out + 1] = pr end
    end
    return json(200, out)
  end
  if (t.permissions.pull_requests or "") ~= "write" then
    return gh_error(403, "Resource not accessible by integration")
  end
  local ok, doc = pcall(cjson.decode, req.body or "")
  if not ok or type(doc) ~= "table" then return gh_error(400, "Problems parsing JSON") end
  if req.method == "POST" and number == nil then
    if type(doc.head) ~= "string" or type(doc.base) ~= "string" or type(doc.title) ~= "string" then
      return gh_error(422, "Validation Failed")
    end
    if not branch_exists(self.repos_root, repo, doc.head) then
      return json(422, { message = "Validation Failed", documentation_url = M.DOCS,
        errors = { { resource = "PullRequest", field = "head", code = "invalid" } } })
    end
    for _, pr in ipairs(list) do
      if pr.head == doc.head and pr.state == "open" then
        return json(422, { message = "Validation Failed", documentation_url = M.DOCS, errors = { {
          resource = "PullRequest", code = "custom",
          message = "A pull request already exists for " .. repo:match("^([^/]+)/") .. ":" .. doc.head .. "." } } })
      end
    end
    local n = #list + 1
    local pr = { number = n, head = doc.head, base = doc.base, title = doc.title, body = doc.body,
                 state = "open", html_url = "https://github.com/" .. repo .. "/pull/" .. n,
                 draft = doc.draft == true, node_id = "PR_kwDO" .. core.crypto.hex(core.crypto.random_bytes(6)) }
    list[n] = pr
    local status, headers, body = json(201, pr)
    pr.bodies = { doc.body } -- every body it had, for assertions (not part of GitHub's answer)
    return status, headers, body
  end
  if req.method == "PATCH" and number then
    local pr = list[number]
    if pr == nil then return gh_error(404, "Not Found") end
    if doc.title then pr.title = doc.title end
    if doc.body then pr.body = doc.body end
    pr.updates = (pr.updates or 0) + 1
    local bodies = pr.bodies
    pr.bodies = nil
    local status, headers, body = json(200, pr)
    pr.bodies = bodies
    if doc.body then bodies[#bodies + 1] = doc.body end
    return status, headers, body
  end
  return gh_error(404, "Not Found")
end

-- GraphQL (POST /graphql) with an installation token: the one mutation switchboard sends,
-- markPullRequestReadyForReview, answered as GitHub does (200 with data, or 200 with errors).
function Standin:graphql(req)
  local t = self:token_of(req)
  if t == nil then
    return json(401, { message = "Bad credentials", documentation_url = "https://docs.github.com/graphql" })
  end
  local ok, doc = pcall(cjson.decode, req.body or "")
  if not ok or type(doc) ~= "table" or type(doc.query) ~= "string" then
    return json(200, { errors = { { message = "A query attribute must be specified and must be a string." } } })
  end
  if not doc.query:find("markPullRequestReadyForReview", 1, true) then
    return json(200, { errors = { { message = "stand-in: only markPullRequestReadyForReview is served" } } })
  end
  local id = type(doc.variables) == "table" and doc.variables.id
  self.graphql_calls = self.graphql_calls or {}
  self.graphql_calls[#self.graphql_calls + 1] = { id = id, scope = t.scope }
  for repo, list in pairs(self.pulls) do
    for _, pr in ipairs(list) do
      if pr.node_id == id then
        if not covers(self.installations[t.installation], repo) or (t.permissions.pull_requests or "") ~= "write" then
          return json(200, { data = { markPullRequestReadyForReview = cjson.null }, errors = { {
            type = "FORBIDDEN", path = { "markPullRequestReadyForReview" },
            message = "Resource not accessible by integration" } } })
        end
        pr.draft = false
        return json(200, { data = { markPullRequestReadyForReview = { pullRequest = { number = pr.number, isDraft = false } } } })
      end
    end
  end
  return json(200, { data = { markPullRequestReadyForReview = cjson.null }, errors = { {
    type = "NOT_FOUND", path = { "markPullRequestReadyForReview" },
    message = ("Could not resolve to a node with the global id of '%s'"):format(tostring(id)) } } })
end

-- POST /repos/{o}/{r}/issues/{n}/comments with an installation token: a comment on an issue
-- (.issues[repo][n] set by the spec) or pull request (kept in .comments[repo][n], each with its
-- id and every body it had in .edits); needs issues or pull_requests write.
local function may_write_issues(t)
  return (t.permissions.issues or "") == "write" or (t.permissions.pull_requests or "") == "write"
end

function Standin:issue_comment(req, repo, n)
  local t = self:token_of(req)
  if t == nil then return gh_error(401, "Bad credentials") end
  if not covers(self.installations[t.installation], repo) then return gh_error(404, "Not Found") end
  local list = self.pulls[repo] or {}
  local issue = self.issues[repo] and self.issues[repo][n]
  if list[n] == nil and issue == nil then return gh_error(404, "Not Found") end
  self.comments = self.comments or {}
  self.comments[repo] = self.comments[repo] or {}
  local here = self.comments[repo][n] or {}
  if req.method == "GET" then
    local out = {}
    for _, c in ipairs(here) do
      out[#out + 1] = { id = c.id, body = c.body, user = c.user, author_association = c.author_association,
                        html_url = c.html_url }
    end
    return json(200, out)
  end
  if not may_write_issues(t) then return gh_error(403, "Resource not accessible by integration") end
  local ok, doc = pcall(cjson.decode, req.body or "")
  if not ok or type(doc) ~= "table" or type(doc.body) ~= "string" then return gh_error(422, "Validation Failed") end
  self.comments[repo][n] = here
  self.comment_seq = (self.comment_seq or 1000) + 1
  local c = { id = self.comment_seq, body = doc.body, scope = t.scope, edits = { doc.body },
              user = { login = self.bot_login or "switchboard[bot]", type = "Bot" },
              html_url = ("https://github.com/%s/%s/%d#issuecomment-%d"):format(repo, issue and "issues" or "pull", n, self.comment_seq) }
  table.insert(here, c)
  self.comment_by_id[c.id] = c
  return json(201, { id = c.id, body = c.body, user = c.user, html_url = c.html_url })
end

-- PATCH /repos/{o}/{r}/issues/comments/{id}: a comment's edit (200).
function Standin:edit_comment(req, repo, id)
  local t = self:token_of(req)
  if t == nil then return gh_error(401, "Bad credentials") end
  if not covers(self.installations[t.installation], repo) then return gh_error(404, "Not Found") end
  local c = self.comment_by_id[id]
  if c == nil then return gh_error(404, "Not Found") end
  if not may_write_issues(t) then return gh_error(403, "Resource not accessible by integration") end
  local ok, doc = pcall(cjson.decode, req.body or "")
  if not ok or type(doc) ~= "table" or type(doc.body) ~= "string" then return gh_error(422, "Validation Failed") end
  c.body = doc.body
  c.edits[#c.edits + 1] = doc.body
  return json(200, { id = c.id, body = c.body, user = c.user, html_url = c.html_url })
end

-- POST /repos/{o}/{r}/pulls/{n}/reviews {event, body, comments = [{path, line, side, body}]}:
-- a review (200), kept in .reviews[repo][n]. A line comment on a line the pull request's diff
-- does not show (.diff_lines[repo][n][path][line], set by the spec) makes GitHub refuse the
-- whole review with 422 "Line could not be resolved", as it does.
function Standin:review(req, repo, n)
  local t = self:token_of(req)
  if t == nil then return gh_error(401, "Bad credentials") end
  if not covers(self.installations[t.installation], repo) then return gh_error(404, "Not Found") end
  if (t.permissions.pull_requests or "") ~= "write" then return gh_error(403, "Resource not accessible by integration") end
  local pr = self.pulls[repo] and self.pulls[repo][n]
  if pr == nil then return gh_error(404, "Not Found") end
  local ok, doc = pcall(cjson.decode, req.body or "")
  if not ok or type(doc) ~= "table" then return gh_error(400, "Problems parsing JSON") end
  if doc.event ~= "COMMENT" and doc.event ~= "APPROVE" and doc.event ~= "REQUEST_CHANGES" then
    return gh_error(422, "Unprocessable Entity")
  end
  local diff = self.diff_lines[repo] and self.diff_lines[repo][n] or {}
  for _, c in ipairs(type(doc.comments) == "table" and doc.comments or {}) do
    local lines = type(c) == "table" and diff[c.path]
    if not (lines and lines[c.line]) or c.side ~= "RIGHT" or type(c.body) ~= "string" then
      return json(422, { message = "Unprocessable Entity", errors = { "Line could not be resolved" },
                         documentation_url = M.DOCS, status = "422" })
    end
  end
  self.reviews[repo] = self.reviews[repo] or {}
  self.reviews[repo][n] = self.reviews[repo][n] or {}
  self.review_seq = (self.review_seq or 5000) + 1
  table.insert(self.reviews[repo][n], { id = self.review_seq, event = doc.event, body = doc.body,
                                        comments = doc.comments or {}, scope = t.scope })
  return json(200, { id = self.review_seq, body = doc.body, state = "COMMENTED",
                     html_url = ("https://github.com/%s/pull/%d#pullrequestreview-%d"):format(repo, n, self.review_seq) })
end

-- The protocol, transport-free: req = {method, path, headers (lower-cased names), body}.
-- → status, headers, body
function Standin:handle(req)
  local entry = { method = req.method, path = req.path }
  self.requests[#self.requests + 1] = entry
  local function answer(status, headers, body)
    entry.status = status
    return status, headers, body
  end
  local bad = { self:check_headers(req) }
  if bad[1] then return answer(table.unpack(bad)) end

  local route = req.method .. " " .. req.path
  local forced = self.forced[route]
  if forced and #forced > 0 then
    local f = table.remove(forced, 1)
    if f.status == 0 then -- never answers (deadline tests); close() ends the wait
      core.sleep(3600 * 1000, self.stop)
      return answer(gh_error(504, "stand-in closed"))
    end
    return answer(json(f.status, f.body or { message = "forced", documentation_url = M.DOCS }))
  end

  if req.method == "GET" and req.path == "/installation/repositories" then
    return answer(self:with_token(req))
  end
  if req.method == "POST" and req.path == "/graphql" then return answer(self:graphql(req)) end
  local c_repo, c_n = req.path:match("^/repos/([^/]+/[^/]+)/issues/(%d+)/comments$")
  if (req.method == "POST" or req.method == "GET") and c_repo then
    return answer(self:issue_comment(req, c_repo, math.tointeger(tonumber(c_n))))
  end
  local e_repo, e_id = req.path:match("^/repos/([^/]+/[^/]+)/issues/comments/(%d+)$")
  if req.method == "PATCH" and e_repo then return answer(self:edit_comment(req, e_repo, math.tointeger(tonumber(e_id)))) end
  local r_repo, r_n = req.path:match("^/repos/([^/]+/[^/]+)/pulls/(%d+)/reviews$")
  if req.method == "POST" and r_repo then return answer(self:review(req, r_repo, math.tointeger(tonumber(r_n)))) end
  local pr_repo, pr_n = req.path:match("^/repos/([^/]+/[^/]+)/pulls/(%d+)$")
  if not pr_repo then pr_repo = req.path:match("^/repos/([^/]+/[^/]+)/pulls$") end
  if pr_repo then return answer(self:pull_request(req, pr_repo, pr_n and math.tointeger(tonumber(pr_n)))) end
  local claims, s, h, b = self:check_jwt(req)
  if claims == nil then return answer(s, h, b) end

  local owner, repo = req.path:match("^/repos/([^/]+)/([^/]+)/installation$")
  if req.method == "GET" and owner then
    local full = owner .. "/" .. repo
    for id, inst in pairs(self.installations) do
      if covers(inst, full) then
        return answer(json(200, { id = id, account = { login = inst.account },
          app_id = tonumber(self.app_id), permissions = inst.permissions,
          repository_selection = inst.repos == "all" and "all" or "selected" }))
      end
    end
    return answer(gh_error(404, "Not Found"))
  end
  local id = req.path:match("^/app/installations/(%d+)/access_tokens$")
  if req.method == "POST" and id then return answer(self:mint(math.tointeger(tonumber(id)), req)) end
  id = req.path:match("^/app/installations/(%d+)$")
  if req.method == "GET" and id then
    local inst = self.installations[math.tointeger(tonumber(id))]
    if inst == nil then return answer(gh_error(404, "Not Found")) end
    return answer(json(200, { id = math.tointeger(tonumber(id)), account = { login = inst.account },
      permissions = inst.permissions }))
  end
  return answer(gh_error(404, "Not Found"))
end

-- Serves on 127.0.0.1 (an ephemeral port) inside the running core.run; close() when done.
function M.start(opts)
  local self = M.new(opts)
  self.server = core.http.serve{
    host = "127.0.0.1", port = 0,
    handler = function(req, res)
      local status, headers, body = self:handle{
        method = req.method, path = req.path, query = req.query, headers = req.headers, body = req.body,
      }
      res:send(status, headers, body)
    end,
  }
  self.api_url = "http://127.0.0.1:" .. self.server.port
  -- The engine's server stamps Date from the real clock; GitHub's Date is the stand-in's clock
  -- (the specs' fake one, plus skew_ms), so the answer's date is restamped for the client.
  self.request = function(args)
    local status, headers, body = core.http.request(args)
    if status and type(headers) == "table" then headers["date"] = http_date(self:now_s()) end
    return status, headers, body
  end
  return self
end

---------------------------------------------------------------------------------------------
-- Fixtures for the github specs

local keys_cache = {}
-- An RSA key pair (PEM private, PEM public), made once per name per process.
function M.keys(name)
  name = name or "app"
  if keys_cache[name] == nil then
    local priv, pub = core.crypto.rsa_generate(2048)
    keys_cache[name] = { priv, pub }
  end
  return keys_cache[name][1], keys_cache[name][2]
end

-- The installations most specs use: 678 covers acme/api and acme/web with the App's full
-- required grant; 900 is another org's, covering all of its repositories.
function M.default_installations()
  return {
    [678] = { account = "acme", repos = { "acme/api", "acme/web" }, permissions = copy(M.FULL_GRANT) },
    [900] = { account = "umbrella", repos = "all", permissions = copy(M.FULL_GRANT) },
  }
end

-- A world for one spec, inside core.run: a fake wall clock shared by the identity and the
-- stand-in, the stand-in, the bot's environment, and the identity with its log and redaction
-- captured. opts: policy (function → snapshot, required), env (extra or replaced variables;
-- false removes one), installations, mint_delay_ms, mint_hold, identity_opts, real_clock (the stand-in
-- reads the real wall clock: a switchboard process under test signs JWTs with it).
function M.world(opts)
  local identity = require("switchboard.github.identity")
  local w = { clock = { ms = (core.wall_ms() // 1000) * 1000 }, logs = {}, redacted = {} }
  w.wall_ms = function() return w.clock.ms end
  if opts.real_clock then w.wall_ms = core.wall_ms end -- another process signs with its own
  function w.advance(ms) w.clock.ms = w.clock.ms + ms end
  w.priv, w.pub = M.keys()
  w.gh = M.start{
    public_key = w.pub, app_id = "12345", client_id = opts.client_id,
    installations = opts.installations or M.default_installations(),
    wall_ms = w.wall_ms, mint_delay_ms = opts.mint_delay_ms, mint_hold = opts.mint_hold,
    tokens_file = opts.tokens_file, repos_root = opts.repos_root,
  }
  w.env = { GITHUB_APP_ID = "12345", GITHUB_APP_PRIVATE_KEY = w.priv, GITHUB_API_URL = w.gh.api_url }
  for k, v in pairs(opts.env or {}) do w.env[k] = v or nil end
  function w.getenv(name) return w.env[name] end
  local iopts = {
    policy = opts.policy, request = w.gh.request, wall_ms = w.wall_ms,
    log = function(level, event, fields) w.logs[#w.logs + 1] = { level = level, event = event, fields = fields } end,
    redact = function(s) w.redacted[s] = true; core.log_redact(s) end,
  }
  for k, v in pairs(opts.identity_opts or {}) do iopts[k] = v end
  function w.new_identity() return identity.from_env(w.getenv, iopts) end
  w.identity = w.new_identity()
  -- Every secret the world has seen: the key (and each of its lines), JWTs, tokens.
  function w.secrets()
    local out = { w.priv }
    for line in w.priv:gmatch("[^\n]+") do
      if not line:find("-----", 1, true) then out[#out + 1] = line end
    end
    for _, j in ipairs(w.gh.jwts) do out[#out + 1] = j end
    for t in pairs(w.gh.tokens) do out[#out + 1] = t end
    return out
  end
  -- The first secret found in text, or nil.
  function w.leak(text)
    text = tostring(text)
    for _, s in ipairs(w.secrets()) do
      if #s >= 16 and text:find(s, 1, true) then return s:sub(1, 12) .. "…" end
    end
    return nil
  end
  function w.close() w.gh:close() end
  return w
end

function Standin:close()
  self.stop:abort("closed")
  if self.server then self.server:close(); self.server = nil end
end

return M

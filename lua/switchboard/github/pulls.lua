-- Pull requests through GitHub's REST API, with an installation (or plain) token: the one
-- open for a branch is looked up and updated, else one is opened.
--
--   GET   /repos/{o}/{r}/pulls?head={o}:{branch}&state=open   the open PR of the branch
--   POST  /repos/{o}/{r}/pulls   {title, head, base, body}     open one (201)
--   PATCH /repos/{o}/{r}/pulls/{n}   {body}                    update it (200)
--
--   POST  /graphql   markPullRequestReadyForReview            a draft made ready (REST cannot)
--   POST  /repos/{o}/{r}/issues/{n}/comments   {body}          a comment on the pull request (201)
--
--   local ok, err = pulls.comment{api_url, token, repo, number, body, timeout_ms, request?, user_agent?}
--     err (and mark_ready's): core.error "github", its message saying what happened and what to do
--
--   local pr, err = pulls.open_or_update{api_url, token, repo, branch, base, title, body,
--                                        timeout_ms, request?, user_agent?, draft?}
--     → {number, url, action = "opened" | "updated", draft} | nil, "what happened and what to do"
--   draft: open the pull request as a draft; without it, a draft found open for the branch is
--   marked ready for review (a follow-up finished what a stopped run began)
--
-- The token travels only in the Authorization header; error texts never quote it.
local core = require("switchboard.core")
local app = require("switchboard.github.app")

local M = {}

local function urlencode(s)
  return (s:gsub("[^%w%-._~]", function(c) return ("%%%02X"):format(c:byte()) end))
end

local function says(doc)
  if type(doc) ~= "table" then return "" end
  local parts = {}
  if type(doc.message) == "string" then parts[#parts + 1] = doc.message end
  for _, e in ipairs(type(doc.errors) == "table" and doc.errors or {}) do
    if type(e) == "table" and type(e.message) == "string" then parts[#parts + 1] = e.message end
  end
  if #parts == 0 then return "" end
  return " (GitHub said: " .. table.concat(parts, "; "):gsub("[\r\n]+", " "):sub(1, 300) .. ")"
end

-- What a refused call means and what to do about it.
function M.explain(status, doc, what, repo)
  local said = says(doc)
  if status == 401 then
    return ("GitHub refused the token when it tried to %s (401)%s — the installation token expired or "
      .. "was revoked; ask again to mint a new one"):format(what, said)
  end
  if status == 403 then
    return ("GitHub refused to %s in %s (403)%s — the token may not write pull requests: give the "
      .. "App \"Pull requests: Read and write\", accept the new permission on the installation, "
      .. "and check that this agent gets the write token (token_scope in policies/agents.lua)")
      :format(what, repo, said)
  end
  if status == 404 then
    return ("GitHub answered 404 when it tried to %s in %s%s — the App is not installed on the "
      .. "repository or does not cover it: App page → Install App → Configure → add %s")
      :format(what, repo, said, repo)
  end
  if status == 422 then
    return ("GitHub could not %s in %s (422)%s — if the branch has no commits that the base "
      .. "lacks, there is nothing to review; if a pull request already exists for it, close "
      .. "or reuse it"):format(what, repo, said)
  end
  return ("GitHub answered %s when it tried to %s in %s%s — try again later"):format(
    tostring(status), what, repo, said)
end

local function call(o, method, path, doc)
  local body = doc and core.json.encode(doc) or nil
  local headers = {
    ["Accept"] = app.ACCEPT,
    ["X-GitHub-Api-Version"] = app.API_VERSION,
    ["User-Agent"] = o.user_agent or "OpenSwitchboard",
    ["Authorization"] = "Bearer " .. o.token,
  }
  if body then headers["Content-Type"] = "application/json" end
  local request = o.request or core.http.request
  local status, _, resp = request{ method = method, url = o.api_url .. path, headers = headers,
                                   body = body, deadline_ms = o.timeout_ms or 10000 }
  if status == nil then
    return nil, nil, ("GitHub API %s %s is unreachable or slow — check GITHUB_API_URL and this "
      .. "host's network, then ask again"):format(method, o.api_url .. path)
  end
  return status, (core.json.decode(resp or ""))
end

-- One REST call (github/issues.lua uses it too): → status, decoded body | nil, nil, why
M.call = call

function M.open_or_update(o)
  local owner = o.repo:match("^([^/]+)/")
  local base_path = "/repos/" .. o.repo .. "/pulls"
  local status, doc, err = call(o, "GET", ("%s?head=%s&state=open"):format(base_path,
    urlencode(owner .. ":" .. o.branch)))
  if status == nil then return nil, err end
  if status ~= 200 or type(doc) ~= "table" then
    return nil, M.explain(status, doc, "look up the pull request of " .. o.branch, o.repo)
  end
  local open = doc[1]
  if type(open) == "table" and open.number then
    local n = math.tointeger(open.number) or open.number
    -- the title stays the first ask's (a person may have edited it); the body keeps what it
    -- says (the first run's section, a person's edits) and gains this run's section below
    local kept = type(open.body) == "string" and open.body:match("^(.-)%s*$") or ""
    local body = kept ~= "" and (kept .. "\n\n---\n\n" .. o.body) or o.body
    status, doc, err = call(o, "PATCH", ("%s/%d"):format(base_path, n), { body = body })
    if status == nil then return nil, err end
    if status ~= 200 then return nil, M.explain(status, doc, "update pull request #" .. n, o.repo) end
    local pr = { number = n, url = doc.html_url or open.html_url, action = "updated", draft = open.draft == true }
    if pr.draft and not o.draft then
      local ok, why = M.mark_ready(o, open.node_id)
      if not ok then
        return nil, core.error("github", ("updated pull request #%d, but it stays a draft: %s"):format(n, why.message),
          { cause = why })
      end
      pr.draft = false
    end
    return pr
  end
  status, doc, err = call(o, "POST", base_path, { title = o.title, head = o.branch, base = o.base, body = o.body,
                                                   draft = o.draft or nil })
  if status == nil then return nil, err end
  if status ~= 201 or type(doc) ~= "table" then
    return nil, M.explain(status, doc, "open a pull request from " .. o.branch, o.repo)
  end
  return { number = math.tointeger(doc.number) or doc.number, url = doc.html_url, action = "opened",
           draft = doc.draft == true }
end

-- GitHub's REST API cannot take a pull request out of draft; GraphQL's
-- markPullRequestReadyForReview does. → true | nil, why
local READY = "mutation($id: ID!) { markPullRequestReadyForReview(input: {pullRequestId: $id}) "
  .. "{ pullRequest { number isDraft } } }"

-- GraphQL's endpoint: api.github.com/graphql; GitHub Enterprise Server's REST API is at
-- HOST/api/v3 and its GraphQL at HOST/api/graphql.
local function graphql_base(api_url)
  return (api_url:gsub("/api/v3/*$", "/api"))
end

function M.mark_ready(o, node_id)
  if type(node_id) ~= "string" then return nil, core.error("github", "GitHub gave no node_id for it; mark it ready on GitHub") end
  local g = setmetatable({ api_url = graphql_base(o.api_url) }, { __index = o })
  local status, doc, err = call(g, "POST", "/graphql", { query = READY, variables = { id = node_id } })
  if status == nil then return nil, core.error("github", err) end
  if status ~= 200 or type(doc) ~= "table" or doc.errors ~= nil then
    local said = type(doc) == "table" and type(doc.errors) == "table" and type(doc.errors[1]) == "table"
      and doc.errors[1].message or nil
    return nil, core.error("github", ("GitHub did not mark it ready for review (%s%s) — mark it ready on GitHub"):format(
      tostring(status), said and (": " .. tostring(said):sub(1, 200)) or ""))
  end
  return true
end

function M.comment(o)
  local status, doc, err = call(o, "POST", ("/repos/%s/issues/%d/comments"):format(o.repo, o.number), { body = o.body })
  if status == nil then return nil, core.error("github", err) end
  if status ~= 201 then
    return nil, core.error("github", M.explain(status, doc, "comment on pull request #" .. o.number, o.repo), { status = status })
  end
  return true
end

return M

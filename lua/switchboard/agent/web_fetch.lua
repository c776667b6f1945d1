-- The web_fetch tool (docs/agent.md "web_fetch"): a URL → readable text. It runs where the
-- thread's network policy applies — inside the thread's sandbox, through its executor — and
-- refuses loopback, private, link-local and other non-public destinations after DNS, at every
-- redirect hop:
--
--   1. the host is resolved in the instance (getent ahostsv4; an IPv4 literal as it is);
--      every address is checked here (M.refused), and one address that passes is pinned
--   2. curl fetches that one URL with --resolve HOST:PORT:ADDRESS (the connection goes to
--      the checked address, TLS still checks the host's name) and no redirect of its own
--   3. a redirect's Location is the next hop, checked the same way, at most max_redirects
-- An agent without a sandbox (no repository: the null executor) fetches from the bot instead,
-- over core.http with public_only: the engine refuses a non-public address at the moment it
-- connects (src/http/client.c), so the check and the connection cannot disagree; each redirect
-- is a new request, refused the same way.
-- HTML becomes markdown (agent/html_markdown.lua); other text is given as it is; the rest is
-- described. The model's bound on tool output applies to what is returned, as for bash.
--
--   web_fetch.definition(snap) → the API's tool entry
--   web_fetch.call(ex, snap, input, ctx) → {kind, content, is_error} | nil, executor error
--     ex nil: the agent has no sandbox; the fetch is the bot's (ctx.request: core.http.request)
--   web_fetch.refused(address) → nil | why (IPv4 dotted quad)
local core = require("switchboard.core")
local html_markdown = require("switchboard.agent.html_markdown")
local tool_schema = require("switchboard.agent.tool_schema")

local M = {}

M.BODY_MARK = "--sb-web-fetch-body--"

function M.definition(snap)
  local w = snap.agents.web_fetch
  return tool_schema.tool("web_fetch", ("Fetch a web page (http or https) and return it as readable text: HTML is "
    .. "converted to markdown. Redirects are followed (at most %d). Addresses of this host, "
    .. "of private networks and link-local ones are refused. At most %d bytes are read."):format(
    w.max_redirects, w.max_download_bytes), {
    { "url", "string", "The http:// or https:// URL to fetch.", required = true },
  })
end

-- IPv4 ranges that are not the public internet: this host, private networks, link-local
-- (cloud metadata), carrier-grade NAT, multicast, reserved.
local REFUSED = {
  { 0, 8, "this network" }, { 10, 8, "a private network" }, { 100 * 2 ^ 24 + 64 * 2 ^ 16, 10, "carrier-grade NAT" },
  { 127, 8, "loopback" }, { 169 * 2 ^ 24 + 254 * 2 ^ 16, 16, "link-local" },
  { 172 * 2 ^ 24 + 16 * 2 ^ 16, 12, "a private network" }, { 192 * 2 ^ 24 + 0 * 2 ^ 16, 24, "IETF protocol assignments" },
  { 192 * 2 ^ 24 + 168 * 2 ^ 16, 16, "a private network" }, { 224 * 2 ^ 24, 4, "multicast" }, { 240 * 2 ^ 24, 4, "reserved" },
}
for _, r in ipairs(REFUSED) do if r[1] < 256 then r[1] = r[1] * 2 ^ 24 end end

function M.refused(address)
  local a, b, c, d = address:match("^(%d+)%.(%d+)%.(%d+)%.(%d+)$")
  if not a then return "not an IPv4 address (the sandbox has no IPv6)" end
  local n = 0
  for _, part in ipairs{ a, b, c, d } do
    part = tonumber(part)
    if part > 255 then return "not an IPv4 address" end
    n = n * 256 + part
  end
  for _, r in ipairs(REFUSED) do
    local size = 2 ^ (32 - r[2])
    if n >= r[1] and n < r[1] + size then return r[3] end
  end
  return nil
end

local function quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- scheme, host, port of an http(s) URL; nil and why (a core.error "input") for anything else.
local function bad(why) return core.error("input", why) end

function M.parse(url)
  if type(url) ~= "string" or url:find("[%s%c]") then return nil, bad("not a URL") end
  local scheme, rest = url:match("^(%a[%w+.-]*)://(.*)$")
  scheme = scheme and scheme:lower()
  if scheme ~= "http" and scheme ~= "https" then return nil, bad("only http:// and https:// URLs are fetched") end
  local authority = rest:match("^([^/?#]*)")
  if authority:find("@", 1, true) then return nil, bad("a URL with credentials is not fetched") end
  if authority:sub(1, 1) == "[" then return nil, bad("an IPv6 address (the sandbox has no IPv6)") end
  local host, port = authority:match("^([^:]+):(%d+)$")
  host = (host or authority):lower()
  port = tonumber(port) or (scheme == "https" and 443 or 80)
  if host == "" or not host:match("^[%w.-]+$") then return nil, bad("no host name in the URL") end
  return { scheme = scheme, host = host, port = port, url = url }
end

local function run(ex, snap, command, ctx)
  local w = snap.agents.web_fetch
  return ex:exec(command, { timeout_ms = w.timeout_ms + 5000, signal = ctx.signal,
                            remaining_ms = ctx.remaining_ms, snap = snap })
end

local function tool_error(text) return { kind = "tool", content = "web_fetch: " .. text, is_error = true } end

-- The host's addresses, as the instance resolves them; every one must pass.
local function checked_address(ex, snap, u, ctx)
  local addresses = {}
  if u.host:match("^%d+%.%d+%.%d+%.%d+$") then
    addresses[1] = u.host
  else
    local result, err = run(ex, snap, "getent ahostsv4 -- " .. quote(u.host), ctx)
    if not result then return nil, nil, err end
    local seen = {}
    for addr in (result.stdout or result.text or ""):gmatch("(%d+%.%d+%.%d+%.%d+)") do
      if not seen[addr] then seen[addr] = true; addresses[#addresses + 1] = addr end
    end
    if #addresses == 0 then return nil, tool_error(("%s does not resolve"):format(u.host)) end
  end
  for _, addr in ipairs(addresses) do
    local why = M.refused(addr)
    if why then
      return nil, tool_error(("refused %s: %s resolves to %s, %s; web_fetch only fetches public addresses")
        :format(u.url, u.host, addr, why))
    end
  end
  return addresses[1]
end

function M.script(snap, u, address)
  local w = snap.agents.web_fetch
  return table.concat({
    "__t=$(mktemp) && __m=$(mktemp) && __e=$(mktemp) || exit 70",
    ("curl -sS --proto =http,https --max-redirs 0 --max-filesize %d --max-time %d --resolve %s -A %s "
      .. "-H 'Accept: text/html, text/plain;q=0.9, */*;q=0.5' -o \"$__t\" -w %s -- %s >\"$__m\" 2>\"$__e\"")
      :format(w.max_download_bytes, math.max(1, w.timeout_ms // 1000),
        quote(("%s:%d:%s"):format(u.host, u.port, address)), quote("switchboard-web_fetch/1"),
        quote("%{http_code}\\n%{content_type}\\n%{redirect_url}\\n"), quote(u.url)),
    "__rc=$?",
    "cat \"$__m\"; head -c 300 \"$__e\"",
    "printf '\\n%s\\n' " .. quote(M.BODY_MARK),
    ("head -c %d \"$__t\""):format(w.max_download_bytes),
    "rm -f \"$__t\" \"$__m\" \"$__e\"",
    "exit $__rc",
  }, "\n")
end

local function textual(ctype)
  return ctype == "" or ctype:match("^text/") or ctype:match("json") or ctype:match("xml") or ctype:match("javascript")
end

local function render(u, status, ctype, body)
  local head = ("%s (HTTP %d, %s)"):format(u.url, status, ctype ~= "" and ctype or "no content type")
  if ctype:match("html") or (ctype == "" and body:sub(1, 512):lower():find("<html", 1, true)) then
    return head .. "\n\n" .. html_markdown.convert(body, u.url)
  end
  if not textual(ctype) or body:find("\0", 1, true) then
    return ("%s: %d bytes of %s, not text; not shown"):format(head, #body, ctype)
  end
  return head .. "\n\n" .. body
end

-- One hop from the bot: status, content type, the redirect's absolute URL, body | nil, result.
local function bot_hop(snap, u, ctx)
  local w = snap.agents.web_fetch
  local request = ctx.request or core.http.request
  local status, headers, body = request{ method = "GET", url = u.url, public_only = true, signal = ctx.signal,
    deadline_ms = math.max(1, math.min(w.timeout_ms, ctx.remaining_ms or w.timeout_ms)),
    max_body = w.max_download_bytes,
    headers = { ["Accept"] = "text/html, text/plain;q=0.9, */*;q=0.5", ["User-Agent"] = "switchboard-web_fetch/1" } }
  if type(status) ~= "number" then
    local err = headers
    if type(err) == "table" and err.kind == "refused_address" then
      return nil, tool_error(("refused %s: %s; web_fetch only fetches public addresses"):format(u.url,
        tostring(err):match("refused to connect to ([^:]+):") or tostring(err)))
    end
    return nil, tool_error(("fetching %s failed: %s"):format(u.url, tostring(err)))
  end
  local location = headers and headers["location"] or ""
  return status, (headers and headers["content-type"] or ""), location ~= "" and html_markdown.absolute(location, u.url) or "", body or ""
end

-- One hop inside the sandbox: the same, or nil, result | nil, nil, executor error.
local function sandbox_hop(ex, snap, u, ctx)
  local address, refusal, err = checked_address(ex, snap, u, ctx)
  if err then return nil, nil, err end
  if refusal then return nil, refusal end
  local result, xerr = run(ex, snap, M.script(snap, u, address), ctx)
  if not result then return nil, nil, xerr end
  local out = result.stdout or result.text or ""
  local meta, body = out:match("^(.-)\n" .. M.BODY_MARK:gsub("%-", "%%-") .. "\n(.*)$")
  meta, body = meta or out, body or ""
  local status, ctype, location, complaint = meta:match("^(%d+)\n([^\n]*)\n([^\n]*)\n?(.*)$")
  if result.exit_code ~= 0 or not status then
    return nil, tool_error(("fetching %s failed (curl exit %s): %s"):format(u.url, tostring(result.exit_code),
      (complaint or meta):gsub("%s+$", "")))
  end
  return tonumber(status), ctype, location, body
end

function M.call(ex, snap, input, ctx)
  local w = snap.agents.web_fetch
  local u, perr = M.parse(type(input) == "table" and input.url or nil)
  if not u then return { kind = "input", content = "web_fetch needs {\"url\": \"http(s)://…\"}: " .. tostring(perr), is_error = true } end
  for _ = 0, w.max_redirects do
    local status, ctype, location, body
    if ex then
      local refusal, err
      status, ctype, location, body = sandbox_hop(ex, snap, u, ctx)
      if not status then refusal, err = ctype, location end
      if err then return nil, err end
      if refusal then return refusal end
    else
      status, ctype, location, body = bot_hop(snap, u, ctx)
      if not status then return ctype end
    end
    if status >= 300 and status < 400 and location ~= "" then
      local nu, nerr = M.parse(location)
      if not nu then return tool_error(("%s redirects to %s: %s"):format(u.url, location, tostring(nerr))) end
      u = nu
    else
      return { kind = "result", content = render(u, status, ctype:lower(), body), is_error = status >= 400 }
    end
  end
  return tool_error(("more than %d redirects"):format(w.max_redirects))
end

M.TOOLS = {
  { name = "web_fetch", reaches = { "executor", "web" }, without_repository = "web", policy = "agents.web_fetch",
    help = "a web page as markdown: in the sandbox, or from the bot for an agent without one",
    definition = M.definition,
    call = function(ex, snap, input, ctx, def)
      -- no sandbox: the bot fetches (core.http with public_only)
      if not (def.resources and def.resources.repository) then ex = nil end
      return M.call(ex, snap, input, ctx)
    end },
}

return M

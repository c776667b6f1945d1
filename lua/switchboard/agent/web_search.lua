-- The web_search tool (docs/agent.md "web_search"): a query → a numbered list of results
-- (title, URL, snippet), through the search provider policy names (policies/agents.lua
-- web_search). The provider is called from the bot — its API key is the bot's secret, read
-- from the environment variable policy names at each call, never given to the sandbox, never
-- logged. Providers: "brave" (Brave Search's web search API: GET URL?q=…&count=N with the key
-- in X-Subscription-Token; results in web.results[].{title, url, description}).
--
--   web_search.definition(snap) → the API's tool entry, or nil with provider "none"
--   web_search.call(snap, input, ctx) → {kind, content, is_error}
--     ctx: signal, remaining_ms, getenv? (default os.getenv), request? (core.http.request)
local core = require("switchboard.core")
local json = core.json
local html_markdown = require("switchboard.agent.html_markdown")
local tool_schema = require("switchboard.agent.tool_schema")

local M = {}

function M.definition(snap)
  local s = snap.agents.web_search
  if s.provider == "none" then return nil end
  return tool_schema.tool("web_search", ("Search the web and return the top results (at most %d): each a title, "
    .. "its URL and a snippet. Read a result's page with web_fetch."):format(s.max_results), {
    { "query", "string", "What to search for.", required = true },
  })
end

local function escape(s)
  return (s:gsub("[^%w%-_.~]", function(c) return ("%%%02X"):format(c:byte()) end))
end

local function plain(s)
  if type(s) ~= "string" then return "" end
  return (html_markdown.decode_entities(s:gsub("<[^<>]*>", "")):gsub("%s+", " "))
end

local function tool_error(text) return { kind = "tool", content = "web_search: " .. text, is_error = true } end

function M.call(snap, input, ctx)
  local s = snap.agents.web_search
  local query = type(input) == "table" and input.query
  if type(query) ~= "string" or query:match("^%s*$") then
    return { kind = "input", content = "web_search needs {\"query\": \"…\"}", is_error = true }
  end
  if s.provider == "none" then return tool_error("no search provider in policy (policies/agents.lua web_search)") end
  local key = (ctx.getenv or os.getenv)(s.key_env)
  if key == nil or key == "" then
    return tool_error(("the search provider's key (%s) is not set in the bot's environment"):format(s.key_env))
  end
  if core.log_redact then core.log_redact(key) end
  local url = ("%s%sq=%s&count=%d"):format(s.url, s.url:find("?", 1, true) and "&" or "?", escape(query), s.max_results)
  local status, headers, body = (ctx.request or core.http.request){
    method = "GET", url = url, signal = ctx.signal, max_body = 4 * 1024 * 1024,
    deadline_ms = math.max(1, math.min(s.timeout_ms, ctx.remaining_ms or s.timeout_ms)),
    headers = { ["Accept"] = "application/json", ["X-Subscription-Token"] = key },
  }
  if type(status) ~= "number" then return tool_error("the search provider did not answer: " .. tostring(headers)) end
  if status ~= 200 then return tool_error(("the search provider answered HTTP %d"):format(status)) end
  local doc = json.decode(body or "")
  local results = type(doc) == "table" and type(doc.web) == "table" and type(doc.web.results) == "table" and doc.web.results or {}
  local out = {}
  for _, r in ipairs(results) do
    if #out >= s.max_results then break end
    if type(r) == "table" and type(r.url) == "string" then
      out[#out + 1] = ("%d. %s\n   %s\n   %s"):format(#out + 1, plain(r.title), r.url, plain(r.description))
    end
  end
  if #out == 0 then return { kind = "result", content = ("no results for %q"):format(query), is_error = false } end
  return { kind = "result", content = table.concat(out, "\n"), is_error = false }
end

M.TOOLS = {
  { name = "web_search", reaches = { "web" }, policy = "agents.web_search",
    help = "the policy's search provider, from the bot (not offered without one)",
    definition = M.definition, call = function(_, snap, input, ctx) return M.call(snap, input, ctx) end },
}

return M

-- Where the bot token may go when an ask's file is fetched (docs/slack.md "Context"): to
-- Slack's own file hosts only. A file object's url_private(_download) comes from the event,
-- and an external or forged file names any address; sending the token there hands it over
-- (slack-go's GHSA-3q3v-34v2-g88f). So a URL is parsed strictly and its origin — scheme,
-- host, port — must be one of:
--   * https://files.slack.com (port 443)
--   * the configured Web API base's own origin (SLACK_API_URL: the token goes there anyway;
--     the tests' Slack stand-in serves its files there)
--   * https://files.<the API base's host> when the base is https on a host name (a
--     government or self-hosted Slack: slack-gov.com → files.slack-gov.com)
-- Anything else — another host, another port, http where https is configured, userinfo
-- (`https://files.slack.com@evil/…`), a trailing dot, percent signs, spaces or backslashes
-- in the authority — is refused before any request. The rule is the program's, not a policy:
-- it adds no host an operator has not already trusted with the token.
--
--   file_url.parse(url) → {scheme, host, port, origin} | nil
--   file_url.origins(api_url) → set: origin string → true
--   file_url.allowed(url, origins) → true | false
--   file_url.resolve(url, location) → an absolute URL for a redirect's Location | nil
local M = {}

local DEFAULT_PORT = { http = 80, https = 443 }

local function host_of(authority)
  local host, port = authority:match("^(%[[%x:%.]+%]):(%d+)$")
  if not host then host = authority:match("^(%[[%x:%.]+%])$") end
  if not host then host, port = authority:match("^([%w%.%-]+):(%d+)$") end
  if not host then host = authority:match("^([%w%.%-]+)$") end
  return host, port
end

function M.parse(url)
  if type(url) ~= "string" or #url > 8192 then return nil end
  -- whitespace, control bytes and backslashes: parsers disagree on them; Slack sends none
  if url:find("[%z%c%s\\]") or url:find("[\128-\255]") then return nil end
  local scheme, authority, rest = url:match("^(%a[%w+.-]*)://([^/?#]*)(.*)$")
  if not scheme or not DEFAULT_PORT[scheme] then return nil end -- lowercase http(s) only
  if rest ~= "" and not rest:match("^/") then return nil end
  local host, port = host_of(authority)
  if not host or host:match("^%.") or host:match("%.$") or host:find("..", 1, true) then return nil end
  if port and (#port > 5 or port:match("^0")) then return nil end
  port = port and tonumber(port) or DEFAULT_PORT[scheme]
  if port < 1 or port > 65535 then return nil end
  host = host:lower()
  return { scheme = scheme, host = host, port = port, origin = ("%s://%s:%d"):format(scheme, host, port) }
end

function M.origins(api_url)
  local set = { ["https://files.slack.com:443"] = true }
  local base = M.parse(api_url)
  if base then
    set[base.origin] = true
    if base.scheme == "https" and base.host:match("%a") and not base.host:match("^%[") then
      set["https://files." .. base.host .. ":443"] = true
    end
  end
  return set
end

function M.allowed(url, origins)
  local u = M.parse(url)
  return u ~= nil and origins[u.origin] == true
end

-- A redirect's Location against the URL that answered it: absolute (http or https), or
-- absolute-path ("/…"); anything else (scheme-relative, relative paths) is refused.
function M.resolve(url, location)
  if type(location) ~= "string" then return nil end
  if location:match("^https?://") then return location end
  if not location:match("^/") or location:match("^//") then return nil end
  local u = M.parse(url)
  if not u then return nil end
  local authority = url:match("^%a[%w+.-]*://([^/?#]*)")
  return u.scheme .. "://" .. authority .. location
end

return M

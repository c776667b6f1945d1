-- The run pages' routes, served on the bot's own HTTP listeners (fronts/slack/http.lua asks
-- this handler first). Read-only; a page needs nothing but its address: the token in it is
-- 128 random bits made for that run alone, and the record keeps only its SHA-256, so a lookup
-- compares digests, not the secret, and the file does not hold working links.
--
--   local pages = routes.handler{record = rec, policy = policy.current}
--   pages(req, res) → true when it answered (GET|HEAD /runs/<token>), false otherwise
--
--   GET /runs/<32 hex>   200 text/html, the run's page (pages/render.lua); 404 when the token
--                        is unknown, malformed, expired, or policy record.pages.enabled is false
--
--   routes.PREFIX        "/runs/": a listener serving the pages gives it to core.http.serve's
--                        log_hide, so its request log lines show "/runs/<hidden>", never a token
local render = require("switchboard.pages.render")

local M = {}

M.PREFIX = "/runs/"

local NOT_FOUND = "no such run page (the link may be mistyped, or the thread expired)\n"
local TEXT = { ["content-type"] = "text/plain; charset=utf-8" }

function M.handler(o)
  return function(req, res)
    if req.path:sub(1, #M.PREFIX) ~= M.PREFIX then return false end
    local token = req.path:sub(#M.PREFIX + 1)
    if req.method ~= "GET" and req.method ~= "HEAD" then
      res:send(405, { ["content-type"] = "text/plain", allow = "GET, HEAD" }, "GET only\n")
      return true
    end
    local pol = o.policy().record.pages
    if not pol.enabled or not token:match("^%x+$") or #token ~= 32 then
      res:send(404, TEXT, NOT_FOUND)
      return true
    end
    local ok, run, events, thread = pcall(o.record.page, o.record, token:lower())
    if not ok or not run then
      res:send(404, TEXT, NOT_FOUND)
      return true
    end
    res:send(200, {
      ["content-type"] = "text/html; charset=utf-8",
      ["cache-control"] = "no-store",
      ["x-content-type-options"] = "nosniff",
      ["referrer-policy"] = "no-referrer",
      -- no script, no fetch, no framing (clickjacking): frame-ancestors, and X-Frame-Options
      -- for browsers that predate it
      -- the screenshots are data: images inside the page
      ["content-security-policy"] = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'none'",
      ["x-frame-options"] = "DENY",
    }, render.page(run, events, thread, pol))
    return true
  end
end

return M

-- The bearer check every sandboxd route runs first. The token is compared in constant time,
-- and as SHA-256 digests so that neither its bytes nor its length shape the comparison; a
-- refusal says nothing about why (missing header, wrong scheme, wrong token look alike).
local core = require("switchboard.core")

local M = {}

-- The whole answer a refused request gets: nothing that helps a guesser.
M.REFUSAL_STATUS = 401
M.REFUSAL_BODY = '{"error":"unauthorized"}'

-- The credential of an `Authorization: Bearer <credential>` value, spaces around it dropped;
-- nil for any other value. Linear in the value's length: the header comes before the bearer is
-- checked, from anyone, and a pattern such as `^Bearer +(.-) *$` backtracks quadratically over a
-- run of spaces inside it (16,000 of them held the loop for seconds, issue 22). Each find below
-- is a single-character class, tried once per position.
function M.bearer(header)
  if type(header) ~= "string" or header:sub(1, 6):lower() ~= "bearer" or header:sub(7, 7) ~= " " then
    return nil
  end
  local first = header:find("[^ ]", 8)
  if not first then return "" end
  local last = #header + 1 - header:reverse():find("[^ ]")
  return header:sub(first, last)
end

-- A request whose bearer passed carries a mark under this key: the HTTP server hands a
-- request's handler the very table its head hook let on (docs/engine.md), so the hook's check
-- holds for the handler and the bearer is hashed and compared once per request — each
-- keep-alive request is a table of its own, checked afresh. The key is a table only this file
-- holds: no other code, and nothing a client sends (the server builds the table; headers are
-- under req.headers), can set it. The mark is the digest of the token that passed, so a checker
-- of another token never takes it for its own; it goes with its request's table.
local PASSED = {}

-- token: the server's secret (non-empty). Returns check(authorization header value [, req])
-- → boolean; with req (the request table the header came from) a pass is remembered for it.
function M.checker(token)
  assert(type(token) == "string" and token ~= "", "auth.checker: a non-empty token is required")
  local want = core.crypto.sha256(token)
  return function(header, req)
    if req ~= nil and rawget(req, PASSED) == want then return true end
    local given = M.bearer(header)
    local same = core.crypto.ct_equal(want, core.crypto.sha256(given or ""))
    local ok = same and given ~= nil and given ~= ""
    if ok and req ~= nil then rawset(req, PASSED, want) end
    return ok
  end
end

return M

-- The bearer check every sandboxd route runs first. The token is compared in constant time,
-- and as SHA-256 digests so that neither its bytes nor its length shape the comparison; a
-- refusal says nothing about why (missing header, wrong scheme, wrong token look alike).
local core = require("switchboard.core")

local M = {}

-- The whole answer a refused request gets: nothing that helps a guesser.
M.REFUSAL_STATUS = 401
M.REFUSAL_BODY = '{"error":"unauthorized"}'

-- token: the server's secret (non-empty). Returns check(authorization header value) → boolean.
function M.checker(token)
  assert(type(token) == "string" and token ~= "", "auth.checker: a non-empty token is required")
  local want = core.crypto.sha256(token)
  return function(header)
    local given = type(header) == "string" and header:match("^[Bb][Ee][Aa][Rr][Ee][Rr] +(.-) *$") or nil
    local same = core.crypto.ct_equal(want, core.crypto.sha256(given or ""))
    return same and given ~= nil and given ~= ""
  end
end

return M

-- Text bounded by bytes is cut at a UTF-8 character boundary, never inside a character: one
-- rule for whatever bounds a text (the record's excerpts, a Slack ask's attached files and
-- thread, a long answer split into messages).
local M = {}

-- The largest n ≤ limit such that s:sub(1, n) does not end inside a UTF-8 sequence.
function M.prefix_len(s, limit)
  if limit >= #s then return #s end
  local n = limit
  while n > 0 do
    local b = s:byte(n + 1)
    if b == nil or b < 0x80 or b >= 0xC0 then break end -- s[n+1] starts a character
    n = n - 1
  end
  return n
end

return M

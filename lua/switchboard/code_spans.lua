-- Markdown's inline code spans (`code`), found in one place for both renderings of the model's
-- Markdown (fronts/slack/mrkdwn.lua for Slack, pages/markdown.lua for the run page): the text
-- between the spans and the spans are each given to their own function, the pieces joined. A
-- span does not cross a line break.
--
--   code_spans.map(s, on_text, on_code) → text    on_code(inside, whole): whole with its backticks
local M = {}

function M.map(s, on_text, on_code)
  local out, pos = {}, 1
  while true do
    local a, b, inside = s:find("`([^`\n]+)`", pos)
    if not a then break end
    out[#out + 1] = on_text(s:sub(pos, a - 1))
    out[#out + 1] = on_code(inside, s:sub(a, b))
    pos = b + 1
  end
  out[#out + 1] = on_text(s:sub(pos))
  return table.concat(out)
end

return M

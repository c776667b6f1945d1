-- Slack's message text, turned back into what the person typed (for the dispatcher's parser).
--
-- Slack sends `text` with its own markup (https://api.slack.com/reference/surfaces/formatting):
-- `&`, `<` and `>` are escaped as `&amp;`, `&lt;`, `&gt;`; mentions and links are in angle
-- brackets: `<@U123>`, `<@U123|ana>`, `<#C123|general>`, `<!here>`, `<!subteam^S1|@ops>`,
-- `<https://example.com>`, `<http://acme.com|acme.com>`, `<mailto:a@b.c|a@b.c>`. Backticks are
-- not markup here and survive as they are, so a command between them reaches the parser intact.
local M = {}

-- One `<…>` element → plain text. A link with a label is shown as its label (what was typed:
-- Slack linkified it); without one, as the URL.
local function element(inner)
  local head, label = inner:match("^([^|]*)|(.*)$")
  head = head or inner
  local kind = head:sub(1, 1)
  if kind == "@" then return "@" .. (label or head:sub(2)) end
  if kind == "#" then return "#" .. (label or head:sub(2)) end
  if kind == "!" then
    if label then return label end
    local word = head:sub(2):match("^[^%^]*")
    return "@" .. word
  end
  return label or head
end

-- Entities after elements, `&amp;` last, so `&amp;lt;` becomes `&lt;` (what was typed).
local function entities(s)
  return (s:gsub("&lt;", "<"):gsub("&gt;", ">"):gsub("&amp;", "&"))
end

-- The ask in `text`: leading mentions of the bot (`<@BOTID>` or `<@BOTID|name>`) removed,
-- Slack's markup undone, surrounding whitespace trimmed.
function M.ask_text(text, bot_user_id)
  text = text or ""
  if bot_user_id then
    local pat = "^%s*<@" .. bot_user_id:gsub("%W", "%%%0") .. "[^>]*>[%s:,]*"
    local n
    repeat text, n = text:gsub(pat, "", 1) until n == 0
  end
  text = text:gsub("<([^<>\n]*)>", element)
  text = entities(text)
  return (text:gsub("^%s+", ""):gsub("%s+$", ""))
end

-- Text for Slack's mrkdwn: only `&`, `<` and `>` need escaping.
function M.escape(s)
  return (tostring(s):gsub("&", "&amp;"):gsub("<", "&lt;"):gsub(">", "&gt;"))
end

return M

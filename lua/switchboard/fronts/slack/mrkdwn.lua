-- The model's Markdown as Slack's mrkdwn (https://api.slack.com/reference/surfaces/formatting):
--
--   # Heading / ## Heading      → *Heading*
--   **bold** / __bold__         → *bold*
--   *italic* / _italic_         → _italic_
--   ~~struck~~                  → ~struck~
--   [text](https://url)         → <https://url|text>
--   - item / * item / + item    → • item   (nested items keep their indent)
--   1. item                     → 1. item
--   > quote                     → > quote
--   `code`, ```fences```        → kept; their insides are only escaped (a fence's language dropped)
--   | table |                   → kept inside a code block (mrkdwn has no tables)
--
-- Everything else is escaped as mrkdwn needs (&, <, >).
--
--   mrkdwn.convert(markdown) → text
--   mrkdwn.split(text, max_bytes) → {part, …}   at blank lines, then lines, never inside a code
--                                               block (a block cut in two is closed and reopened)
local text_cut = require("switchboard.text_cut")
local code_spans = require("switchboard.code_spans")

local M = {}

local function escape(s)
  return (s:gsub("&", "&amp;"):gsub("<", "&lt;"):gsub(">", "&gt;"))
end

-- Inline markup of one line (outside code spans).
local function inline(s)
  local links = {}
  -- links first, so their URLs are not touched by the emphasis rules
  s = s:gsub("%[([^%]\n]+)%]%((https?://[^%s%)]+)%)", function(label, url)
    links[#links + 1] = ("<%s|%s>"):format(url:gsub("|", "%%7C"), escape(label))
    return "\1" .. #links .. "\2"
  end)
  s = escape(s)
  s = s:gsub("%*%*(.-%S)%*%*", "\3%1\3"):gsub("__([^%s_][^_]-)__", "\3%1\3")
  s = s:gsub("~~(.-%S)~~", "~%1~")
  s = s:gsub("%f[%w%*]%*(%S[^%*]-)%*%f[^%w%*]", "_%1_")
  s = s:gsub("\3", "*")
  s = s:gsub("\1(%d+)\2", function(i) return links[tonumber(i)] end)
  return s
end

-- A line outside code fences, code spans kept as they are (escaped).
local function line_text(line)
  return code_spans.map(line, inline, function(_, whole) return escape(whole) end)
end

local function block_line(line)
  local head = line:match("^%s*#+%s+(.-)%s*#*%s*$")
  if head then return "*" .. line_text(head):gsub("^%*(.*)%*$", "%1") .. "*" end
  local indent, rest = line:match("^(%s*)[-*+]%s+(.*)$")
  if indent and not line:match("^%s*[-*_]%s*[-*_]%s*[-*_][-*_%s]*$") then
    return indent .. "• " .. line_text(rest)
  end
  if line:match("^%s*[-*_]%s*[-*_]%s*[-*_][-*_%s]*$") then return "───" end
  local quote = line:match("^%s*>%s?(.*)$")
  if quote then return "> " .. line_text(quote) end
  return line_text(line)
end

function M.convert(md)
  md = tostring(md or ""):gsub("\r\n", "\n")
  local out, in_code, in_table = {}, false, false
  for line in (md .. "\n"):gmatch("([^\n]*)\n") do
    local fence = line:match("^%s*```")
    local is_table = not in_code and line:match("^%s*|.*|%s*$")
    if in_table and not is_table then out[#out + 1] = "```"; in_table = false end
    if fence then
      out[#out + 1] = "```"
      in_code = not in_code
    elseif in_code then
      out[#out + 1] = escape(line)
    elseif is_table then
      if not in_table then out[#out + 1] = "```"; in_table = true end
      if not line:match("^%s*|[%s:|-]+|%s*$") then out[#out + 1] = escape(line) end
    else
      out[#out + 1] = block_line(line)
    end
  end
  if in_table or in_code then out[#out + 1] = "```" end
  return (table.concat(out, "\n"):gsub("\n+$", ""))
end

-- Parts of at most max bytes: cut at the last blank line, else the last line break, else
-- anywhere (on a UTF-8 boundary) — a code block open at a cut is closed there and reopened.
function M.split(text, max)
  local parts = {}
  while #text > max do
    local room = max - 8 -- for a closing and a reopening fence
    local cut = nil
    for i = room, math.floor(room / 2), -1 do
      if text:sub(i, i + 1) == "\n\n" then cut = i; break end
    end
    if not cut then
      for i = room, math.floor(room / 2), -1 do
        if text:sub(i, i) == "\n" then cut = i; break end
      end
    end
    if not cut then
      cut = math.max(1, text_cut.prefix_len(text, room))
    end
    local head = text:sub(1, cut):gsub("\n+$", "")
    local rest = text:sub(cut + 1):gsub("^\n+", "")
    local _, fences = head:gsub("```", "")
    if fences % 2 == 1 then
      head = head .. "\n```"
      rest = "```\n" .. rest
    end
    parts[#parts + 1] = head
    text = rest
  end
  if text ~= "" then parts[#parts + 1] = text end
  return parts
end

return M
